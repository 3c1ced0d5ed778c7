// OpProfiler: how long each CUDA op of a region took on the device, without a system profiler (the device
// machines may have no Nsight). While one is active, every op the kernels' entry points run (they all end in
// kernels::CheckCuda, which calls the CUDA op hook) is followed by a CUDA event on the profiled stream; an
// op's time is the stream's time from the previous event to its own, so the times add up to the window and
// include any idle time before the op (launch latency after a host wait). Taking the events costs a few
// microseconds of host time per op; profile separate steps from the timed ones.
//
//   absl::StatusOr<std::unique_ptr<OpProfiler>> profiler = OpProfiler::Start(ctx);
//   for (int i = 0; i < steps; ++i) TrainStep();
//   absl::StatusOr<OpProfile> profile = (*profiler)->Finish();
//   std::printf("%s", FormatOpProfile(*profile, steps).c_str());
//
// One profiler at a time per process (the hook is process-wide); every profiled op must run on ctx's stream.
#ifndef LMFORGE_KERNELS_CUDA_OP_PROFILER_H_
#define LMFORGE_KERNELS_CUDA_OP_PROFILER_H_

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/core/context.h"
#include "kernels/profile/op_profile.h"

namespace lmf::kernels::cuda {

class OpProfiler {
 public:
  // Records the window's start on ctx's stream and installs the hook. FailedPrecondition if another
  // profiler is active or ctx is not a CUDA context.
  static absl::StatusOr<std::unique_ptr<OpProfiler>> Start(const Context& ctx);
  ~OpProfiler();  // removes the hook (if Finish did not) and frees the events
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  // Ends the window: removes the hook, records the end, waits for the stream and returns the per-op times.
  // The first failed CUDA call of the window (an event record) is returned instead.
  absl::StatusOr<OpProfile> Finish();

 private:
  explicit OpProfiler(cudaStream_t stream) : stream_(stream) {}
  static void Hook(void* self, const char* op);
  absl::Status Record(const char* op);
  void Uninstall();

  cudaStream_t stream_;
  bool installed_ = false;
  absl::Status error_;
  std::vector<cudaEvent_t> events_;  // events_[0]: the start; events_[i]: after op names_[i - 1]
  std::vector<const char*> names_;
  size_t used_ = 0;  // events recorded in this window
};

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_KERNELS_CUDA_OP_PROFILER_H_
