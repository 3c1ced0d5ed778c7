// Scratch device memory for one kernel call, from ctx.allocator, returned when the scope ends. Safe with
// the caching allocator: the block goes back to the free list of the context's stream, so any reuse is
// ordered after the kernels this call launched on that stream.
#ifndef LMFORGE_LAB_CUDA_SCRATCH_H_
#define LMFORGE_LAB_CUDA_SCRATCH_H_

#include <cstddef>

#include "absl/status/status.h"
#include "kernels/core/context.h"

namespace lmf::kernels::cuda {

class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    if (ptr_ != nullptr) allocator_->Deallocate(ptr_, bytes_);
  }
  absl::Status Allocate(const Context& ctx, size_t bytes) {
    if (ctx.allocator == nullptr) return absl::FailedPreconditionError("CUDA op needs scratch memory: ctx.allocator is null");
    allocator_ = ctx.allocator;
    bytes_ = bytes;
    ptr_ = allocator_->Allocate(bytes);
    return absl::OkStatus();
  }
  template <typename T>
  T* get() const {
    return static_cast<T*>(ptr_);
  }

 private:
  Allocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_LAB_CUDA_SCRATCH_H_
