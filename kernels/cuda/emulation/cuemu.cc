// The fiber scheduler of cuemu.h: per block, every thread runs until it finishes or reaches a barrier;
// a barrier is released once every live thread of its warp (warp shuffles) or block (__syncthreads) has
// reached it. Threads that would wait forever (a barrier some live thread never reaches) abort.
#include "kernels/cuda/emulation/cuemu.h"

#include <execinfo.h>
#include <sys/mman.h>
#include <ucontext.h>

// CUEMU_RACECHECK: set by common.sh with -fsanitize=thread (which also undefines __SANITIZE_THREAD__, since
// protobuf's and Abseil's headers change their layout under it and the system libraries were built without).
#if defined(CUEMU_RACECHECK)
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#define CUEMU_NO_RACECHECK __attribute__((no_sanitize_thread))
#else
#define CUEMU_NO_RACECHECK
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace cuemu {
namespace {

// Racecheck builds (RACECHECK=1 in common.sh: ThreadSanitizer) see every CUDA thread as a fiber of its own
// and the happens-before edges a GPU gives: a launch after the host's work before it, the threads of a
// block after one another only through __syncthreads and __syncwarp (warp collectives exchange registers,
// not memory: shfl.sync and mma.sync are no memory barriers on the device), blocks of one grid not at all
// (within a window, below), and the host's work after a grid after all of it. So an access of one thread
// that is unordered with a conflicting one of another thread -- a missing __syncthreads or __syncwarp, a
// shared buffer overwritten while another warp may still read it, two threads or two blocks writing one
// global element, a block reading what another writes -- is reported with both stacks, whatever values the
// schedule here happened to produce. The emulator's own bookkeeping (fiber states, cp.async queues, the
// scheduler's writes of threadIdx and of the shared-memory poison) is hidden from it (Unwatched); the data
// effects of the fake instructions (cp.async's poison at issue and its copy at the wait, ldmatrix's and
// wgmma's operand reads) are seen as accesses of the thread that runs them; their exchange areas are
// registers on the device and hidden too.
//
// Blocks run one after another here, so a block can be left unordered with the ones before it only if it
// does not reuse their storage: a block runs in one of `slots` slots (block b of the grid in slot b % slots),
// each with its own fibers (stacks, ThreadSanitizer fibers), static and dynamic shared memory and barrier
// synchronisation objects, and the scheduler orders block b only after block b - slots, the slot's previous
// user. So every block is checked against the slots - 1 blocks before it in launch order (x fastest, then y,
// z): a whole row of the grid and more where gridDim.x < slots. slots = 2048 fibers / threads per block, at
// most 32 (16 for 128 threads, 8 for 256, 2 for 1024; 1 outside racecheck builds). ThreadSanitizer keeps ~2
// MB of access history per fiber (history_size=4): some 5 GB for the 2048.
#if defined(CUEMU_RACECHECK)
void SwitchToFiber(void* fiber, bool synchronize) {
  __tsan_switch_to_fiber(fiber, synchronize ? 0 : __tsan_switch_to_fiber_no_sync);
}
void* CurrentRaceFiber() { return __tsan_get_current_fiber(); }
void* NewRaceFiber() { return __tsan_create_fiber(0); }
// Race reports name the CUDA thread: "block (x, y, z) thread t".
void NameRaceFiber(void* fiber, int t) {
  const std::string name = "block (" + std::to_string(blockIdx.x) + ", " + std::to_string(blockIdx.y) + ", " +
                           std::to_string(blockIdx.z) + ") thread " + std::to_string(t);
  __tsan_set_fiber_name(fiber, name.c_str());  // copied
}
void Release(void* sync) { __tsan_release(sync); }
void Acquire(void* sync) { __tsan_acquire(sync); }
#else
void SwitchToFiber(void*, bool) {}
void* CurrentRaceFiber() { return nullptr; }
void* NewRaceFiber() { return nullptr; }
void NameRaceFiber(void*, int) {}
void Release(void*) {}
void Acquire(void*) {}
#endif

// Block slots (above): at most kMaxSlots, and in racecheck builds at most kRaceFibers fibers over all slots.
constexpr int kMaxSlots = 32, kRaceFibers = 2048;

// Synchronisation objects of the racecheck build (their addresses only), per slot: a barrier's arrivals
// release into one and its waiters acquire it when they resume; barriers alternate between two per block
// (and, for __syncwarp, per warp), since a thread can arrive at the next barrier before all of this one's
// waiters have resumed, but not at the one after it. A block's threads release slot_done as they finish; the
// scheduler acquires it before the slot's next block and at the end of the grid.
char block_sync[kMaxSlots][2], warp_sync[kMaxSlots][32][2], slot_done[kMaxSlots];

enum class State { kRunnable, kWarpWait, kBlockWait, kDone };
struct AsyncCopyOp {
  void* dst;
  const void* src;
  size_t bytes, src_bytes;
};
constexpr size_t kStackBytes = 256 * 1024;
struct Fiber {
  ucontext_t context;
  State state = State::kDone;
  void* stack = nullptr;  // kStackBytes, mapped on first use (pages untouched until used), never unmapped
  unsigned collectives = 0;                        // warp collectives run so far (picks the exchange area)
  std::vector<AsyncCopyOp> open_copies;            // cp.async issued since the last commit
  std::deque<std::vector<AsyncCopyOp>> committed;  // committed groups not yet waited for, oldest first
  std::vector<size_t> unfenced_chunks;             // 16-byte chunks of dynamic shared memory it landed
  std::shared_ptr<void> extension;                 // ThreadExtension()
  unsigned block_barriers = 0, warp_syncs = 0;     // __syncthreads / __syncwarp passed in this block
  void* race_fiber = nullptr;                      // its ThreadSanitizer fiber (racecheck builds)
  void* barrier_site = nullptr;                    // the __syncthreads it waits at (its return address)
};

// Fibers of every slot: slot s of a grid with n threads per block has fiber_pool[s * n, (s + 1) * n).
std::vector<Fiber> fiber_pool;
Fiber* fibers = nullptr;  // the running block's: fibers[t] is its thread t
int slot = 0;             // the running block's slot
ucontext_t scheduler;
void* scheduler_race_fiber = nullptr;
int current = -1;
const std::function<void()>* body = nullptr;
std::vector<uint32_t> warp_exchange;
// Dynamic shared memory per slot: dynamic_shared_bytes + 128, the array 128-byte aligned within.
std::vector<std::vector<unsigned char>> dynamic_shared;
size_t dynamic_shared_bytes = 0;
std::map<const void*, int> max_dynamic_shared;
int launch_error = 0;
int compute_capability = 90;
std::vector<int> chunk_writer;    // per 16 bytes of dynamic shared memory: landing thread + 1 until its fence
unsigned long block_serial = 0;   // blocks run so far
unsigned long launch_serial = 0;  // grids run so far
// Per static `__shared__` array (BlockShared: the key is the array's own address), per slot: its storage
// and the block that last poisoned it.
struct StaticShared {
  std::vector<unsigned char> storage;  // bytes + 128 (Aligned128)
  unsigned long poisoned_by = 0;
};
std::map<const void*, std::vector<StaticShared>> static_shared;

// The 128-byte aligned start of `raw`, a buffer of 128 bytes more than it must hold.
unsigned char* Aligned128(std::vector<unsigned char>& raw) {
  return raw.data() + (128 - reinterpret_cast<uintptr_t>(raw.data()) % 128) % 128;
}
std::vector<unsigned> warp_live_at_release;  // per warp: its live lanes when its last collective released
int block_threads = 0;

void SetThreadIdx(int t) {
  threadIdx.x = t % blockDim.x;
  threadIdx.y = (t / blockDim.x) % blockDim.y;
  threadIdx.z = t / (blockDim.x * blockDim.y);
}

// Never returns, so it is not instrumented: ThreadSanitizer's shadow call stack of the fiber, reused by
// every block, would grow by this frame per block.
CUEMU_NO_RACECHECK void Entry() {
  (*body)();
  Fiber& f = fibers[current];
  f.state = State::kDone;
  Release(&slot_done[slot]);
  SwitchToFiber(scheduler_race_fiber, false);
  swapcontext(&f.context, &scheduler);
}

// sync: the barrier's synchronisation object when it orders memory (racecheck builds), else null.
void Wait(State s, void* sync) {
  Unwatched unwatched;
  Fiber& f = fibers[current];
  f.state = s;
  if (sync != nullptr) Release(sync);
  SwitchToFiber(scheduler_race_fiber, false);
  swapcontext(&f.context, &scheduler);
  if (sync != nullptr) Acquire(sync);
}

// A block barrier's live threads must all wait at the same __syncthreads: "allowed in conditional code but
// only if the conditional evaluates identically across the entire thread block, otherwise the code execution
// is likely to hang or produce unintended side effects" (CUDA C++ Programming Guide; compute-sanitizer's
// synccheck reports it). Here threads at different ones would be released together; this aborts instead,
// naming two of the call sites (binary+offset, for addr2line).
void CheckConvergedBarrier(int begin, int end) {
  int first = -1;
  for (int t = begin; t < end; ++t) {
    if (fibers[t].state != State::kBlockWait) continue;
    if (first < 0) {
      first = t;
    } else if (fibers[t].barrier_site != fibers[first].barrier_site) {
      std::fprintf(stderr,
                   "cuemu: block (%u, %u, %u): threads wait at different __syncthreads (divergent barrier, "
                   "undefined on the device): the call sites of thread %d and of thread %d:\n",
                   blockIdx.x, blockIdx.y, blockIdx.z, first, t);
      void* sites[2] = {fibers[first].barrier_site, fibers[t].barrier_site};
      backtrace_symbols_fd(sites, 2, 2);
      std::abort();
    }
  }
}

// Releases the threads of [begin, end) waiting in state s when every live one of them waits.
bool Release(int begin, int end, State s) {
  bool all = true, some = false;
  for (int t = begin; t < end; ++t) {
    if (fibers[t].state == State::kDone) continue;
    if (fibers[t].state == s) {
      some = true;
    } else {
      all = false;
    }
  }
  if (!all || !some) return false;
  if (s == State::kBlockWait) CheckConvergedBarrier(begin, end);
  if (s == State::kWarpWait) {
    unsigned live = 0;
    for (int t = begin; t < end; ++t)
      if (fibers[t].state != State::kDone) live |= 1u << (t - begin);
    warp_live_at_release[begin / 32] = live;
  }
  for (int t = begin; t < end; ++t)
    if (fibers[t].state == s) fibers[t].state = State::kRunnable;
  return true;
}

void RunBlock(int n) {
  block_threads = n;
  warp_live_at_release.assign((n + 31) / 32, 0);
  for (int t = 0; t < n; ++t) {
    Fiber& f = fibers[t];
    if (f.stack == nullptr) {
      f.stack = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (f.stack == MAP_FAILED) {
        std::perror("cuemu: mmap of a fiber stack");
        std::abort();
      }
    }
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack;
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = nullptr;
    makecontext(&f.context, Entry, 0);
    f.state = State::kRunnable;
    f.collectives = 0;
    f.open_copies.clear();
    f.committed.clear();
    f.unfenced_chunks.clear();
    f.extension.reset();
    f.block_barriers = f.warp_syncs = 0;
    if (f.race_fiber == nullptr) f.race_fiber = NewRaceFiber();
    NameRaceFiber(f.race_fiber, t);
  }
  // One warp at a time runs as far as it can (through its warp collectives) before the next one starts, so
  // between two __syncthreads the warps are as far apart as they can be; warps and lanes go in reverse order
  // in every other block.
  const bool reversed = block_serial % 2 == 1;
  const int warps = (n + 31) / 32;
  for (;;) {
    bool ran = false;
    for (int wi = 0; wi < warps; ++wi) {
      const int w = reversed ? warps - 1 - wi : wi, begin = w * 32, end = std::min(n, begin + 32);
      for (;;) {
        bool warp_ran = false;
        for (int i = begin; i < end; ++i) {
          const int t = reversed ? begin + end - 1 - i : i;
          if (fibers[t].state != State::kRunnable) continue;
          warp_ran = true;
          current = t;
          SetThreadIdx(t);
          SwitchToFiber(fibers[t].race_fiber, true);  // the thread sees what the host did before
          swapcontext(&scheduler, &fibers[t].context);
        }
        if (!Release(begin, end, State::kWarpWait) && !warp_ran) break;
        ran = true;
      }
    }
    bool released = false;
    released |= Release(0, n, State::kBlockWait);
    bool done = true;
    for (int t = 0; t < n; ++t) done = done && fibers[t].state == State::kDone;
    if (done) return;
    if (!ran && !released) {
      std::fprintf(stderr, "cuemu: block (%u, %u, %u) deadlocks: live threads wait at different barriers\n",
                   blockIdx.x, blockIdx.y, blockIdx.z);
      std::abort();
    }
  }
}

}  // namespace

void RunGrid(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& fn) {
  Unwatched unwatched;  // the scheduler's own writes (threadIdx, the shared-memory poison)
  DeviceWork device_work;
  scheduler_race_fiber = CurrentRaceFiber();
  gridDim = grid, blockDim = block, body = &fn;
  ++launch_serial;
  const int n = static_cast<int>(block.x * block.y * block.z);
  const unsigned long blocks = static_cast<unsigned long>(grid.x) * grid.y * grid.z;
#if defined(CUEMU_RACECHECK)
  const int slots =
      static_cast<int>(std::min<unsigned long>(blocks, std::min(kMaxSlots, std::max(1, kRaceFibers / n))));
#else
  const int slots = 1;
#endif
  if (fiber_pool.size() < static_cast<size_t>(slots) * n) fiber_pool.resize(static_cast<size_t>(slots) * n);
  if (dynamic_shared.size() < static_cast<size_t>(slots)) dynamic_shared.resize(slots);
  for (int s = 0; s < slots; ++s) dynamic_shared[s].resize(shared_bytes + 128);
  dynamic_shared_bytes = shared_bytes;
  warp_exchange.assign(static_cast<size_t>((n + 31) / 32) * 2 * 32 * kExchangeWords, 0);
  unsigned long b = 0;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x, ++b) {
        blockIdx.x = x, blockIdx.y = y, blockIdx.z = z;
        slot = static_cast<int>(b % slots);
        if (b >= static_cast<unsigned long>(slots)) Acquire(&slot_done[slot]);  // after the slot's last block
        std::memset(DynamicShared(), 0xff, dynamic_shared_bytes);
        chunk_writer.assign((dynamic_shared_bytes + 15) / 16, 0);
        ++block_serial;
        fibers = fiber_pool.data() + static_cast<size_t>(slot) * n;
        RunBlock(n);
      }
  for (int s = 0; s < slots; ++s) Acquire(&slot_done[s]);  // the host after every block
}

