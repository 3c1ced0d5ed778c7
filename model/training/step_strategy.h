// StepStrategy: how one optimizer step's gradients are computed and the update applied, so that the trainer's
// run driver (experiments/trainer: run folder, resume, schedule, eval, checkpoints, metrics) is written once
// for every kind of parallelism. SingleProcessStep runs every micro-batch here; distributed/'s strategies
// (data parallel now; pipeline and expert parallel next) split them over processes and are applied from
// outside the single-device model code, as torchtitan applies its parallelisms.
#ifndef LMFORGE_MODEL_TRAINING_STEP_STRATEGY_H_
#define LMFORGE_MODEL_TRAINING_STEP_STRATEGY_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/language_model/language_model.h"
#include "model/optimizer/adamw.h"

namespace lmf::model {

// Where a step's micro-batches come from, in order: each one is B sequences of T token ids and their
// targets (host int32), or skipped (another process trains on it, and the stream must stay in step).
class MicroBatchSource {
 public:
  virtual ~MicroBatchSource() = default;
  virtual absl::Status Next(int32_t* ids, int32_t* targets) = 0;
  virtual void Skip() = 0;
};

struct StepInput {
  int64_t micro_batches = 1;  // per optimizer step, over every process
  int64_t b = 0, t = 0;       // each micro-batch's shape
  double lr = 0;
  // The key of the step's random draws (ForwardMode: noisy gating): the run's seed and this step's index
  // (0-based). Micro-batch m's forward is ForwardMode::Training(seed, step, m * b * t).
  uint64_t seed = 0;
  int64_t step = 0;
  // The signal this process has received so far (0: none), asked once the step's own work is done and agreed
  // on with the other processes; unset: none.
  std::function<int()> received_signal;
};

struct StepResult {
  double loss = 0;       // mean cross-entropy over every micro-batch of the step
  double z_loss = 0;     // mean z-loss term
  double aux_loss = 0;   // mean of the layers' auxiliary losses (mixture-of-experts balancing and router z-loss)
  // Mixture-of-experts layers (0 without): the largest expert load over the mean load of its layer, the
  // worst layer's (1: balanced), and the share of the step's assignments dropped over capacity.
  double expert_load_max_over_mean = 0;
  double dropped_share = 0;
  // Each MoE layer's assignments per expert over the step (before any capacity drop; every process's),
  // by the layer's name ("layers.1.ffn"), in layer order.
  std::vector<std::pair<std::string, std::vector<double>>> expert_loads;
  double grad_norm = 0;  // global norm of the mean gradient before clipping; NaN when the loss is not finite
  int stop_signal = 0;   // a signal any process received (the same on every process)
  // The gradient noise scale's two parts from this step's two batch sizes (McCandlish et al. 2018,
  // appendix A.1): a micro-batch of B_small = b t tokens and the step of B_big = micro_batches b t, with
  // |g_small|^2 the first micro-batch's (the ranks' mean) and |G_big|^2 = grad_norm^2: unbiased estimates of
  // |G|^2 = (B_big |G_big|^2 - B_small |g_small|^2) / (B_big - B_small) and of tr(Sigma) (per token) =
  // (|g_small|^2 - |G_big|^2) / (1 / B_small - 1 / B_big). B_simple = tr(Sigma) / |G|^2, in tokens, is
  // the ratio of their means over many steps (one step's is noisy). NaN with one micro-batch per step.
  double noise_grad_sq = NAN, noise_trace = NAN;
};

class StepStrategy {
 public:
  virtual ~StepStrategy() = default;
  virtual int rank() const { return 0; }
  virtual int world_size() const { return 1; }
  // Which of a step's micro-batches this process computes: [first, first + count).
  virtual int64_t first_micro_batch(int64_t /*micro_batches*/) const { return 0; }
  virtual int64_t micro_batch_count(int64_t micro_batches) const { return micro_batches; }

