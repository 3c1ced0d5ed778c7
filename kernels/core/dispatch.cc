// The backend capability table: the CPU backend runs every op in f32 and the ops in kCpuBf16Ops in bf16
// (bf16 storage, fp32 math); the CUDA backend, where it is built in (LMF_WITH_CUDA), runs the ops listed in
// kCudaOps in f32 and bf16 (op-specific limits, such as attention's head sizes, are checked by the op: see
// AttentionSupported in kernels/attention/attention.h).
#include "kernels/core/dispatch.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/check.h"

namespace lmf::kernels {
namespace {

#if LMF_WITH_CUDA
// The op names the entry points pass to BackendSupports, for every op with a CUDA implementation.
constexpr const char* kCudaOps[] = {"activation", "adamw",     "attention", "cast",     "cross_entropy",
                                    "embedding",  "grad_norm", "grouped_matmul", "layernorm", "matmul",
                                    "moe_rows",   "moe_route", "residual",   "rmsnorm",   "rope",      "swiglu"};

bool IsCudaOp(const char* op) {
  for (const char* name : kCudaOps)
    if (std::strcmp(name, op) == 0) return true;
  return false;
}
#endif

// The ops the CPU backend runs with bf16 activations (bf16 storage, fp32 math: kernels/cpu/bf16.h): those of
// a dense transformer. Its AdamW and gradient norm run on the fp32 parameter gradients.
constexpr const char* kCpuBf16Ops[] = {"activation", "attention", "cast",     "cross_entropy", "embedding",
                                       "layernorm",  "matmul",    "residual", "rmsnorm",       "rope",
                                       "swiglu"};

bool IsCpuBf16Op(const char* op) {
  for (const char* name : kCpuBf16Ops)
    if (std::strcmp(name, op) == 0) return true;
  return false;
}

}  // namespace

bool BackendSupports(const char* op, Device device, DType dtype) {
  if (device.is_cpu()) return dtype == DType::kF32 || (dtype == DType::kBF16 && IsCpuBf16Op(op));
#if LMF_WITH_CUDA
  if (device.is_cuda()) return (dtype == DType::kF32 || dtype == DType::kBF16) && IsCudaOp(op);
#endif
  return false;
}

void UnsupportedOp(const char* op, const Context& ctx, DType dtype) {
  LMF_CHECK(false) << "no backend in this binary runs op '" << op << "' on " << ctx.device << " with dtype "
                   << dtype << " (the CPU backend runs f32, and bf16 for a dense transformer's ops"
#if LMF_WITH_CUDA
                   << "; the CUDA backend f32 and bf16"
#else
                   << "; this binary has no CUDA backend"
#endif
                   << ")";
  __builtin_unreachable();
}

namespace {
std::atomic<CudaOpHook> op_hook{nullptr};
std::atomic<void*> op_hook_arg{nullptr};
}  // namespace

void SetCudaOpHook(CudaOpHook hook, void* arg) {
  op_hook.store(nullptr, std::memory_order_release);
  op_hook_arg.store(arg, std::memory_order_relaxed);
  op_hook.store(hook, std::memory_order_release);  // a reader that sees the hook sees its argument
}

void CheckCuda(const absl::Status& status, const char* what) {
  LMF_CHECK(status.ok()) << what << " on CUDA failed: " << status.message();
  if (const CudaOpHook hook = op_hook.load(std::memory_order_acquire))
    hook(op_hook_arg.load(std::memory_order_relaxed), what);
}

namespace internal {
std::atomic<bool> cpu_op_observed{false};
}  // namespace internal

namespace {
// The observer and its argument are read only on the thread that set them (observed_thread), after it did.
CpuOpObserver cpu_op_observer = nullptr;
void* cpu_op_observer_arg = nullptr;
std::atomic<std::thread::id> observed_thread{};
thread_local int cpu_op_depth = 0;
}  // namespace

int64_t CpuOpClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void SetCpuOpObserver(CpuOpObserver observer, void* arg) {
  LMF_CHECK_EQ(cpu_op_depth, 0) << "SetCpuOpObserver inside a CPU op";
  cpu_op_observer = observer;
  cpu_op_observer_arg = arg;
  observed_thread.store(observer != nullptr ? std::this_thread::get_id() : std::thread::id(),
                        std::memory_order_relaxed);
  internal::cpu_op_observed.store(observer != nullptr, std::memory_order_relaxed);
}

void CpuOpScope::Enter() {
  if (observed_thread.load(std::memory_order_relaxed) != std::this_thread::get_id()) return;
  entered_ = true;
  if (cpu_op_depth++ == 0) start_ns_ = CpuOpClockNs();
}

void CpuOpScope::Leave() {
  --cpu_op_depth;
  if (start_ns_ >= 0 && cpu_op_observer != nullptr)
    cpu_op_observer(cpu_op_observer_arg, op_, start_ns_, CpuOpClockNs());
}

}  // namespace lmf::kernels
