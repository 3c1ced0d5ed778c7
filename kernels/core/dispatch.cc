// The backend capability table: today the CPU backend, f32, every op.
#include "kernels/core/dispatch.h"

#include "base/check.h"

namespace lmf::kernels {

bool BackendSupports(const char* /*op*/, Device device, DType dtype) {
  return device.is_cpu() && dtype == DType::kF32;
}

void UnsupportedOp(const char* op, const Context& ctx, DType dtype) {
  LMF_CHECK(false) << "no backend in this binary runs op '" << op << "' on " << ctx.device << " with dtype "
                   << dtype << " (the CPU backend runs f32 only)";
  __builtin_unreachable();
}

void CheckCuda(const absl::Status& status, const char* what) {
  LMF_CHECK(status.ok()) << what << " on CUDA failed: " << status.message();
}

}  // namespace lmf::kernels
