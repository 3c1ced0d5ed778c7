// CpuOpProfiler: how long each CPU op of a region took, by the steady clock around every op the entry points
// run (the CpuOpScope of kernels/core/dispatch.h), and how much of the region's time was spent outside the
// ops (the model's own host loops, data loading). The CPU counterpart of kernels/cuda/op_profiler.h, with the
// same table (op_profile.h); no system profiler needed. Only the outermost op on the thread that started the
// profiler counts: an op nested in another (or run on a pool thread inside it) is part of that op's time.
// Taking the clock twice per op costs well under a microsecond.
//
//   absl::StatusOr<std::unique_ptr<CpuOpProfiler>> profiler = CpuOpProfiler::Start(ctx);
//   for (int i = 0; i < steps; ++i) TrainStep();
//   absl::StatusOr<OpProfile> profile = (*profiler)->Finish();
//   std::printf("%s", FormatOpProfile(*profile, steps).c_str());
//
// One CPU profiler at a time per process (the observer is process-wide); start and finish it on the thread
// that runs the ops, outside any op.
#ifndef LMFORGE_KERNELS_PROFILE_CPU_OP_PROFILER_H_
#define LMFORGE_KERNELS_PROFILE_CPU_OP_PROFILER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/core/context.h"
#include "kernels/profile/op_profile.h"

namespace lmf::kernels {

class CpuOpProfiler {
 public:
  // Starts the window and installs the observer. FailedPrecondition if another CPU profiler is active or ctx
  // is not a CPU context.
  static absl::StatusOr<std::unique_ptr<CpuOpProfiler>> Start(const Context& ctx);
  ~CpuOpProfiler();  // removes the observer (if Finish did not)
  CpuOpProfiler(const CpuOpProfiler&) = delete;
  CpuOpProfiler& operator=(const CpuOpProfiler&) = delete;

  // Ends the window, removes the observer and returns the per-op times. FailedPrecondition when called twice.
  absl::StatusOr<OpProfile> Finish();

 private:
  CpuOpProfiler() = default;
  static void Observe(void* self, const char* op, int64_t start_ns, int64_t end_ns);
  void Uninstall();

  bool installed_ = false;
  int64_t start_ns_ = 0;
  std::vector<const char*> names_;
  std::vector<double> ms_;
};

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_PROFILE_CPU_OP_PROFILER_H_
