// The CUDA context and the caching allocator on a real device (gpu tag: skips without one): device memory
// from the cache is usable, reused on the same stream, held back after use on a second stream until that
// stream's work is done, and released by ReleaseCache.
#include "kernels/cuda/cuda_context.h"

#include <cuda_runtime.h>

#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"

namespace lmf::kernels::cuda {
namespace {

class CudaContextTest : public testing::GpuTest {};

TEST_F(CudaContextTest, ContextCarriesDeviceStreamAndAllocator) {
  const Context c = ctx();
  EXPECT_EQ(c.device, Device::Cuda(0));
  EXPECT_EQ(c.stream, static_cast<void*>(cuda().stream()));
  EXPECT_EQ(c.allocator, &cuda().allocator());
  EXPECT_EQ(CudaContextForDevice(0), &cuda());
  EXPECT_NE(cuda().cublas_lt(), nullptr);
  EXPECT_NE(cuda().cublas_workspace(), nullptr);
}

TEST_F(CudaContextTest, CachedBlocksAreUsableAndReusedOnTheSameStream) {
  CachingAllocator& alloc = cuda().allocator();
  const int64_t mallocs = alloc.stats().backend_mallocs;
  void* a = alloc.Allocate(3000);
  ASSERT_EQ(cudaMemsetAsync(a, 0x5a, 3000, cuda().stream()), cudaSuccess);
  std::vector<unsigned char> host(3000);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), a, 3000, cudaMemcpyDeviceToHost, cuda().stream()), cudaSuccess);
  ASSERT_TRUE(cuda().Synchronize().ok());
  EXPECT_EQ(host[0], 0x5a);
  EXPECT_EQ(host[2999], 0x5a);
  alloc.Deallocate(a, 3000);
  void* b = alloc.Allocate(2600);  // same 3072-byte class
  EXPECT_EQ(a, b);
  EXPECT_EQ(alloc.stats().backend_mallocs, mallocs + 1);
  alloc.Deallocate(b, 2600);
}

TEST_F(CudaContextTest, UseOnAnotherStreamDelaysReuseUntilThatStreamIsDone) {
  CachingAllocator& alloc = cuda().allocator();
  cudaStream_t other;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  void* a = alloc.Allocate(1 << 16);
  // Keep `other` busy with work on the block, then free it while that work may still be running.
  for (int i = 0; i < 100; ++i) ASSERT_EQ(cudaMemsetAsync(a, i, 1 << 16, other), cudaSuccess);
  alloc.RecordStream(a, other);
  alloc.Deallocate(a, 1 << 16);
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  void* b = alloc.Allocate(1 << 16);  // the event has completed: the block is reusable now
  EXPECT_EQ(a, b);
  alloc.Deallocate(b, 1 << 16);
  alloc.ReleaseCache();
  EXPECT_EQ(alloc.stats().bytes_cached, 0u);
  cudaStreamDestroy(other);
}

}  // namespace
}  // namespace lmf::kernels::cuda
