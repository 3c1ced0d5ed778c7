// Initialisation schemes by parameter kind (see init.h).
#include "model/language_model/init.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "base/splitmix.h"

namespace lmf::model {
namespace {

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Standard normal draws from a 64-bit engine by Box-Muller, both outputs of each pair used (portable: no
// std:: distribution involved).
class NormalSampler {
 public:
  explicit NormalSampler(uint64_t seed) : engine_(seed) {}
  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(engine_() >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 6.283185307179586 * u2;
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }
  // N(0, 1) conditioned on [-limit, limit], by rejection.
  double NextTruncated(double limit) {
    for (;;) {
      const double x = Next();
      if (std::fabs(x) <= limit) return x;
    }
  }

 private:
  std::mt19937_64 engine_;
  double spare_ = 0;
  bool has_spare_ = false;
};

bool IsWidthMatrix(ParameterKind kind) {
  return kind == ParameterKind::kMatrix || kind == ParameterKind::kResidualMatrix;
}

}  // namespace

void DrawInitialValues(const ModelConfig& config, uint64_t seed, const std::string& name, const Parameter& p,
                       std::vector<float>& values) {
  const int64_t count = p.value.numel();
  values.resize(static_cast<size_t>(count));
  float* data = values.data();
  if (p.kind == ParameterKind::kBias) {
    std::fill(data, data + count, 0.0f);
    return;
  }
  if (p.kind == ParameterKind::kGain) {
    std::fill(data, data + count, 1.0f);
    return;
  }
  NormalSampler sampler(SplitMix64(seed ^ SplitMix64(Fnv1a(name))));
  if (config.init == InitScheme::kGpt2Scaled || config.init == InitScheme::kMup) {
    double std = config.init_std;
    const double residual_scale = 1.0 / std::sqrt(2.0 * static_cast<double>(config.n_layers));
    if (p.kind == ParameterKind::kResidualMatrix) std *= residual_scale;
    // muP (1 at the base width): hidden fan-in m times the base's -> variance / m; the output layer's std / m.
    const double m = config.mup_width_multiplier();
    if (IsWidthMatrix(p.kind)) std /= std::sqrt(m);
    if (p.kind == ParameterKind::kOutputMatrix) std /= m;
    for (int64_t i = 0; i < count; ++i) data[i] = static_cast<float>(std * sampler.Next());
    return;
  }
  const double std = p.kind == ParameterKind::kEmbedding
                         ? 1.0
                         : std::sqrt(2.0 / static_cast<double>(p.value.dim(0) + p.value.dim(1)));
  for (int64_t i = 0; i < count; ++i) data[i] = static_cast<float>(std * sampler.NextTruncated(3.0));
}

double LearningRateScale(const ModelConfig& config, ParameterKind kind) {
  return IsWidthMatrix(kind) || kind == ParameterKind::kOutputMatrix ? 1.0 / config.mup_width_multiplier() : 1.0;
}

}  // namespace lmf::model
