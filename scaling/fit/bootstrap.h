// Nonparametric bootstrap for the scaling-law fits: resample the runs with replacement (optionally within
// groups, e.g. within each IsoFLOP budget so every budget keeps its runs), refit, and read confidence
// intervals off the percentiles of the refitted quantities.
//
// A resample is a vector of multiplicities (how often each run was drawn), which every fit accepts as
// weights. Resample r draws from its own generator seeded by (seed, r), so the result does not depend on
// the number of threads or on scheduling.
#ifndef LMFORGE_SCALING_FIT_BOOTSTRAP_H_
#define LMFORGE_SCALING_FIT_BOOTSTRAP_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "base/thread_pool.h"

namespace lmf::scaling {

// The most resamples a bootstrap may ask for: each keeps its refitted quantities in memory, and percentile
// intervals at 95% are stable to about 1% of their width well before this (~10^4 resamples).
inline constexpr int kMaxBootstrapResamples = 100000;

struct BootstrapOptions {
  int resamples = 1000;  // 0 to kMaxBootstrapResamples
  uint64_t seed = 42;
  double confidence = 0.95;  // two-sided level of the percentile intervals
};

// A point estimate with its percentile interval and the bootstrap standard deviation.
struct Interval {
  double estimate = 0;
  double lower = 0;
  double upper = 0;
  double std_error = 0;
  bool Contains(double x) const { return lower <= x && x <= upper; }
};

// Percentile interval [q((1 - confidence) / 2), q((1 + confidence) / 2)] of `samples` (linear
// interpolation between order statistics), around `estimate`. Empty samples give lower = upper = estimate.
Interval PercentileInterval(std::vector<double> samples, double estimate, double confidence);

// The multiplicities of one resample: within each group (groups[i] is run i's group; empty = one group)
// draw as many runs as the group has, with replacement.
std::vector<double> ResampleWeights(const std::vector<int>& groups, int num_points, uint64_t seed, int resample);

struct BootstrapSamples {
  // samples[q] holds quantity q of every resample whose fit succeeded.
  std::vector<std::vector<double>> samples;
  int resamples = 0;
  int failed = 0;  // resamples whose fit returned false (e.g. a parabola without a minimum)
};

// Runs `fit(resample, weights, quantities)` for each resample over `pool` (ThreadPool::Default() when null). `fit`
// writes num_quantities values and returns false when the resample cannot be fitted; it must be safe to
// call from several threads at once and must not use `pool`.
BootstrapSamples RunBootstrap(int num_points, const std::vector<int>& groups, int num_quantities,
                              const BootstrapOptions& options, ThreadPool* pool,
                              const std::function<bool(int resample, const std::vector<double>& weights, double* quantities)>& fit);

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_FIT_BOOTSTRAP_H_
