// Expert parallelism's token exchange (see token_dispatch.h).
#include "distributed/expert/token_dispatch.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace lmf::distributed::expert {

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
  const std::vector<size_t> blocks(ranks, static_cast<size_t>(per_rank));
  if (absl::Status s = group_.AllToAll(Buffer::Host(per_expert.data(), per_expert.size()), blocks,
                                       Buffer::Host(plan.from_.data(), plan.from_.size()), blocks);
      !s.ok()) {
    return s;
  }
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

namespace {

// Rows as they arrive from the all-to-all (by source, then by local expert) and in expert-major order: the
// index of each arrived row's place in the expert-major layout.
std::vector<int64_t> ArrivedToExpertMajor(const DispatchPlan& plan, int ranks) {
  std::vector<int64_t> place;
  place.reserve(static_cast<size_t>(plan.rows()));
  std::vector<int64_t> next(static_cast<size_t>(plan.local_experts()));
  for (int e = 0; e < plan.local_experts(); ++e) next[e] = plan.expert_offset(e);
  for (int source = 0; source < ranks; ++source) {
    for (int e = 0; e < plan.local_experts(); ++e) {
      for (int64_t r = 0; r < plan.rows_from(source, e); ++r) place.push_back(next[e]++);
    }
  }
  return place;
}

}  // namespace

absl::Status TokenDispatcher::Dispatch(const DispatchPlan& plan, const float* x, int64_t d,
                                       std::vector<float>* rows) {
  const size_t row_bytes = static_cast<size_t>(d) * sizeof(float);
  std::vector<float> send(plan.order_.size() * static_cast<size_t>(d));
  for (size_t i = 0; i < plan.order_.size(); ++i) {
    std::memcpy(&send[i * d], x + (plan.order_[i] / plan.k_) * d, row_bytes);
  }
  std::vector<size_t> send_counts(plan.send_rows_), recv_counts(plan.recv_rows_);
  for (size_t& c : send_counts) c *= static_cast<size_t>(d);
  for (size_t& c : recv_counts) c *= static_cast<size_t>(d);
  std::vector<float> arrived(static_cast<size_t>(plan.rows_ * d));
  if (absl::Status s = group_.AllToAll(Buffer::Host(send.data(), send.size()), send_counts,
                                       Buffer::Host(arrived.data(), arrived.size()), recv_counts);
      !s.ok()) {
    return s;
  }
  const std::vector<int64_t> place = ArrivedToExpertMajor(plan, group_.world_size());
  rows->resize(arrived.size());
  for (size_t i = 0; i < place.size(); ++i) std::memcpy(rows->data() + place[i] * d, &arrived[i * d], row_bytes);
  return absl::OkStatus();
}

absl::Status TokenDispatcher::Combine(const DispatchPlan& plan, const float* rows, int64_t d, float* out) {
  const size_t row_bytes = static_cast<size_t>(d) * sizeof(float);
  const std::vector<int64_t> place = ArrivedToExpertMajor(plan, group_.world_size());
  std::vector<float> back(static_cast<size_t>(plan.rows_ * d));
  for (size_t i = 0; i < place.size(); ++i) std::memcpy(&back[i * d], rows + place[i] * d, row_bytes);
  std::vector<size_t> send_counts(plan.recv_rows_), recv_counts(plan.send_rows_);
  for (size_t& c : send_counts) c *= static_cast<size_t>(d);
  for (size_t& c : recv_counts) c *= static_cast<size_t>(d);
  std::vector<float> returned(plan.order_.size() * static_cast<size_t>(d));
  if (absl::Status s = group_.AllToAll(Buffer::Host(back.data(), back.size()), send_counts,
                                       Buffer::Host(returned.data(), returned.size()), recv_counts);
      !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < plan.order_.size(); ++i) std::memcpy(out + plan.order_[i] * d, &returned[i * d], row_bytes);
  return absl::OkStatus();
}

}  // namespace lmf::distributed::expert
