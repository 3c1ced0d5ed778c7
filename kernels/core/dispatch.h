// Backend dispatch shared by every op header. Each op header declares its CPU implementation in
// namespace lmf::kernels::cpu and an inline entry point that picks the backend from ctx.device; the CUDA
// backend (issue 7) adds its `cuda::` declarations and a case there. A backend states what it implements
// through BackendSupports, and callers (modules, tests) ask before they call.
#ifndef LMFORGE_KERNELS_CORE_DISPATCH_H_
#define LMFORGE_KERNELS_CORE_DISPATCH_H_

#include "kernels/core/context.h"
#include "kernels/core/dtype.h"

namespace lmf::kernels {

// Whether the backends built into this binary run op `op` (its name, e.g. "rmsnorm") on `device` with
// activations of type `dtype`. The CPU backend runs every op in f32.
bool BackendSupports(const char* op, Device device, DType dtype);

// Aborts naming the op, the device and the dtype: a call that no backend can run is a program error
// (callers check BackendSupports when they build the model).
[[noreturn]] void UnsupportedOp(const char* op, const Context& ctx, DType dtype);

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_CORE_DISPATCH_H_
