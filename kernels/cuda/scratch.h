// Scratch device memory for one kernel call, from ctx.allocator, returned when the scope ends. With the
// caching allocator the block is taken from, and returned to, the free list of ctx.stream, so any reuse is
// ordered after the kernels this call launched on that stream (even when ctx.stream is not the allocator's
// default stream). Other allocators get Allocate/Deallocate and must be stream-ordered on ctx.stream.
#ifndef LMFORGE_KERNELS_CUDA_SCRATCH_H_
#define LMFORGE_KERNELS_CUDA_SCRATCH_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/core/context.h"
#include "kernels/cuda/caching_allocator.h"

namespace lmf::kernels::cuda {

class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    if (ptr_ == nullptr) return;
    if (caching_ != nullptr) {
      caching_->Free(ptr_);
    } else {
      allocator_->Deallocate(ptr_, bytes_);
    }
  }
  absl::Status Allocate(const Context& ctx, size_t bytes) {
    if (ctx.allocator == nullptr)
      return absl::FailedPreconditionError("CUDA op needs scratch memory: ctx.allocator is null");
    allocator_ = ctx.allocator;
    bytes_ = bytes;
    caching_ = dynamic_cast<CachingAllocator*>(ctx.allocator);
    if (caching_ != nullptr) {
      absl::StatusOr<void*> p = caching_->AllocateOnStream(bytes, ctx.stream);
      if (!p.ok()) return p.status();
      ptr_ = *p;
    } else {
      ptr_ = allocator_->Allocate(bytes);
    }
    return absl::OkStatus();
  }
  template <typename T>
  T* get() const {
    return static_cast<T*>(ptr_);
  }

 private:
  Allocator* allocator_ = nullptr;
  CachingAllocator* caching_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_KERNELS_CUDA_SCRATCH_H_
