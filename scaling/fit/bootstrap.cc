// Bootstrap resampling and percentile intervals (see bootstrap.h).
#include "scaling/fit/bootstrap.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

namespace lmf::scaling {

Interval PercentileInterval(std::vector<double> samples, double estimate, double confidence) {
  Interval out;
  out.estimate = out.lower = out.upper = estimate;
  if (samples.empty()) return out;
  std::sort(samples.begin(), samples.end());
  auto quantile = [&](double q) {
    const double pos = q * (samples.size() - 1);
    const size_t i = static_cast<size_t>(std::floor(pos));
    const size_t j = std::min(i + 1, samples.size() - 1);
    return samples[i] + (pos - i) * (samples[j] - samples[i]);
  };
  out.lower = quantile((1 - confidence) / 2);
  out.upper = quantile((1 + confidence) / 2);
  double mean = 0;
  for (double s : samples) mean += s;
  mean /= samples.size();
  double var = 0;
  for (double s : samples) var += (s - mean) * (s - mean);
  out.std_error = samples.size() > 1 ? std::sqrt(var / (samples.size() - 1)) : 0;
  return out;
}

std::vector<double> ResampleWeights(const std::vector<int>& groups, int num_points, uint64_t seed, int resample) {
  // SplitMix64 of (seed, resample): independent streams per resample.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(resample) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  std::mt19937_64 rng(z);
  std::vector<double> weights(num_points, 0.0);
  std::map<int, std::vector<int>> members;
  for (int i = 0; i < num_points; ++i) members[groups.empty() ? 0 : groups[i]].push_back(i);
  for (const auto& [group, idx] : members) {
    std::uniform_int_distribution<size_t> pick(0, idx.size() - 1);
    for (size_t k = 0; k < idx.size(); ++k) weights[idx[pick(rng)]] += 1;
  }
  return weights;
}

BootstrapSamples RunBootstrap(int num_points, const std::vector<int>& groups, int num_quantities,
                              const BootstrapOptions& options, ThreadPool* pool,
                              const std::function<bool(int resample, const std::vector<double>& weights, double* quantities)>& fit) {
  if (pool == nullptr) pool = &ThreadPool::Default();
  const int n = std::max(0, options.resamples);
  std::vector<double> values(static_cast<size_t>(n) * num_quantities);
  std::vector<char> ok(n, 0);
  pool->RunTasks(n, [&](int64_t r) {
    const std::vector<double> weights = ResampleWeights(groups, num_points, options.seed, static_cast<int>(r));
    double* out = values.data() + r * num_quantities;
    ok[r] = fit(static_cast<int>(r), weights, out) ? 1 : 0;
    for (int q = 0; q < num_quantities && ok[r]; ++q) ok[r] = std::isfinite(out[q]) ? 1 : 0;
  });
  BootstrapSamples result;
  result.resamples = n;
  result.samples.assign(num_quantities, {});
  for (int r = 0; r < n; ++r) {
    if (!ok[r]) {
      ++result.failed;
      continue;
    }
    for (int q = 0; q < num_quantities; ++q) result.samples[q].push_back(values[static_cast<size_t>(r) * num_quantities + q]);
  }
  return result;
}

}  // namespace lmf::scaling
