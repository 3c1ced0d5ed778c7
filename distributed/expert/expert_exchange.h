// GroupExpertExchange: the mixture-of-experts layer's ExpertExchange (model/layers/moe/expert_exchange.h)
// over an expert-parallel process group, through TokenDispatcher's count exchange and variable all-to-alls
// (token_dispatch.h, one row per kept assignment). The step strategy's owner builds one per run from
// ParallelMesh::expert() and hands it to LanguageModel::Create; every MoE layer of the model shares it.
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
  std::unique_ptr<Plan> Route(const int32_t* row_experts, int64_t m, int64_t num_experts,
                              std::vector<int64_t>* counts) override;
  void Send(const Plan& plan, const float* rows, int64_t c, float* received) override;
  void Return(const Plan& plan, const float* received, int64_t c, float* rows) override;
  absl::Status status() const override { return status_; }

 private:
  Collectives& group_;
  absl::Status status_;
  std::vector<float> arrived_;  // Send's rows before they are copied out
};

}  // namespace lmf::distributed::expert

#endif  // LMFORGE_DISTRIBUTED_EXPERT_EXPERT_EXCHANGE_H_
