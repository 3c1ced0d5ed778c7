// Test-only: CPU memory that arrives filled with NaN (0xff bytes), like the reused blocks a caching device
// allocator hands out with old contents; the model tests run on it to show nothing is read before it is
// written.
#ifndef LMFORGE_MODEL_TESTING_POISONING_ALLOCATOR_H_
#define LMFORGE_MODEL_TESTING_POISONING_ALLOCATOR_H_

#include <cstring>

#include "kernels/core/allocator.h"

namespace lmf::model::testing {

class PoisoningAllocator final : public kernels::Allocator {
 public:
  void* Allocate(size_t bytes) override {
    void* block = kernels::CpuAllocator::Default().Allocate(bytes);
    std::memset(block, 0xff, bytes);
    return block;
  }
  void Deallocate(void* block, size_t bytes) override {
    kernels::CpuAllocator::Default().Deallocate(block, bytes);
  }
  kernels::Device device() const override { return kernels::Device::Cpu(); }
};

}  // namespace lmf::model::testing

#endif  // LMFORGE_MODEL_TESTING_POISONING_ALLOCATOR_H_
