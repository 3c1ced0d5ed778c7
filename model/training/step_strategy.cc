// The single-process step and the parts every strategy shares (see step_strategy.h).
#include "model/training/step_strategy.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace lmf::model {

absl::StatusOr<LossSums> AccumulateGradients(LanguageModel& model, MicroBatchSource& data, const StepInput& input,
                                             int64_t first, int64_t count) {
  std::vector<int32_t> ids(static_cast<size_t>(input.b * input.t)), targets(ids.size());
  model.ZeroGrad();
  LossSums sums;
  for (int64_t micro = 0; micro < input.micro_batches; ++micro) {
    if (micro < first || micro >= first + count) {  // another process's micro-batch
      data.Skip();
      continue;
    }
    if (absl::Status s = data.Next(ids.data(), targets.data()); !s.ok()) return s;
    absl::StatusOr<double> loss = model.ForwardWithLoss(
        ids.data(), targets.data(), input.b, input.t,
        ForwardMode::Training(input.seed, input.step, micro * input.b * input.t));
    if (!loss.ok()) return loss.status();
    model.Backward();
    if (micro == first && input.micro_batches >= 2) {
      const double norm = GradientNorm(model);
      sums.first_grad_sq = norm * norm;
    }
    sums.loss += *loss;
    sums.z_loss += model.z_loss_term();
    sums.aux_loss += model.aux_loss();
  }
  return sums;
}

ExpertLoadStats SummarizeExpertLoad(const LanguageModel& model) {
  NamedCounts counts;
  model.VisitStepCounts([&](const std::string& name, const kernels::Tensor& t) {
    counts.emplace_back(name, std::vector<float>(t.data<float>(), t.data<float>() + t.numel()));
  });
  return SummarizeExpertLoad(counts);
}

ExpertLoadStats SummarizeExpertLoad(const NamedCounts& counts) {
  ExpertLoadStats stats;
  double routed = 0, dropped = 0;
  const auto ends_with = [](const std::string& name, const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (const auto& [name, c] : counts) {
    double sum = 0, most = 0;
    for (const float x : c) sum += x, most = std::max(most, double{x});
    if (ends_with(name, ".expert_load")) {
      routed += sum;
      stats.loads.emplace_back(name.substr(0, name.size() - std::string(".router.expert_load").size()),
                               std::vector<double>(c.begin(), c.end()));
      if (sum > 0) stats.max_over_mean = std::max(stats.max_over_mean, most * static_cast<double>(c.size()) / sum);
    } else if (ends_with(name, ".expert_dropped")) {
      dropped += sum;
    }
  }
  stats.dropped_share = routed > 0 ? dropped / routed : 0;
  return stats;
}

StepResult FinishStep(LanguageModel& model, AdamW& optimizer, const StepInput& input, const LossSums& sums,
                      int stop_signal, std::optional<double> summed_norm) {
  StepResult result;
  result.loss = sums.loss / static_cast<double>(input.micro_batches);
  result.z_loss = sums.z_loss / static_cast<double>(input.micro_batches);
  result.aux_loss = sums.aux_loss / static_cast<double>(input.micro_batches);
  const double mb = static_cast<double>(input.micro_batches);
  if (!std::isfinite(result.loss)) {
    result.grad_norm = NAN;
  } else if (summed_norm.has_value()) {  // the norm of the gradients' sum; the step takes its mean's
    result.grad_norm = optimizer.StepWithNorm(model, input.lr, input.micro_batches, *summed_norm / mb,
                                              GradsAfterStep::kZeroed);
  } else {
    result.grad_norm = optimizer.Step(model, input.lr, input.micro_batches, GradsAfterStep::kZeroed);
  }
  EstimateNoiseScale(input, sums.first_grad_sq, &result);
  const ExpertLoadStats load = SummarizeExpertLoad(model);
  result.expert_load_max_over_mean = load.max_over_mean;
  result.dropped_share = load.dropped_share;
  result.expert_loads = load.loads;
  model.EndStep();
  result.stop_signal = stop_signal;
  return result;
}

void EstimateNoiseScale(const StepInput& input, double first_grad_sq, StepResult* result) {
  if (!std::isfinite(first_grad_sq) || !std::isfinite(result->grad_norm) || input.micro_batches < 2) return;
  const double small = static_cast<double>(input.b * input.t),
               big = small * static_cast<double>(input.micro_batches);
  const double small_sq = first_grad_sq, big_sq = result->grad_norm * result->grad_norm;
  result->noise_grad_sq = (big * big_sq - small * small_sq) / (big - small);
  result->noise_trace = (small_sq - big_sq) / (1.0 / small - 1.0 / big);
}

absl::StatusOr<StepResult> SingleProcessStep::Step(LanguageModel& model, AdamW& optimizer, MicroBatchSource& data,
                                                   const StepInput& input) {
  absl::StatusOr<LossSums> sums = AccumulateGradients(model, data, input, 0, input.micro_batches);
  if (!sums.ok()) return sums.status();
  return FinishStep(model, optimizer, input, *sums, input.received_signal ? input.received_signal() : 0);
}

}  // namespace lmf::model
