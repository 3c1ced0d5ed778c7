// Allocator: where tensor memory comes from. The CPU allocator hands out 64-byte-aligned blocks (one
// cache line, one AVX-512 vector); the CUDA backend (issue 7) will add a caching device allocator behind
// the same interface. Allocators are long-lived and thread-safe; tensors keep a pointer to theirs.
#ifndef LMFORGE_KERNELS_CORE_ALLOCATOR_H_
#define LMFORGE_KERNELS_CORE_ALLOCATOR_H_

#include <cstddef>

#include "kernels/core/dtype.h"

namespace lmf::kernels {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns `bytes` bytes aligned to at least kAlignment, or aborts when memory is exhausted (a program
  // that cannot allocate its activations cannot continue). Zero bytes gives a valid, unique pointer.
  virtual void* Allocate(size_t bytes) = 0;
  // Releases a block returned by Allocate with the same `bytes`.
  virtual void Deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;

  static constexpr size_t kAlignment = 64;
};

// Aligned host memory (std::aligned_alloc). Counts the bytes it has outstanding, for tests and memory
// reports.
class CpuAllocator final : public Allocator {
 public:
  void* Allocate(size_t bytes) override;
  void Deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::Cpu(); }
  size_t bytes_in_use() const;

  // The process-wide CPU allocator.
  static CpuAllocator& Default();

 private:
  alignas(64) mutable size_t in_use_ = 0;  // guarded by atomic builtins
};

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_CORE_ALLOCATOR_H_
