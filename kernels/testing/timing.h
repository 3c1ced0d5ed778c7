// Wall-clock timing for the kernel benchmark binaries: the best of several runs after a warm-up, which is
// the figure least disturbed by other work on the machine.
#ifndef LMFORGE_KERNELS_TESTING_TIMING_H_
#define LMFORGE_KERNELS_TESTING_TIMING_H_

#include <algorithm>
#include <chrono>

namespace lmf::kernels {

// Seconds on the steady clock.
inline double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best of `reps` timings of f() after one warm-up call, in seconds.
template <typename F>
double Time(F&& f, int reps) {
  f();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = Seconds();
    f();
    best = std::min(best, Seconds() - t0);
  }
  return best;
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_TESTING_TIMING_H_
