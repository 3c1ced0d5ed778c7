// Expert parallelism's token exchange: the experts of a mixture-of-experts layer are placed in contiguous
// blocks over the ranks of an expert-parallel group (rank q holds experts [q E/ep, (q+1) E/ep)), and each
// rank's routed tokens travel to the ranks of their experts and back through two all-to-alls with variable
// counts, the counts exchanged first.
//
//   TokenDispatcher dispatcher(ep_group, /*num_experts=*/8);
//   absl::StatusOr<DispatchPlan> plan = dispatcher.Plan(experts, n, k);   // experts (n, k): each token's picks
//   dispatcher.Dispatch(*plan, x, d, &rows);      // x (n, d) -> rows (plan->rows(), d), grouped by local expert
//   ... each local expert e runs on rows [plan->expert_offset(e), + plan->expert_rows(e)) as one GEMM ...
//   dispatcher.Combine(*plan, y_rows, d, out);    // -> out (n * k, d): row i*k + j is token i's j-th expert's
//                                                 //    output; the caller weights by the gates and sums over j
//
// Backward: Dispatch and Combine move rows without arithmetic, so each one's gradient is the other: the
// gradient of the dispatched rows comes back by Combine (then summed over each token's k picks), the
// gradient of the combined rows goes out by Dispatch. Every call is a collective of the group: all ranks call
// it, with their own n (0 allowed). Errors are the collectives' (a dead or stalled peer named within the
// timeout).
//
// Memory: the dispatcher's Context names where the group's buffers live: the host (Gloo) or this rank's
// device (NCCL, which moves device memory only: Plan stages the counts through the device and copies only
// them back). DispatchSorted and CombineSorted move rows of any type on that device, already in send order
// (sorted by expert, as a mixture of experts' dispatch keeps them): one all-to-all of the rows and one copy
// per (source, local expert) block. Dispatch and Combine are their host forms for unsorted (n, k) picks of
// fp32 rows: they gather into send order, and scatter back, on the host around them.
#ifndef LMFORGE_DISTRIBUTED_EXPERT_TOKEN_DISPATCH_H_
#define LMFORGE_DISTRIBUTED_EXPERT_TOKEN_DISPATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "distributed/collectives.h"
#include "kernels/core/context.h"

namespace lmf::distributed::expert {

// Where one rank's routed tokens go and where the rows it receives come from.
class DispatchPlan {
 public:
  int64_t tokens() const { return n_; }
  int top_k() const { return k_; }
  int64_t rows() const { return rows_; }  // rows this rank's experts receive, from every rank
  int local_experts() const { return static_cast<int>(expert_rows_.size()); }
  // Rows of local expert e (this rank's e-th expert), and where they start in the dispatched rows.
  int64_t expert_rows(int e) const { return expert_rows_[e]; }
  int64_t expert_offset(int e) const { return expert_offset_[e]; }
  // Rows this rank receives from rank `source` for local expert e (who sent what).
  int64_t rows_from(int source, int e) const { return from_[static_cast<size_t>(source) * expert_rows_.size() + e]; }
  int64_t sent_rows() const { return static_cast<int64_t>(order_.size()); }  // n * k: this rank's rows out

 private:
  friend class TokenDispatcher;
  int64_t n_ = 0;
  int k_ = 0;
  int64_t rows_ = 0;
  std::vector<int64_t> order_;         // this rank's assignments (i*k + j) in send order: by expert, then i
  std::vector<size_t> send_rows_;      // [rank] rows sent to it
  std::vector<size_t> recv_rows_;      // [rank] rows received from it
  std::vector<int64_t> from_;          // [source rank][local expert] rows received
  std::vector<int64_t> expert_rows_, expert_offset_;  // [local expert]
};

class TokenDispatcher {
 public:
  // `group`: the expert-parallel ranks; num_experts must be a multiple of its size (the caller validates
  // the config: InvalidArgument from Plan otherwise). `ctx`: where the group's buffers live (the host, or
  // the device of an NCCL group; its stream orders the copies and the collectives), kept by value.
  TokenDispatcher(Collectives& group, int num_experts, const kernels::Context& ctx = kernels::Context::Cpu())
      : group_(group), num_experts_(num_experts), ctx_(ctx) {}

  // experts (n, k) in host memory: token i's j-th expert in [0, num_experts). Exchanges the counts (one
  // all-to-all). InvalidArgument for an expert id out of range or experts not divisible over the ranks.
  absl::StatusOr<DispatchPlan> Plan(const int32_t* experts, int64_t n, int k);
  // sorted (n * k, row_bytes) on ctx's device, this rank's rows in send order (by expert, then by token
  // and pick) -> rows (plan.rows(), row_bytes) written: local expert 0's rows from rank 0, from rank 1,
  // ..., then local expert 1's, ...; within one source, in the source's order. The buffers must not overlap.
  absl::Status DispatchSorted(const DispatchPlan& plan, const void* sorted, size_t row_bytes, void* rows);
  // rows (plan.rows(), row_bytes) in DispatchSorted's layout -> sorted (n * k, row_bytes) written, each row
  // back in its sender's send order.
  absl::Status CombineSorted(const DispatchPlan& plan, const void* rows, size_t row_bytes, void* sorted);
  // Host fp32 (a CPU dispatcher only): x (n, d) -> rows (plan.rows(), d), DispatchSorted's layout.
  absl::Status Dispatch(const DispatchPlan& plan, const float* x, int64_t d, std::vector<float>* rows);
  // Host fp32: rows (plan.rows(), d) in Dispatch's layout -> out (n * k, d), row i*k + j for token i's j-th
  // pick.
  absl::Status Combine(const DispatchPlan& plan, const float* rows, int64_t d, float* out);

 private:
  // per_expert (E) this rank's rows per expert -> from (ranks, E/ranks): the rows each rank sends each local
  // expert here.
  absl::Status ExchangeCounts(const std::vector<int64_t>& per_expert, int per_rank, std::vector<int64_t>& from);
  // The rows between the all-to-all's layout (by source, then local expert) and the expert-major one,
  // one copy per (source, local expert) block on ctx's device.
  void Rearrange(const DispatchPlan& plan, size_t row_bytes, const void* from, void* to, bool to_expert_major) const;
  // One all-to-all of rows: send_rows[q] rows of row_bytes to rank q, recv_rows[q] from it.
  absl::Status MoveRows(const void* send, const std::vector<size_t>& send_rows, void* recv,
                        const std::vector<size_t>& recv_rows, size_t row_bytes);

  Collectives& group_;
  int num_experts_;
  kernels::Context ctx_;
};

}  // namespace lmf::distributed::expert

#endif  // LMFORGE_DISTRIBUTED_EXPERT_TOKEN_DISPATCH_H_
