// The expert exchange over a process group (see expert_exchange.h).
#include "distributed/expert/expert_exchange.h"

#include <optional>
#include <utility>

#include "distributed/expert/token_dispatch.h"
#include "kernels/memory/memory.h"

namespace lmf::distributed::expert {
namespace {

// A TokenDispatcher plan of one row per kept assignment (k = 1); empty after an error.
class GroupPlan final : public model::moe::ExpertExchange::Plan {
 public:
  explicit GroupPlan(int num_experts) : num_experts(num_experts) {}
  int64_t received_rows() const override { return plan.has_value() ? plan->rows() : 0; }
  int num_experts;
  std::optional<DispatchPlan> plan;
};

}  // namespace

std::unique_ptr<model::moe::ExpertExchange::Plan> GroupExpertExchange::Route(const kernels::Context& ctx,
                                                                             const int32_t* row_experts, int64_t m,
                                                                             int64_t num_experts,
                                                                             std::vector<int64_t>* counts) {
  auto plan = std::make_unique<GroupPlan>(static_cast<int>(num_experts));
  const int local = static_cast<int>(num_experts / ranks());
  counts->assign(static_cast<size_t>(local), 0);
  if (!status_.ok()) return plan;
  TokenDispatcher dispatcher(group_, plan->num_experts, ctx);
  absl::StatusOr<DispatchPlan> made = dispatcher.Plan(row_experts, m, /*k=*/1);
  if (!made.ok()) {
    status_ = made.status();
    return plan;
  }
  plan->plan = *std::move(made);
  for (int e = 0; e < local; ++e) (*counts)[e] = plan->plan->expert_rows(e);
  return plan;
}

void GroupExpertExchange::Send(const kernels::Context& ctx, const Plan& plan_base, const void* rows, size_t row_bytes,
                               void* received) {
  const auto& plan = static_cast<const GroupPlan&>(plan_base);
  if (!status_.ok() || !plan.plan.has_value()) {  // outputs not to be used: zeros rather than garbage
    kernels::FillZero(ctx, received, static_cast<size_t>(plan.received_rows()) * row_bytes);
    return;
  }
  TokenDispatcher dispatcher(group_, plan.num_experts, ctx);
  if (absl::Status s = dispatcher.DispatchSorted(*plan.plan, rows, row_bytes, received); !s.ok()) {
    status_ = s;
    kernels::FillZero(ctx, received, static_cast<size_t>(plan.received_rows()) * row_bytes);
  }
}

void GroupExpertExchange::Return(const kernels::Context& ctx, const Plan& plan_base, const void* received,
                                 size_t row_bytes, void* rows) {
  const auto& plan = static_cast<const GroupPlan&>(plan_base);
  if (!status_.ok() || !plan.plan.has_value()) return;
  TokenDispatcher dispatcher(group_, plan.num_experts, ctx);
  if (absl::Status s = dispatcher.CombineSorted(*plan.plan, received, row_bytes, rows); !s.ok()) {
    status_ = s;
    kernels::FillZero(ctx, rows, static_cast<size_t>(plan.plan->sent_rows()) * row_bytes);
  }
}

}  // namespace lmf::distributed::expert
