// Elementwise reductions of host memory, one per data type and ReduceOp: what a CPU backend combines two
// ranks' buffers with (Gloo's all-reduce calls them on its chunks).
#ifndef LMFORGE_DISTRIBUTED_REDUCE_FUNCTIONS_H_
#define LMFORGE_DISTRIBUTED_REDUCE_FUNCTIONS_H_

#include <cstddef>

#include "distributed/collectives.h"

namespace lmf::distributed {

// out[i] = a[i] (op) b[i] for i < n; `out` may be `a` or `b`. Integers wrap as their C++ types do (u8 and
// i32 sums of large values overflow). bf16: computed in f32, rounded to nearest even. kMax of floating
// types: fmax, NaN only where both are (collectives.h).
using HostReduceFunction = void (*)(void* out, const void* a, const void* b, size_t n);
HostReduceFunction HostReduce(DataType type, ReduceOp op);

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_REDUCE_FUNCTIONS_H_
