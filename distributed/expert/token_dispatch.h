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
// it, with their own n (0 allowed). Host fp32 rows (the CPU backend); errors are the collectives' (a dead
// or stalled peer named within the timeout).
#ifndef LMFORGE_DISTRIBUTED_EXPERT_TOKEN_DISPATCH_H_
#define LMFORGE_DISTRIBUTED_EXPERT_TOKEN_DISPATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "distributed/collectives.h"

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
  // the config: InvalidArgument from Plan otherwise).
  TokenDispatcher(Collectives& group, int num_experts) : group_(group), num_experts_(num_experts) {}

  // experts (n, k) in host memory: token i's j-th expert in [0, num_experts). Exchanges the counts (one
  // all-to-all). InvalidArgument for an expert id out of range or experts not divisible over the ranks.
  absl::StatusOr<DispatchPlan> Plan(const int32_t* experts, int64_t n, int k);
  // x (n, d) -> rows (plan.rows(), d): local expert 0's rows from rank 0, from rank 1, ..., then local
  // expert 1's, ...; within one source, in the source's token order.
  absl::Status Dispatch(const DispatchPlan& plan, const float* x, int64_t d, std::vector<float>* rows);
  // rows (plan.rows(), d) in Dispatch's layout -> out (n * k, d), row i*k + j for token i's j-th pick.
  absl::Status Combine(const DispatchPlan& plan, const float* rows, int64_t d, float* out);

 private:
  Collectives& group_;
  int num_experts_;
};

}  // namespace lmf::distributed::expert

#endif  // LMFORGE_DISTRIBUTED_EXPERT_TOKEN_DISPATCH_H_
