// Bookkeeping of the caching device allocator, on the CPU with a fake backend that hands out host memory
// and simulates events (completed only when the test says so) and an optional memory limit.
#include "kernels/cuda/caching_allocator.h"

#include <cstdlib>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace lmf::kernels::cuda {
namespace {

class FakeBackend final : public DeviceMemoryBackend {
 public:
  absl::StatusOr<void*> Malloc(size_t bytes) override {
    if (!error_.ok()) return error_;
    if (limit_ != 0 && outstanding_ + bytes > limit_)
      return absl::ResourceExhaustedError("fake out of memory");
    void* p = std::malloc(bytes);
    outstanding_ += bytes;
    sizes_[p] = bytes;
    ++mallocs;
    return p;
  }
  void Free(void* ptr) override {
    outstanding_ -= sizes_.at(ptr);
    sizes_.erase(ptr);
    std::free(ptr);
  }
  EventHandle RecordEvent(StreamHandle) override {
    auto* e = new bool(false);
    events_.insert(e);
    return e;
  }
  bool EventCompleted(EventHandle e) override { return *static_cast<bool*>(e); }
  void DestroyEvent(EventHandle e) override {
    events_.erase(static_cast<bool*>(e));
    delete static_cast<bool*>(e);
  }
  void SynchronizeDevice() override {
    CompleteAllEvents();
    ++syncs;
  }
  Device device() const override { return Device::Cuda(0); }

  void CompleteAllEvents() {
    for (bool* e : events_) *e = true;
  }
  size_t live_events() const { return events_.size(); }
  size_t outstanding() const { return outstanding_; }
  void set_limit(size_t bytes) { limit_ = bytes; }
  void set_error(absl::Status error) { error_ = std::move(error); }  // every Malloc fails with it

  int mallocs = 0;
  int syncs = 0;

