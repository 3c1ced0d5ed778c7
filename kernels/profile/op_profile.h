// Per-op time table of the op profilers, kernels/cuda/op_profiler.h (CUDA events on the stream) and
// kernels/profile/cpu_op_profiler.h (the steady clock around each CPU op): device-independent, so the summing
// and the printed table are tested without a GPU. Each entry of a profile is one op an entry point ran (its
// name, e.g. "Matmul") and its milliseconds: on CUDA the stream's time from the previous op's end to its end,
// on the CPU the op's own wall time.
#ifndef LMFORGE_KERNELS_PROFILE_OP_PROFILE_H_
#define LMFORGE_KERNELS_PROFILE_OP_PROFILE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace lmf::kernels {

struct OpTime {
  std::string op;
  int64_t calls = 0;
  double total_ms = 0;
};

struct OpProfile {
  std::vector<OpTime> ops;      // by total time, largest first (ties: by name)
  double window_ms = 0;       // from the profiler's start to its end: the ops' sum plus `outside_ops_ms`
  // The window's time in no op: on CUDA the stream's time after the last op (every op's time already holds
  // the gap before it); on the CPU the host's work between and around the ops (the model's own loops, data).
  double outside_ops_ms = 0;
};

// Sums the durations of the ops called `names[i]` (ms[i] each); names and ms have the same length.
std::vector<OpTime> SumOpTimes(const std::vector<const char*>& names, const std::vector<double>& ms);

// A table, one row per op, with the calls and milliseconds per step (divided by `steps`, at least 1) and each
// op's share of the window:
//   op                          calls/step    ms/step   share
//   Matmul                            73.0     12.345   45.1%
//   ...
//   (outside the ops)                           0.012    0.0%
//   window                                     27.372  100.0%
std::string FormatOpProfile(const OpProfile& profile, int steps);

// The `n` largest ops with their shares of the window, for a log line: "Matmul 60.0%, Cast 20.0%".
std::string FormatLargestOps(const OpProfile& profile, int n);

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_PROFILE_OP_PROFILE_H_
