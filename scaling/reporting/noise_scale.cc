// Gradient noise scale curves from the runs' metrics logs (see noise_scale.h).
#include "scaling/reporting/noise_scale.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/file.h"

namespace lmf::scaling {
namespace {

std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

NoiseScaleCurve NoiseScaleFromMetrics(const std::vector<experiments::StepMetrics>& metrics, double batch_size) {
  constexpr double kDecay = 0.99;  // as the trainer's train/gradient_noise_scale (experiments/trainer)
  NoiseScaleCurve curve;
  curve.batch_size = batch_size;
  double trace = 0, grad_sq = 0, loss = 0, weight = 0;
  int estimates = 0;
  for (const experiments::StepMetrics& m : metrics) {
    if (!m.noise_trace.has_value() || !m.noise_grad_sq.has_value() || m.step <= 0 || !std::isfinite(m.loss)) continue;
    trace = kDecay * trace + (1 - kDecay) * *m.noise_trace;
    grad_sq = kDecay * grad_sq + (1 - kDecay) * *m.noise_grad_sq;
    loss = kDecay * loss + (1 - kDecay) * m.loss;
    weight = kDecay * weight + (1 - kDecay);  // the averages' bias: 1 - decay^k
    const double tokens_per_sequence = static_cast<double>(m.tokens) / static_cast<double>(m.step) / batch_size;
    if (++estimates < kNoiseScaleWarmupEstimates || !(grad_sq > 0) || !(tokens_per_sequence > 0)) continue;
    curve.loss.push_back(loss / weight);
    curve.b_simple.push_back(trace / grad_sq / tokens_per_sequence);
  }
  return curve;
}

absl::StatusOr<std::vector<NoiseScaleCurve>> ReadNoiseScaleCurves(const ResultsTable& table) {
  std::vector<NoiseScaleCurve> curves;
  for (const RunResult& r : table.runs) {
    if (r.status != RunStatus::kFinished || r.curve_file.empty() || r.batch_size <= 0) continue;
    const std::string curve = r.curve_file[0] == '/' ? r.curve_file : FolderOf(table.path) + "/" + r.curve_file;
    const std::string path = FolderOf(curve) + "/metrics.jsonl";
    if (!FileExists(path)) continue;
    absl::StatusOr<std::vector<experiments::StepMetrics>> metrics = experiments::ReadMetricsLog(path);
    if (!metrics.ok()) {
      return absl::Status(metrics.status().code(), absl::StrCat("gradient noise scale of run '", r.run, "' (",
                                                                table.path, "): ", metrics.status().message()));
    }
    NoiseScaleCurve c = NoiseScaleFromMetrics(*metrics, static_cast<double>(r.batch_size));
    if (c.b_simple.empty()) continue;
    c.run = r.run;
    c.budget = r.budget_flops;
    curves.push_back(std::move(c));
  }
  return curves;
}

}  // namespace lmf::scaling
