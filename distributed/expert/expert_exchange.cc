// The expert exchange over a process group (see expert_exchange.h).
#include "distributed/expert/expert_exchange.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "distributed/expert/token_dispatch.h"

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

std::unique_ptr<model::moe::ExpertExchange::Plan> GroupExpertExchange::Route(const int32_t* row_experts, int64_t m,
                                                                             int64_t num_experts,
                                                                             std::vector<int64_t>* counts) {
  auto plan = std::make_unique<GroupPlan>(static_cast<int>(num_experts));
  const int local = static_cast<int>(num_experts / ranks());
  counts->assign(static_cast<size_t>(local), 0);
  if (!status_.ok()) return plan;
  TokenDispatcher dispatcher(group_, plan->num_experts);
  absl::StatusOr<DispatchPlan> made = dispatcher.Plan(row_experts, m, /*k=*/1);
  if (!made.ok()) {
    status_ = made.status();
    return plan;
  }
  plan->plan = *std::move(made);
  for (int e = 0; e < local; ++e) (*counts)[e] = plan->plan->expert_rows(e);
  return plan;
}

void GroupExpertExchange::Send(const Plan& plan_base, const float* rows, int64_t c, float* received) {
  const auto& plan = static_cast<const GroupPlan&>(plan_base);
  const int64_t r = plan.received_rows();
  std::fill(received, received + r * c, 0.0f);
  if (!status_.ok() || !plan.plan.has_value()) return;
  TokenDispatcher dispatcher(group_, plan.num_experts);
  if (absl::Status s = dispatcher.Dispatch(*plan.plan, rows, c, &arrived_); !s.ok()) {
    status_ = s;
    return;
  }
  std::copy(arrived_.begin(), arrived_.end(), received);
}

void GroupExpertExchange::Return(const Plan& plan_base, const float* received, int64_t c, float* rows) {
  const auto& plan = static_cast<const GroupPlan&>(plan_base);
  const int64_t m = plan.plan.has_value() ? plan.plan->tokens() : 0;
  if (!status_.ok() || !plan.plan.has_value()) return;
  TokenDispatcher dispatcher(group_, plan.num_experts);
  if (absl::Status s = dispatcher.Combine(*plan.plan, received, c, rows); !s.ok()) {
    status_ = s;
    std::fill(rows, rows + m * c, 0.0f);
  }
}

}  // namespace lmf::distributed::expert