void CheckWarpMask(unsigned mask, int source_lane, const char* what) {
  Unwatched unwatched;
  const int lane = current % 32;
  const unsigned live = warp_live_at_release[current / 32];
  const char* wrong = nullptr;
  int at = lane;
  if ((mask >> lane & 1u) == 0) {
    wrong = "omits the calling lane";
  } else if ((mask >> source_lane & 1u) == 0) {
    wrong = "omits the source lane", at = source_lane;
  } else if ((mask & ~live) != 0) {
    wrong = "names a lane that has exited or does not exist";
    at = __builtin_ctz(mask & ~live);
  }
  if (wrong == nullptr) return;
  std::fprintf(stderr,
               "cuemu: %s in block (%u, %u, %u), thread %d: mask 0x%08x %s (lane %d; live lanes 0x%08x)\n",
               what, blockIdx.x, blockIdx.y, blockIdx.z, current, mask, wrong, at, live);
  std::abort();
}

void SyncThreads() {
  Unwatched unwatched;
  fibers[current].barrier_site = __builtin_return_address(0);
  Wait(State::kBlockWait, &block_sync[slot][fibers[current].block_barriers++ & 1]);
}
void WarpBarrier() {
  Unwatched unwatched;
  Wait(State::kWarpWait, nullptr);
}
void WarpSync() {
  Unwatched unwatched;
  Fiber& f = fibers[current];
  Wait(State::kWarpWait, &warp_sync[slot][current / 32][f.warp_syncs++ & 1]);
}
void* DynamicShared() {
  Unwatched unwatched;
  return Aligned128(dynamic_shared[slot]);
}
size_t DynamicSharedBytes() { return dynamic_shared_bytes; }
uint32_t* WarpExchange() {
  Unwatched unwatched;
  const unsigned area = fibers[current].collectives++ & 1;
  return warp_exchange.data() + static_cast<size_t>((current / 32) * 2 + area) * 32 * kExchangeWords;
}

