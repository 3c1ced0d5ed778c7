// The gradient noise scale of a sweep's runs against their loss (McCandlish et al. 2018, "An Empirical Model
// of Large-Batch Training"): B_simple = tr(Sigma) / |G|^2, read from the per-step estimates the trainer logs
// in metrics.jsonl (noise_trace, noise_grad_sq: runs with run.grad_accum_steps >= 2) and smoothed as the
// trainer's TensorBoard scalar is, the ratio of their exponential moving averages (decay 0.99). The report
// plots it against the training loss beside each budget's fitted B_opt (scaling/fit/hyperparameter.h).
#ifndef LMFORGE_SCALING_REPORTING_NOISE_SCALE_H_
#define LMFORGE_SCALING_REPORTING_NOISE_SCALE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "experiments/metrics/metrics_log.h"
#include "scaling/results.h"

namespace lmf::scaling {

struct NoiseScaleCurve {
  std::string run;
  double budget = 0;              // the run's budget_flops (0 outside an IsoFLOP design)
  double batch_size = 0;          // sequences per step, as the results table records it
  std::vector<double> loss;       // per logged estimate: moving average of the training loss
  std::vector<double> b_simple;   // per logged estimate: B_simple in sequences (tokens / tokens per sequence)
};

// The estimates a moving average needs before its ratio is plotted (the first few steps' ratio rests on a
// handful of noisy estimates).
inline constexpr int kNoiseScaleWarmupEstimates = 5;

// The curve of one run from its metrics.jsonl lines: the steps with both estimates, from the
// kNoiseScaleWarmupEstimates-th on (the loss average bias-corrected, the ratio needs no correction). Tokens
// per sequence come from the log's tokens per step over `batch_size`. Empty when fewer estimates.
NoiseScaleCurve NoiseScaleFromMetrics(const std::vector<experiments::StepMetrics>& metrics,
                                      double batch_size);

// The curves of the finished runs, each from the metrics.jsonl in the folder of its curve file (a sweep's run
// folder); runs without a curve file, a metrics.jsonl or noise estimates are left out. Fails, naming the
// run and file, when a metrics.jsonl is there but damaged.
absl::StatusOr<std::vector<NoiseScaleCurve>> ReadNoiseScaleCurves(const ResultsTable& table);

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_REPORTING_NOISE_SCALE_H_
