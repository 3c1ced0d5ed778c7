// The caching device allocator's bookkeeping (see caching_allocator.h); no CUDA calls here.
#include "kernels/cuda/caching_allocator.h"

#include <algorithm>

#include "base/check.h"

namespace lmf::kernels::cuda {

CachingAllocator::CachingAllocator(DeviceMemoryBackend* backend, StreamHandle default_stream)
    : backend_(backend), default_stream_(default_stream) {}

CachingAllocator::~CachingAllocator() {
  absl::MutexLock lock(&mu_);
  LMF_CHECK(in_use_.empty()) << in_use_.size()
                             << " device blocks are still in use when the allocator goes away";
  ReleaseCacheLocked();
}

size_t CachingAllocator::RoundSize(size_t bytes) {
  if (bytes == 0) bytes = 1;
  const size_t round = bytes < kLargeThreshold ? kSmallRound : kLargeRound;
  return (bytes + round - 1) / round * round;
}

void CachingAllocator::PollPendingLocked() {
  for (size_t i = 0; i < pending_.size();) {
    Block& b = pending_[i];
    bool done = true;
    for (EventHandle e : b.pending) done = done && backend_->EventCompleted(e);
    if (!done) {
      ++i;
      continue;
    }
    for (EventHandle e : b.pending) backend_->DestroyEvent(e);
    b.pending.clear();
    const FreeKey key{b.stream, b.size};
    free_.emplace(key, std::move(b));
    pending_[i] = std::move(pending_.back());
    pending_.pop_back();
  }
}

void* CachingAllocator::TakeCachedLocked(size_t size, StreamHandle stream) {
  auto it = free_.lower_bound(FreeKey{stream, size});
  if (it == free_.end() || it->first.first != stream) return nullptr;
  const size_t found = it->first.second;
  const bool fits = found == size || (size >= kLargeThreshold && found < 2 * size);
  if (!fits) return nullptr;
  Block b = std::move(it->second);
  free_.erase(it);
  void* ptr = b.ptr;
  stats_.bytes_cached -= b.size;
  stats_.bytes_in_use += b.size;
  ++stats_.cache_hits;
  in_use_.emplace(ptr, std::move(b));
  return ptr;
}

absl::StatusOr<void*> CachingAllocator::AllocateOnStream(size_t bytes, StreamHandle stream) {
  const size_t size = RoundSize(bytes);
  absl::MutexLock lock(&mu_);
  PollPendingLocked();
  if (void* ptr = TakeCachedLocked(size, stream)) return ptr;
  absl::StatusOr<void*> fresh = backend_->Malloc(size);
  if (!fresh.ok() && absl::IsResourceExhausted(fresh.status())) {
    // Out of memory: give the cache back and try once more.
    ReleaseCacheLocked();
    fresh = backend_->Malloc(size);
  }
  // Any other error (e.g. a sticky fault from an earlier kernel) comes back as it is: freeing the cache
  // then would only abort in cudaFree with the same error.
  if (!fresh.ok()) return fresh.status();
  ++stats_.backend_mallocs;
  stats_.bytes_in_use += size;
  Block b;
  b.ptr = *fresh;
  b.size = size;
  b.stream = stream;
  in_use_.emplace(b.ptr, std::move(b));
  return *fresh;
}

void CachingAllocator::Free(void* ptr) {
  if (ptr == nullptr) return;
  absl::MutexLock lock(&mu_);
  auto it = in_use_.find(ptr);
  LMF_CHECK(it != in_use_.end()) << "freeing " << ptr
                                 << ", which this allocator did not hand out (or freed twice)";
  Block b = std::move(it->second);
  in_use_.erase(it);
  stats_.bytes_in_use -= b.size;
  stats_.bytes_cached += b.size;
  if (b.other_streams.empty()) {
    const FreeKey key{b.stream, b.size};
    free_.emplace(key, std::move(b));
    return;
  }
  for (StreamHandle s : b.other_streams) b.pending.push_back(backend_->RecordEvent(s));
  b.other_streams.clear();
  pending_.push_back(std::move(b));
}

void CachingAllocator::RecordStream(void* ptr, StreamHandle stream) {
  absl::MutexLock lock(&mu_);
  auto it = in_use_.find(ptr);
  LMF_CHECK(it != in_use_.end()) << "RecordStream on " << ptr << ", which is not an allocated block";
  Block& b = it->second;
  if (stream == b.stream) return;
  if (std::find(b.other_streams.begin(), b.other_streams.end(), stream) == b.other_streams.end()) {
    b.other_streams.push_back(stream);
  }
}

void CachingAllocator::ReleaseCacheLocked() {
  if (!pending_.empty()) {
    backend_->SynchronizeDevice();
    PollPendingLocked();
  }
  for (auto& [key, b] : free_) {
    backend_->Free(b.ptr);
    ++stats_.backend_frees;
    stats_.bytes_cached -= b.size;
  }
  free_.clear();
}

void CachingAllocator::ReleaseCache() {
  absl::MutexLock lock(&mu_);
  ReleaseCacheLocked();
}

CachingAllocatorStats CachingAllocator::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void* CachingAllocator::Allocate(size_t bytes) {
  absl::StatusOr<void*> p = AllocateOnStream(bytes, default_stream_);
  LMF_CHECK(p.ok()) << "device allocation of " << bytes << " bytes failed: " << p.status();
  return *p;
}

void CachingAllocator::Deallocate(void* ptr, size_t /*bytes*/) { Free(ptr); }

}  // namespace lmf::kernels::cuda