void AsyncCopy(void* dst, const void* src, size_t bytes, size_t src_bytes) {
  std::memset(dst, 0xff, bytes);  // undefined until the copy lands: poison (a write of this thread)
  Unwatched unwatched;
  fibers[current].open_copies.push_back(AsyncCopyOp{dst, src, bytes, src_bytes});
}
void AsyncCommit() {
  Unwatched unwatched;
  Fiber& f = fibers[current];
  f.committed.push_back(std::move(f.open_copies));
  f.open_copies.clear();
}
void AsyncWait(int pending) {
  std::vector<AsyncCopyOp> landing;
  {
    Unwatched unwatched;
    Fiber& f = fibers[current];
    while (f.committed.size() > static_cast<size_t>(pending)) {
      landing.insert(landing.end(), f.committed.front().begin(), f.committed.front().end());
      f.committed.pop_front();
    }
  }
  for (const AsyncCopyOp& op : landing) {  // the copies: a read of global and a write of shared memory
    std::memcpy(op.dst, op.src, op.src_bytes);
    std::memset(static_cast<char*>(op.dst) + op.src_bytes, 0, op.bytes - op.src_bytes);
  }
  Unwatched unwatched;
  Fiber& f = fibers[current];
  for (const AsyncCopyOp& op : landing) {
    const intptr_t offset = static_cast<char*>(op.dst) - static_cast<char*>(DynamicShared());
    if (offset >= 0 && static_cast<size_t>(offset) < DynamicSharedBytes()) {
      for (size_t chunk = offset / 16; chunk <= (offset + op.bytes - 1) / 16; ++chunk) {
        chunk_writer[chunk] = current + 1;
        f.unfenced_chunks.push_back(chunk);
      }
    }
  }
}

