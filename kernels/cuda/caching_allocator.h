// A caching device allocator: device memory is expensive to allocate (cudaMalloc synchronises the device),
// so freed blocks are kept in per-stream, size-class free lists and handed out again.
//
// - Size classes: requests round up to 512 bytes below 1 MiB and to 2 MiB above (few distinct block sizes,
//   bounded waste: < 512 B per small block, < 2 MiB per large one).
// - Stream-ordered reuse: a block belongs to the stream it was allocated on. Freed, it is reusable at once
//   by later allocations on that stream (the stream orders the old uses before the new ones). If the block
//   was also used on other streams (RecordStream), an event is recorded on each of them at free time and the
//   block is reusable only once those events have completed.
// - A cached block is reused for a request of its own class, or of a class up to 2x smaller for large
//   blocks (best fit, smallest first); small blocks are reused only within their class.
// - When the backend runs out of memory, the cache is released (after a device synchronisation) and the
//   allocation retried once.
// The bookkeeping is device-independent: the backend (cudaMalloc/cudaFree/events, or a fake in tests) is
// an interface, so this logic is tested on the CPU. Thread-safe.
#ifndef LMFORGE_KERNELS_CUDA_CACHING_ALLOCATOR_H_
#define LMFORGE_KERNELS_CUDA_CACHING_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/core/allocator.h"

namespace lmf::kernels::cuda {

using StreamHandle = void*;  // cudaStream_t
using EventHandle = void*;   // cudaEvent_t

// Where the memory really comes from.
class DeviceMemoryBackend {
 public:
  virtual ~DeviceMemoryBackend() = default;
  virtual absl::StatusOr<void*> Malloc(size_t bytes) = 0;  // ResourceExhausted when out of memory
  virtual void Free(void* ptr) = 0;
  virtual EventHandle RecordEvent(StreamHandle stream) = 0;
  virtual bool EventCompleted(EventHandle event) = 0;
  virtual void DestroyEvent(EventHandle event) = 0;
  virtual void SynchronizeDevice() = 0;
  virtual Device device() const = 0;
};

struct CachingAllocatorStats {
  size_t bytes_in_use = 0;  // in blocks handed out (class sizes)
  size_t bytes_cached = 0;  // in free blocks kept for reuse
  int64_t backend_mallocs = 0;
  int64_t backend_frees = 0;
  int64_t cache_hits = 0;
};

class CachingAllocator final : public Allocator {
 public:
  static constexpr size_t kSmallRound = 512;
  static constexpr size_t kLargeThreshold = size_t{1} << 20;
  static constexpr size_t kLargeRound = size_t{2} << 20;

  // `backend` outlives the allocator. `default_stream` is used by Allocate (the Allocator interface).
  CachingAllocator(DeviceMemoryBackend* backend, StreamHandle default_stream);
  ~CachingAllocator() override;  // returns every cached block; blocks still in use are a program error

  // The block size a request of `bytes` gets.
  static size_t RoundSize(size_t bytes);

  absl::StatusOr<void*> AllocateOnStream(size_t bytes, StreamHandle stream);
  // Returns a block to its stream's free list (pending events from RecordStream, if any).
  void Free(void* ptr);
  // Marks that `stream` (not the block's own) uses the block, so its reuse waits for that stream's work.
  void RecordStream(void* ptr, StreamHandle stream);
  // Frees every cached block that is reusable now (synchronising first so that pending blocks are too).
  void ReleaseCache();
  CachingAllocatorStats stats() const;

  // Allocator interface (aborts naming the size when memory is exhausted).
  void* Allocate(size_t bytes) override;
  void Deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return backend_->device(); }

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    StreamHandle stream = nullptr;
    std::vector<StreamHandle> other_streams;  // from RecordStream while in use
    std::vector<EventHandle> pending;         // events that must complete before reuse
  };
  using FreeKey = std::pair<StreamHandle, size_t>;  // (stream, size), ordered: best fit by lower_bound

  void PollPendingLocked();
  void ReleaseCacheLocked();
  void* TakeCachedLocked(size_t size, StreamHandle stream);

  DeviceMemoryBackend* backend_;
  StreamHandle default_stream_;
  mutable absl::Mutex mu_;
  std::unordered_map<void*, Block> in_use_;
  std::multimap<FreeKey, Block> free_;  // reusable now
  std::vector<Block> pending_;          // freed, waiting for events on other streams
  CachingAllocatorStats stats_;
};

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_KERNELS_CUDA_CACHING_ALLOCATOR_H_
