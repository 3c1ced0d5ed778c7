// Backend dispatch shared by every op header. Each op header declares its CPU implementation in namespace
// lmf::kernels::cpu, its CUDA implementation in lmf::kernels::cuda (same params struct, returns a Status),
// and an inline entry point that picks the backend from ctx.device:
//
//   inline void RmsNormForward(const Context& ctx, const RmsNormForwardParams& p) {
//     if (!BackendSupports("rmsnorm", ctx.device, p.dtype)) UnsupportedOp("rmsnorm", ctx, p.dtype);
//   #if LMF_WITH_CUDA
//     if (ctx.device.is_cuda()) return CheckCuda(cuda::RmsNormForward(ctx, p), "RmsNormForward");
//   #endif
//     CpuOpScope op_scope("RmsNormForward");
//     cpu::RmsNormForward(ctx, p);
//   }
//
// LMF_WITH_CUDA is defined (to 1) by //kernels/core in builds that include the CUDA backend (a toolkit was
// found and --config=nocuda is not set). The entry points return void, like the CPU kernels: a failed CUDA
// call (an out-of-memory, a launch error, a device-side bad id) is a fatal error of the run, as a bad
// geometry is, and aborts naming the op and the CUDA error (llm.c's cudaCheck does the same). Callers that
// want to recover call the cuda:: function and handle its Status.
#ifndef LMFORGE_KERNELS_CORE_DISPATCH_H_
#define LMFORGE_KERNELS_CORE_DISPATCH_H_

#include <atomic>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/core/context.h"
#include "kernels/core/dtype.h"

namespace lmf::kernels {

// Whether the backends built into this binary run op `op` (its name, e.g. "rmsnorm") on `device` with
// activations of type `dtype`. The CPU backend runs every op in f32, and the dense transformer's ops
// (kCpuBf16Ops in dispatch.cc, "cast" among them) in bf16 too; the CUDA backend (when built in) runs f32 and
// bf16 (see kernels/README.md for the per-op details, e.g. attention's head sizes).
bool BackendSupports(const char* op, Device device, DType dtype);

// Aborts naming the op, the device and the dtype: a call that no backend can run is a program error
// (callers check BackendSupports when they build the model).
[[noreturn]] void UnsupportedOp(const char* op, const Context& ctx, DType dtype);

// Aborts with `what` and the status's message when `status` is not OK; otherwise, where a CUDA op hook is
// set, calls it with `what` (every CUDA entry point ends here, so the hook sees each op right after the op
// was issued on its stream).
void CheckCuda(const absl::Status& status, const char* what);

// Process-wide observer of the CUDA ops the entry points run: kernels/cuda/op_profiler.h records a device
// event after each op through it. `op` is the entry point's name (a string literal). Set and cleared only
// while no op runs; null (the default) costs one relaxed atomic load per op.
using CudaOpHook = void (*)(void* arg, const char* op);
void SetCudaOpHook(CudaOpHook hook, void* arg);

// Process-wide observer of the CPU ops the entry points run: kernels/profile/cpu_op_profiler.h times each op
// through it. Every CPU entry point holds a CpuOpScope, named as its CUDA op, while its kernel runs; while an
// observer is set, the outermost scope on the thread that set it reports the op's name (a string literal) and
// its start and end on the steady clock (ns). An op nested in another (a CPU kernel that calls an entry
// point) or run on another thread is part of the op around it. Set and cleared only while no op runs, on the
// thread whose ops are observed; none set (the default) costs one relaxed atomic load per op.
using CpuOpObserver = void (*)(void* arg, const char* op, int64_t start_ns, int64_t end_ns);
void SetCpuOpObserver(CpuOpObserver observer, void* arg);
// The clock of the observer's times: the steady clock, in ns.
int64_t CpuOpClockNs();

namespace internal {
extern std::atomic<bool> cpu_op_observed;
}  // namespace internal

class CpuOpScope {
 public:
  explicit CpuOpScope(const char* op) : op_(op) {
    if (internal::cpu_op_observed.load(std::memory_order_relaxed)) Enter();
  }
  ~CpuOpScope() {
    if (entered_) Leave();
  }
  CpuOpScope(const CpuOpScope&) = delete;
  CpuOpScope& operator=(const CpuOpScope&) = delete;

 private:
  void Enter();
  void Leave();

  const char* op_;
  bool entered_ = false;     // counted in this thread's nesting depth
  int64_t start_ns_ = -1;    // >= 0: the outermost observed scope, reported on leaving
};

// The value of `result`, or an abort as CheckCuda's: for entry points that return a value (the grad norm).
template <typename T>
T CheckCudaValue(absl::StatusOr<T> result, const char* what) {
  CheckCuda(result.status(), what);
  return *std::move(result);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_CORE_DISPATCH_H_
