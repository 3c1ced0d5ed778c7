// GroupExpertExchange: the mixture-of-experts layer's ExpertExchange (model/layers/moe/expert_exchange.h)
// over an expert-parallel process group, through TokenDispatcher's count exchange and variable all-to-alls
// (token_dispatch.h, one row per kept assignment, already sorted by expert: DispatchSorted/CombineSorted).
// The step strategy's owner builds one per run from ParallelMesh::expert() and hands it to
// LanguageModel::Create; every MoE layer of the model shares it. Each call's Context says where the rows
// live: a Gloo group's host, or the device of an NCCL group's rank (the counts staged through it).
#ifndef LMFORGE_DISTRIBUTED_EXPERT_EXPERT_EXCHANGE_H_
#define LMFORGE_DISTRIBUTED_EXPERT_EXPERT_EXCHANGE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "distributed/collectives.h"
#include "model/layers/moe/expert_exchange.h"

namespace lmf::distributed::expert {

class GroupExpertExchange final : public model::moe::ExpertExchange {
 public:
  // `group`: the expert-parallel ranks, kept by the caller for this object's lifetime.
  explicit GroupExpertExchange(Collectives& group) : group_(group) {}

  int ranks() const override { return group_.world_size(); }
  int rank() const override { return group_.rank(); }
  std::unique_ptr<Plan> Route(const kernels::Context& ctx, const int32_t* row_experts, int64_t m,
                              int64_t num_experts, std::vector<int64_t>* counts) override;
  void Send(const kernels::Context& ctx, const Plan& plan, const void* rows, size_t row_bytes,
            void* received) override;
  void Return(const kernels::Context& ctx, const Plan& plan, const void* received, size_t row_bytes,
              void* rows) override;
  absl::Status status() const override { return status_; }

 private:
  Collectives& group_;
  absl::Status status_;
};

}  // namespace lmf::distributed::expert

#endif  // LMFORGE_DISTRIBUTED_EXPERT_EXPERT_EXCHANGE_H_
