// OpProfiler (see op_profiler.h): a CUDA event after every op, read back once at the end of the window.
#include "kernels/cuda/op_profiler.h"

#include <atomic>

#include "kernels/core/dispatch.h"
#include "kernels/cuda/cuda_check.h"

namespace lmf::kernels::cuda {
namespace {
std::atomic<bool> profiler_active{false};
}  // namespace

absl::StatusOr<std::unique_ptr<OpProfiler>> OpProfiler::Start(const Context& ctx) {
  if (!ctx.device.is_cuda())
    return absl::FailedPreconditionError("OpProfiler: the context is not a CUDA one");
  bool expected = false;
  if (!profiler_active.compare_exchange_strong(expected, true))
    return absl::FailedPreconditionError("OpProfiler: another profiler is active (one per process)");
  std::unique_ptr<OpProfiler> profiler(new OpProfiler(static_cast<cudaStream_t>(ctx.stream)));
  profiler->installed_ = true;  // from here the destructor releases profiler_active
  profiler->events_.reserve(1024);
  LMF_RETURN_IF_ERROR_STATUS(profiler->Record(nullptr));
  SetCudaOpHook(&OpProfiler::Hook, profiler.get());
  return profiler;
}

OpProfiler::~OpProfiler() {
  Uninstall();
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void OpProfiler::Uninstall() {
  if (!installed_) return;
  SetCudaOpHook(nullptr, nullptr);
  installed_ = false;
  profiler_active.store(false);
}

void OpProfiler::Hook(void* self, const char* op) {
  OpProfiler* profiler = static_cast<OpProfiler*>(self);
  if (!profiler->error_.ok()) return;
  profiler->error_ = profiler->Record(op);
}

absl::Status OpProfiler::Record(const char* op) {
  if (used_ == events_.size()) {
    cudaEvent_t e;
    LMF_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
    events_.push_back(e);
  }
  LMF_CUDA_RETURN_IF_ERROR(cudaEventRecord(events_[used_], stream_));
  ++used_;
  if (op != nullptr) names_.push_back(op);
  return absl::OkStatus();
}

absl::StatusOr<OpProfile> OpProfiler::Finish() {
  if (!installed_) return absl::FailedPreconditionError("OpProfiler: Finish called twice");
  Uninstall();
  LMF_RETURN_IF_ERROR_STATUS(error_);
  LMF_RETURN_IF_ERROR_STATUS(Record(nullptr));  // the end of the window
  LMF_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(events_[used_ - 1]));
  std::vector<double> ms(names_.size());
  for (size_t i = 0; i < names_.size(); ++i) {
    float elapsed = 0;
    LMF_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&elapsed, events_[i], events_[i + 1]));
    ms[i] = elapsed;
  }
  OpProfile profile;
  profile.ops = SumOpTimes(names_, ms);
  float tail = 0, window = 0;
  LMF_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&tail, events_[used_ - 2], events_[used_ - 1]));
  LMF_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&window, events_[0], events_[used_ - 1]));
  profile.outside_ops_ms = tail;
  profile.window_ms = window;
  return profile;
}

}  // namespace lmf::kernels::cuda
