// Expert parallelism's token exchange (see token_dispatch.h).
#include "distributed/expert/token_dispatch.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/core/tensor.h"
#include "kernels/memory/memory.h"

namespace lmf::distributed::expert {
namespace {

// `count` elements of `type` at `data` on ctx's device, as a collective's Buffer.
Buffer OnDevice(const kernels::Context& ctx, void* data, size_t count, DataType type) {
  return Buffer{data, count, type, ctx.device};
}

}  // namespace

absl::Status TokenDispatcher::ExchangeCounts(const std::vector<int64_t>& per_expert, int per_rank,
                                             std::vector<int64_t>& from) {
  const std::vector<size_t> blocks(static_cast<size_t>(group_.world_size()), static_cast<size_t>(per_rank));
  const CallOptions options{std::chrono::milliseconds(0), ctx_.stream};
  if (ctx_.device.is_cpu()) {
    return group_.AllToAll(Buffer::Host(per_expert.data(), per_expert.size()), blocks,
                           Buffer::Host(from.data(), from.size()), blocks, options);
  }
  // Staged through the device (an NCCL group moves device memory only); only the counts come back.
  const int64_t staged_count = static_cast<int64_t>(per_expert.size() + from.size());
  kernels::Tensor staged = kernels::Tensor::Empty({staged_count}, kernels::DType::kI64, ctx_.allocator);
  int64_t* out = staged.data<int64_t>();
  int64_t* in = out + per_expert.size();
  kernels::CopyToDevice(ctx_, out, per_expert.data(), per_expert.size() * sizeof(int64_t));
  if (absl::Status s = group_.AllToAll(OnDevice(ctx_, out, per_expert.size(), DataType::kI64), blocks,
                                       OnDevice(ctx_, in, from.size(), DataType::kI64), blocks, options);
      !s.ok()) {
    return s;
  }
  kernels::CopyToHost(ctx_, from.data(), in, from.size() * sizeof(int64_t));
  return absl::OkStatus();
}

absl::StatusOr<DispatchPlan> TokenDispatcher::Plan(const int32_t* experts, int64_t n, int k) {
  const int ranks = group_.world_size();
  if (num_experts_ < 1 || num_experts_ % ranks != 0) {
    return absl::InvalidArgumentError(absl::StrCat("expert parallel: ", num_experts_,
                                                   " experts do not divide over ", ranks, " ranks"));
  }
  if (n < 0 || k < 1) return absl::InvalidArgumentError(absl::StrCat("expert parallel: n=", n, ", k=", k));
  const int per_rank = num_experts_ / ranks;
  DispatchPlan plan;
  plan.n_ = n;
  plan.k_ = k;
  // This rank's assignments by expert (stable: token order within an expert), and the rows per expert.
  std::vector<int64_t> per_expert(static_cast<size_t>(num_experts_), 0);
  for (int64_t a = 0; a < n * k; ++a) {
    const int32_t e = experts[a];
    if (e < 0 || e >= num_experts_) {
      return absl::InvalidArgumentError(absl::StrCat("expert parallel: token ", a / k, " pick ", a % k,
                                                     " is expert ", e, ", not in [0, ", num_experts_, ")"));
    }
    ++per_expert[e];
  }
  plan.order_.resize(static_cast<size_t>(n * k));
  std::iota(plan.order_.begin(), plan.order_.end(), 0);
  std::stable_sort(plan.order_.begin(), plan.order_.end(),
                   [&](int64_t a, int64_t b) { return experts[a] < experts[b]; });
  plan.send_rows_.assign(ranks, 0);
  for (int e = 0; e < num_experts_; ++e) plan.send_rows_[e / per_rank] += static_cast<size_t>(per_expert[e]);
  // The counts: per_expert's block for rank q goes to q; from_[source][local expert] comes back.
  plan.from_.assign(static_cast<size_t>(ranks) * per_rank, 0);
  if (absl::Status s = ExchangeCounts(per_expert, per_rank, plan.from_); !s.ok()) return s;
  plan.recv_rows_.assign(ranks, 0);
  plan.expert_rows_.assign(per_rank, 0);
  for (int source = 0; source < ranks; ++source) {
    for (int e = 0; e < per_rank; ++e) {
      const int64_t rows = plan.from_[static_cast<size_t>(source) * per_rank + e];
      plan.recv_rows_[source] += static_cast<size_t>(rows);
      plan.expert_rows_[e] += rows;
    }
  }
  plan.expert_offset_.assign(per_rank, 0);
  for (int e = 1; e < per_rank; ++e) plan.expert_offset_[e] = plan.expert_offset_[e - 1] + plan.expert_rows_[e - 1];
  plan.rows_ = std::accumulate(plan.expert_rows_.begin(), plan.expert_rows_.end(), int64_t{0});
  return plan;
}

void TokenDispatcher::Rearrange(const DispatchPlan& plan, size_t row_bytes, const void* from, void* to,
                                bool to_expert_major) const {
  const int experts = plan.local_experts();
  std::vector<int64_t> next(static_cast<size_t>(experts));  // each local expert's next row, expert-major
  for (int e = 0; e < experts; ++e) next[e] = plan.expert_offset(e);
  int64_t arrived = 0;  // the block's first row in the all-to-all's layout
  for (int source = 0; source < group_.world_size(); ++source) {
    for (int e = 0; e < experts; ++e) {
      const int64_t rows = plan.rows_from(source, e);
      if (rows == 0) continue;
      const int64_t src = to_expert_major ? arrived : next[e], dst = to_expert_major ? next[e] : arrived;
      kernels::CopyOnDevice(ctx_, static_cast<char*>(to) + dst * row_bytes,
                            static_cast<const char*>(from) + src * row_bytes, rows * row_bytes);
      arrived += rows, next[e] += rows;
    }
  }
}

absl::Status TokenDispatcher::MoveRows(const void* send, const std::vector<size_t>& send_rows, void* recv,
                                       const std::vector<size_t>& recv_rows, size_t row_bytes) {
  std::vector<size_t> send_counts(send_rows), recv_counts(recv_rows);
  size_t sent = 0, received = 0;
  for (size_t& c : send_counts) sent += (c *= row_bytes);
  for (size_t& c : recv_counts) received += (c *= row_bytes);
  return group_.AllToAll(OnDevice(ctx_, const_cast<void*>(send), sent, DataType::kU8), send_counts,
                         OnDevice(ctx_, recv, received, DataType::kU8), recv_counts,
                         CallOptions{std::chrono::milliseconds(0), ctx_.stream});
}

absl::Status TokenDispatcher::DispatchSorted(const DispatchPlan& plan, const void* sorted, size_t row_bytes,
                                             void* rows) {
  if (plan.local_experts() == 1) return MoveRows(sorted, plan.send_rows_, rows, plan.recv_rows_, row_bytes);
  kernels::Tensor arrived = kernels::Tensor::Empty({std::max<int64_t>(plan.rows_ * static_cast<int64_t>(row_bytes), 1)},
                                                   kernels::DType::kU8, ctx_.allocator);
  if (absl::Status s = MoveRows(sorted, plan.send_rows_, arrived.data(), plan.recv_rows_, row_bytes); !s.ok()) return s;
  Rearrange(plan, row_bytes, arrived.data(), rows, /*to_expert_major=*/true);
  kernels::Synchronize(ctx_);  // `arrived` is freed on return: its copies must be done
  return absl::OkStatus();
}

absl::Status TokenDispatcher::CombineSorted(const DispatchPlan& plan, const void* rows, size_t row_bytes,
                                            void* sorted) {
  if (plan.local_experts() == 1) return MoveRows(rows, plan.recv_rows_, sorted, plan.send_rows_, row_bytes);
  kernels::Tensor back = kernels::Tensor::Empty({std::max<int64_t>(plan.rows_ * static_cast<int64_t>(row_bytes), 1)},
                                                kernels::DType::kU8, ctx_.allocator);
  Rearrange(plan, row_bytes, rows, back.data(), /*to_expert_major=*/false);
  return MoveRows(back.data(), plan.recv_rows_, sorted, plan.send_rows_, row_bytes);  // waits for the copies
}

absl::Status TokenDispatcher::Dispatch(const DispatchPlan& plan, const float* x, int64_t d,
                                       std::vector<float>* rows) {
  LMF_CHECK(ctx_.device.is_cpu()) << "TokenDispatcher::Dispatch moves host rows: use DispatchSorted on " << ctx_.device;
  const size_t row_bytes = static_cast<size_t>(d) * sizeof(float);
  std::vector<float> send(plan.order_.size() * static_cast<size_t>(d));
  for (size_t i = 0; i < plan.order_.size(); ++i) {
    std::memcpy(&send[i * d], x + (plan.order_[i] / plan.k_) * d, row_bytes);
  }
  rows->resize(static_cast<size_t>(plan.rows_ * d));
  return DispatchSorted(plan, send.data(), row_bytes, rows->data());
}

absl::Status TokenDispatcher::Combine(const DispatchPlan& plan, const float* rows, int64_t d, float* out) {
  LMF_CHECK(ctx_.device.is_cpu()) << "TokenDispatcher::Combine moves host rows: use CombineSorted on " << ctx_.device;
  const size_t row_bytes = static_cast<size_t>(d) * sizeof(float);
  std::vector<float> returned(plan.order_.size() * static_cast<size_t>(d));
  if (absl::Status s = CombineSorted(plan, rows, row_bytes, returned.data()); !s.ok()) return s;
  for (size_t i = 0; i < plan.order_.size(); ++i) std::memcpy(out + plan.order_[i] * d, &returned[i * d], row_bytes);
  return absl::OkStatus();
}

}  // namespace lmf::distributed::expert
