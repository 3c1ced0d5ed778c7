// The per-step record of a run and where it goes: metrics.jsonl (one JSON object per line, appended and
// flushed per step, so a killed run keeps every completed step) and the console (a progress bar on a
// terminal, plain lines otherwise).
//
// metrics.jsonl keys, in this order: step, tokens, loss, val_loss (null when not evaluated at this step; the
// string "nan", "inf" or "-inf" when evaluated and not finite, which JSON numbers cannot say), lr, grad_norm,
// tokens_per_second, mfu (fraction of peak, 0..1), wall_seconds.
#ifndef LMFORGE_EXPERIMENTS_METRICS_METRICS_LOG_H_
#define LMFORGE_EXPERIMENTS_METRICS_METRICS_LOG_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lmf::experiments {

struct StepMetrics {
  int64_t step = 0;     // optimizer steps completed
  int64_t tokens = 0;   // training tokens consumed so far
  double loss = 0;      // mean training loss of this step's micro-batches
  std::optional<double> val_loss;  // none: not evaluated at this step; NaN or infinite: evaluated, diverged
  double lr = 0;
  double grad_norm = 0;  // before clipping
  double tokens_per_second = 0;
  double mfu = 0;
  double wall_seconds = 0;  // training time since the run started (resumes included)
  // Mean z-loss term (model.z_loss * lse^2) of this step's micro-batches, runs with model.z_loss > 0 only;
  // `loss` is the cross-entropy alone either way. Written as "z_loss" only when set.
  std::optional<double> z_loss;
  // Mixture-of-experts runs only (written only when set): the mean auxiliary loss of the layers (balancing
  // and router z-loss, not in `loss`), the most loaded expert's tokens over the mean (the worst layer; 1 is
  // balanced), and the share of routed assignments dropped by the capacity factor.
  std::optional<double> aux_loss, expert_load_max_over_mean, dropped_share;
  // The tokens routed to each expert of each MoE layer this step (model::StepResult::expert_loads), written
  // as "expert_loads": {"layers.1.ffn": [412, 380, ...], ...} when not empty.
  std::vector<std::pair<std::string, std::vector<double>>> expert_loads;
  // Runs with run.grad_accum_steps >= 2 (written only when set): this step's estimates of tr(Sigma) (per
  // token) and |G|^2 from its micro-batch and step batch sizes (model::StepResult). The gradient noise scale
  // B_simple = tr(Sigma) / |G|^2 is the ratio of their means over a window of steps.
  std::optional<double> noise_trace, noise_grad_sq;
};

// One metrics.jsonl line (with the trailing newline).
std::string MetricsJsonLine(const StepMetrics& m);

// Parses a line written by MetricsJsonLine (tests and tools).
absl::StatusOr<StepMetrics> ParseMetricsJsonLine(const std::string& line);

// Every line of a metrics.jsonl file, in order. A line that does not parse is DataLoss naming the file; an
// unterminated last line is left out (a run writing it now, or killed while writing it: every line a run
// writes ends in a newline), so a live run's log can be read.
absl::StatusOr<std::vector<StepMetrics>> ReadMetricsLog(const std::string& path);

// Drops the lines of steps after `step` from the metrics.jsonl at `path` (what a killed run logged past the
// checkpoint it resumes from), rewriting the file atomically; a torn last line goes too. Nothing to do where
// the file is missing. A resumed run calls it whether or not it logs to the file itself.
absl::Status DropMetricsAfterStep(const std::string& path, int64_t step);

class MetricsLog {
 public:
  // Opens `path` for appending. With `resume_step` set, first drops the lines of steps after it
  // (DropMetricsAfterStep).
  static absl::StatusOr<MetricsLog> Open(const std::string& path, std::optional<int64_t> resume_step);
  MetricsLog(MetricsLog&& other) noexcept;
  MetricsLog& operator=(MetricsLog&& other) noexcept;
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  ~MetricsLog();

  absl::Status Append(const StepMetrics& m);

 private:
  MetricsLog() = default;
  FILE* file_ = nullptr;
  std::string path_;
};

// "1h02m03s", "4m05s", "12s".
std::string FormatDuration(double seconds);

// A plain console line, e.g.
//   step   120/5000 | loss 3.2140 | lr 3.00e-04 | gnorm 0.812 | 45.2k tok/s | MFU 12.3% | 1m23s, eta 5m12s
std::string FormatStepLine(const StepMetrics& m, int64_t total_steps);

// A progress bar of `width` cells followed by the step line's numbers, for a terminal (no newline).
std::string FormatProgressBar(const StepMetrics& m, int64_t total_steps, int width);

// Writes step lines or a bar redrawn in place (`\r`) to `out`. The bar is meant to get every step and
// redraws at most ten times a second (and always at the last step).
class ConsoleReporter {
 public:
  ConsoleReporter(FILE* out, bool progress_bar, int64_t total_steps)
      : out_(out), bar_(progress_bar), total_steps_(total_steps) {}
  void Step(const StepMetrics& m);
  // A line that stays (evaluation results, checkpoints, warnings); redraws the bar below it.
  void Message(const std::string& line);
  void Finish();

 private:
  FILE* out_;
  bool bar_;
  int64_t total_steps_;
  std::string last_bar_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_METRICS_METRICS_LOG_H_