 private:
  std::map<void*, size_t> sizes_;
  std::set<bool*> events_;
  size_t outstanding_ = 0;
  size_t limit_ = 0;
  absl::Status error_;
};

StreamHandle Stream(int i) {
  return reinterpret_cast<StreamHandle>(static_cast<uintptr_t>(0x1000 * (i + 1)));
}

TEST(CachingAllocatorTest, RoundsToSizeClasses) {
  EXPECT_EQ(CachingAllocator::RoundSize(0), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(1), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(512), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(513), 1024u);
  EXPECT_EQ(CachingAllocator::RoundSize((1u << 20) - 1), 1u << 20);
  EXPECT_EQ(CachingAllocator::RoundSize((1u << 20) + 1), 2u << 20);
  EXPECT_EQ(CachingAllocator::RoundSize((5u << 20) + 7), 6u << 20);
}

TEST(CachingAllocatorTest, FreedBlockIsReusedOnTheSameStreamWithoutBackendCall) {
  FakeBackend backend;
  CachingAllocator alloc(&backend, Stream(0));
  void* a = *alloc.AllocateOnStream(1000, Stream(0));
  alloc.Free(a);
  void* b = *alloc.AllocateOnStream(700, Stream(0));  // same 1024-byte class
  EXPECT_EQ(a, b);
  EXPECT_EQ(backend.mallocs, 1);
  EXPECT_EQ(alloc.stats().cache_hits, 1);
  alloc.Free(b);
}

TEST(CachingAllocatorTest, SmallBlocksAreNotReusedAcrossClasses) {
  FakeBackend backend;
  CachingAllocator alloc(&backend, Stream(0));
  void* a = *alloc.AllocateOnStream(4096, Stream(0));
  alloc.Free(a);
  void* b = *alloc.AllocateOnStream(512, Stream(0));
  EXPECT_NE(a, b);
  EXPECT_EQ(backend.mallocs, 2);
  alloc.Free(b);
}

TEST(CachingAllocatorTest, LargeBlocksAreReusedUpToTwiceTheRequest) {
  FakeBackend backend;
  CachingAllocator alloc(&backend, Stream(0));
  void* big = *alloc.AllocateOnStream(6u << 20, Stream(0));
  alloc.Free(big);
  void* fits = *alloc.AllocateOnStream(4u << 20, Stream(0));  // 6 MiB < 2 * 4 MiB: reused
  EXPECT_EQ(fits, big);
  alloc.Free(fits);
  void* too_small = *alloc.AllocateOnStream(2u << 20, Stream(0));  // 6 MiB >= 2 * 2 MiB: fresh block
  EXPECT_NE(too_small, big);
  EXPECT_EQ(backend.mallocs, 2);
  alloc.Free(too_small);
}

TEST(CachingAllocatorTest, BlocksAreNotSharedBetweenStreams) {
  FakeBackend backend;
  CachingAllocator alloc(&backend, Stream(0));
  void* a = *alloc.AllocateOnStream(1000, Stream(0));
  alloc.Free(a);
  void* b = *alloc.AllocateOnStream(1000, Stream(1));
  EXPECT_NE(a, b);
  void* c = *alloc.AllocateOnStream(1000, Stream(0));
  EXPECT_EQ(a, c);
  alloc.Free(b);
  alloc.Free(c);
}

TEST(CachingAllocatorTest, CrossStreamUseDelaysReuseUntilTheEventCompletes) {
  FakeBackend backend;
  CachingAllocator alloc(&backend, Stream(0));
  void* a = *alloc.AllocateOnStream(1000, Stream(0));
  alloc.RecordStream(a, Stream(1));
  alloc.RecordStream(a, Stream(0));  // its own stream: no event needed
  alloc.Free(a);
  EXPECT_EQ(backend.live_events(), 1u);
  void* b = *alloc.AllocateOnStream(1000, Stream(0));
  EXPECT_NE(a, b) << "block reused while stream 1 may still be using it";
  backend.CompleteAllEvents();
  void* c = *alloc.AllocateOnStream(1000, Stream(0));
  EXPECT_EQ(a, c);
  EXPECT_EQ(backend.live_events(), 0u);
  alloc.Free(b);
  alloc.Free(c);
}

TEST(CachingAllocatorTest, OutOfMemoryReleasesTheCacheAndRetries) {
  FakeBackend backend;
  backend.set_limit(4u << 20);
  CachingAllocator alloc(&backend, Stream(0));
  void* a = *alloc.AllocateOnStream(3u << 20, Stream(1));  // 4 MiB class
  alloc.Free(a);                                           // cached on stream 1
  absl::StatusOr<void*> b = alloc.AllocateOnStream(3u << 20, Stream(0));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(alloc.stats().backend_frees, 1);
  absl::StatusOr<void*> c = alloc.AllocateOnStream(1u << 20, Stream(0));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  alloc.Free(*b);
}

TEST(CachingAllocatorTest, OtherBackendErrorsComeBackWithoutReleasingTheCache) {
  FakeBackend backend;
  CachingAllocator alloc(&backend, Stream(0));
  void* a = *alloc.AllocateOnStream(1000, Stream(0));
  alloc.Free(a);
  backend.set_error(absl::InternalError("cudaMalloc failed: cudaErrorIllegalAddress"));
  absl::StatusOr<void*> b = alloc.AllocateOnStream(5000, Stream(0));
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(alloc.stats().backend_frees, 0) << "the cache is released only when memory is exhausted";
  EXPECT_EQ(alloc.stats().bytes_cached, 1024u);
  backend.set_error(absl::OkStatus());
}

TEST(CachingAllocatorTest, ReleaseCacheWaitsForPendingBlocks) {
  FakeBackend backend;
  {
    CachingAllocator alloc(&backend, Stream(0));
    void* a = *alloc.AllocateOnStream(1000, Stream(0));
    void* b = *alloc.AllocateOnStream(1000, Stream(0));
    alloc.RecordStream(b, Stream(2));
    alloc.Free(a);
    alloc.Free(b);
    alloc.ReleaseCache();
    EXPECT_EQ(backend.syncs, 1);
    EXPECT_EQ(backend.outstanding(), 0u);
    EXPECT_EQ(alloc.stats().bytes_cached, 0u);
  }
  EXPECT_EQ(backend.live_events(), 0u);
}

TEST(CachingAllocatorTest, StatsTrackBytesInUseAndCached) {
  FakeBackend backend;
  CachingAllocator alloc(&backend, Stream(0));
  void* a = alloc.Allocate(1000);
  void* b = alloc.Allocate(3u << 20);
  EXPECT_EQ(alloc.stats().bytes_in_use, 1024u + (4u << 20));
  alloc.Deallocate(a, 1000);
  EXPECT_EQ(alloc.stats().bytes_in_use, 4u << 20);
  EXPECT_EQ(alloc.stats().bytes_cached, 1024u);
  alloc.Deallocate(b, 3u << 20);
  EXPECT_EQ(alloc.stats().bytes_in_use, 0u);
}

TEST(CachingAllocatorDeathTest, FreeingAnUnknownPointerAborts) {
  FakeBackend backend;
  CachingAllocator alloc(&backend, Stream(0));
  int x = 0;
  EXPECT_DEATH(alloc.Free(&x), "did not hand out");
}

}  // namespace
}  // namespace lmf::kernels::cuda