void ProxyFenceAsync() {
  Unwatched unwatched;
  Fiber& f = fibers[current];
  for (size_t chunk : f.unfenced_chunks)
    if (chunk_writer[chunk] == current + 1) chunk_writer[chunk] = 0;
  f.unfenced_chunks.clear();
}
bool AsyncProxyUnfenced(const void* p) {
  Unwatched unwatched;
  const intptr_t offset = static_cast<const char*>(p) - static_cast<char*>(DynamicShared());
  return offset >= 0 && static_cast<size_t>(offset) < DynamicSharedBytes() && chunk_writer[offset / 16] != 0;
}
std::shared_ptr<void>& ThreadExtension() {
  Unwatched unwatched;
  return fibers[current].extension;
}
unsigned long LaunchSerial() { return launch_serial; }
void SetComputeCapability(int major, int minor) { compute_capability = 10 * major + minor; }
int ComputeCapability() { return compute_capability; }

void* BlockSharedStorage(const void* key, size_t bytes) {
  Unwatched unwatched;  // as the scheduler's poison of dynamic shared memory
  std::vector<StaticShared>& slots = static_shared[key];
  if (slots.size() <= static_cast<size_t>(slot)) slots.resize(slot + 1);
  StaticShared& array = slots[slot];
  if (array.storage.empty()) array.storage.resize(bytes + 128);
  unsigned char* aligned = Aligned128(array.storage);
  if (array.poisoned_by != block_serial) {
    array.poisoned_by = block_serial;
    std::memset(aligned, 0xff, bytes);
  }
  return aligned;
}

