// Per-op device time table for OpProfiler (op_profiler.h): device-independent, so the summing and the
// printed table are tested without a GPU. Each entry of a profile is one CUDA op an entry point ran (its
// name, e.g. "Matmul") and the milliseconds its stream spent from the previous op's end to its end.
#ifndef LMFORGE_KERNELS_CUDA_OP_PROFILE_H_
#define LMFORGE_KERNELS_CUDA_OP_PROFILE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace lmf::kernels::cuda {

struct OpTime {
  std::string op;
  int64_t calls = 0;
  double total_ms = 0;
};

struct OpProfile {
  std::vector<OpTime> ops;      // by total time, largest first (ties: by name)
  double window_ms = 0;         // from the profiler's start to its end: the ops' sum plus `after_last_op_ms`
  double after_last_op_ms = 0;  // the stream's time after the last op (host waits, work outside the ops)
};

// Sums the durations of the ops called `names[i]` (ms[i] each); names and ms have the same length.
std::vector<OpTime> SumOpTimes(const std::vector<const char*>& names, const std::vector<double>& ms);

// A table, one row per op, with the calls and milliseconds per step (divided by `steps`, at least 1) and each
// op's share of the window:
//   op                          calls/step    ms/step   share
//   Matmul                            73.0     12.345   45.1%
//   ...
//   (after the last op)                         0.012    0.0%
//   window                                     27.372  100.0%
std::string FormatOpProfile(const OpProfile& profile, int steps);

// The `n` largest ops with their shares of the window, for a log line: "Matmul 60.0%, Cast 20.0%".
std::string FormatLargestOps(const OpProfile& profile, int n);

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_KERNELS_CUDA_OP_PROFILE_H_
