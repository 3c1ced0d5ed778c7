// Context: what every kernel call needs besides its params: the device to run on, the stream (an opaque
// cudaStream_t on CUDA, null on CPU; kept as void* so this header stays free of CUDA), the thread pool the
// CPU kernels split work over, and the allocator for scratch memory.
//
//   lmf::kernels::Context ctx = lmf::kernels::Context::Cpu();      // default pool and allocator
//   lmf::kernels::RmsNormForward(ctx, params);
#ifndef LMFORGE_KERNELS_CORE_CONTEXT_H_
#define LMFORGE_KERNELS_CORE_CONTEXT_H_

#include "base/thread_pool.h"
#include "kernels/core/allocator.h"
#include "kernels/core/dtype.h"

namespace lmf::kernels {

struct Context {
  Device device = Device::Cpu();
  void* stream = nullptr;               // cudaStream_t on CUDA; unused on CPU
  ThreadPool* pool = nullptr;           // CPU work is split over this pool; never null for CPU contexts
  Allocator* allocator = nullptr;       // scratch and tensor memory on `device`

  // The CPU with ThreadPool::Default() (sized by LMF_NUM_THREADS) and the default CPU allocator.
  static Context Cpu();
  // The CPU with a given pool (e.g. a one-thread pool in tests, to compare against the threaded result).
  static Context Cpu(ThreadPool* pool);

  int num_threads() const { return pool == nullptr ? 1 : pool->num_threads(); }
};

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_CORE_CONTEXT_H_