void SetMaxDynamicShared(const void* kernel, int bytes) { max_dynamic_shared[kernel] = bytes; }

bool LaunchAllowed(const void* kernel, dim3 grid, dim3 block, size_t dynamic_shared_bytes) {
  constexpr size_t kDefaultMax = 48 * 1024, kOptInMax = 227 * 1024;
  const auto it = max_dynamic_shared.find(kernel);
  const size_t max_shared = it == max_dynamic_shared.end() ? kDefaultMax : static_cast<size_t>(it->second);
  const char* why = nullptr;
  if (block.x * block.y * block.z > 1024 || block.x * block.y * block.z == 0) {
    why = "threads per block not in [1, 1024]";
  } else if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
    why = "grid dimension 0, or gridDim.y or .z above 65535";
  } else if (dynamic_shared_bytes > max_shared || max_shared > kOptInMax) {
    why = "dynamic shared memory above the kernel's limit (48 KiB unless raised by cudaFuncSetAttribute)";
  }
  if (why == nullptr) return true;
  std::fprintf(stderr,
               "cuemu: launch refused: %s (grid %u x %u x %u, block %u x %u x %u, %zu shared bytes)\n", why,
               grid.x, grid.y, grid.z, block.x, block.y, block.z, dynamic_shared_bytes);
  launch_error = 1;
  return false;
}