  // Before the first step: every replica's weights made equal (rank 0's).
  virtual absl::Status SyncParameters(LanguageModel& model) = 0;
  // One optimizer step: zero the gradients, forward and backward this process's micro-batches (the others
  // skipped in `data`), reduce the gradients and losses over the processes, and apply AdamW at input.lr
  // unless the loss is not finite (then grad_norm is NaN and nothing changes).
  virtual absl::StatusOr<StepResult> Step(LanguageModel& model, AdamW& optimizer, MicroBatchSource& data,
                                          const StepInput& input) = 0;
  // In-place sum of per-process values (shares of an evaluation), the same on every process.
  virtual absl::Status SumOverProcesses(std::vector<double>& values) = 0;
  // After `step`: every replica holds the same weights, or an error naming the one that differs.
  virtual absl::Status CheckReplicasAgree(const LanguageModel& model, int64_t step) = 0;
};

// Every micro-batch in this process: gradient accumulation.
class SingleProcessStep final : public StepStrategy {
 public:
  absl::Status SyncParameters(LanguageModel&) override { return absl::OkStatus(); }
  absl::StatusOr<StepResult> Step(LanguageModel& model, AdamW& optimizer, MicroBatchSource& data,
                                  const StepInput& input) override;
  absl::Status SumOverProcesses(std::vector<double>&) override { return absl::OkStatus(); }
  absl::Status CheckReplicasAgree(const LanguageModel&, int64_t) override { return absl::OkStatus(); }
};

// The part of a step every strategy shares: zero the gradients, then forward and backward this process's
// micro-batches [first, first + count) of input.micro_batches from `data` (skipping the others), on the
// model's own activations, as training forwards. Returns the sums of their losses, z-loss terms and auxiliary losses.
struct LossSums {
  double loss = 0, z_loss = 0, aux_loss = 0;
  // |g|^2 of this process's first micro-batch's gradient, when the step has 2 or more micro-batches (for
  // the gradient noise scale); NaN otherwise.
  double first_grad_sq = NAN;
};
absl::StatusOr<LossSums> AccumulateGradients(LanguageModel& model, MicroBatchSource& data, const StepInput& input,
                                             int64_t first, int64_t count);
// The expert-load metrics of StepResult from the step's counts (LanguageModel::VisitStepCounts), before
// EndStep clears them.
struct ExpertLoadStats {
  double max_over_mean = 0, dropped_share = 0;
  std::vector<std::pair<std::string, std::vector<double>>> loads;  // StepResult::expert_loads
};
ExpertLoadStats SummarizeExpertLoad(const LanguageModel& model);
// The same from step counts by their VisitStepCounts names, in layer order: those of a model whose layers
// are spread over processes (a pipeline's stages gather theirs).
using NamedCounts = std::vector<std::pair<std::string, std::vector<float>>>;
ExpertLoadStats SummarizeExpertLoad(const NamedCounts& counts);

// The mean losses and the update: AdamW at input.lr over the accumulated gradients when the mean loss is
// finite (else grad_norm NaN and the weights do not change); then the model's once-per-step state update
// from the step's counts (LanguageModel::EndStep, summed over the processes already). `summed_norm`: the
// gradients' norm when the model holds part of them (AdamW::Step). The update leaves the gradients zero
// where it can (GradsAfterStep::kZeroed), for the next step's ZeroGrad.
StepResult FinishStep(LanguageModel& model, AdamW& optimizer, const StepInput& input, const LossSums& sums,
                      int stop_signal, std::optional<double> summed_norm = std::nullopt);
// The gradient noise scale's parts (StepResult::noise_grad_sq, noise_trace) from |g_small|^2 =
// `first_grad_sq` (a micro-batch's, the ranks' mean) and result->grad_norm; left as they are (NaN) unless
// both are finite and the step has 2 or more micro-batches. FinishStep calls it; so do strategies that
// apply the update themselves (distributed/pipeline's).
void EstimateNoiseScale(const StepInput& input, double first_grad_sq, StepResult* result);

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_TRAINING_STEP_STRATEGY_H_