namespace {
void (*device_access_hook)(bool) = nullptr;
bool (*device_pointer_test)(const void*) = nullptr;
void (*stream_order_hook)(void*) = nullptr;
std::recursive_mutex device_work_mu;  // held by the thread inside a DeviceWork scope
int device_work_depth = 0;            // under device_work_mu
}  // namespace

#if defined(CUEMU_RACECHECK)
Unwatched::Unwatched() { __tsan_ignore_thread_begin(); }
Unwatched::~Unwatched() { __tsan_ignore_thread_end(); }
#else
Unwatched::Unwatched() {}
Unwatched::~Unwatched() {}
#endif

void SetDeviceAccessHook(void (*hook)(bool open)) { device_access_hook = hook; }
void SetDevicePointerTest(bool (*is_device)(const void* p)) { device_pointer_test = is_device; }
DeviceWork::DeviceWork() {
  device_work_mu.lock();
  if (device_work_depth++ == 0 && device_access_hook != nullptr) device_access_hook(true);
}
DeviceWork::~DeviceWork() {
  if (--device_work_depth == 0 && device_access_hook != nullptr) device_access_hook(false);
  device_work_mu.unlock();
}
void SetStreamOrderHook(void (*hook)(void* stream)) { stream_order_hook = hook; }
void WaitForStream(void* stream) {
  if (stream_order_hook != nullptr) stream_order_hook(stream);
}

void CheckLaunchPointer(const void* p, int parameter) {
  if (p == nullptr || device_pointer_test == nullptr || device_pointer_test(p)) return;
  std::fprintf(stderr,
               "cuemu: a kernel launch passes a host pointer, %p, as its parameter %d (0-based): the kernel "
               "would fault on a GPU\n",
               p, parameter);
  std::abort();
}

int TakeLaunchError() {
  const int e = launch_error;
  launch_error = 0;
  return e;
}

}  // namespace cuemu
