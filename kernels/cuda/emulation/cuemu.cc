// The fiber scheduler of cuemu.h: per block, every thread runs until it finishes or reaches a barrier;
// a barrier is released once every live thread of its warp (warp shuffles) or block (__syncthreads) has
// reached it. Threads that would wait forever (a barrier some live thread never reaches) abort.
#include "kernels/cuda/emulation/cuemu.h"

#include <ucontext.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace cuemu {
namespace {

enum class State { kRunnable, kWarpWait, kBlockWait, kDone };
struct Fiber {
  ucontext_t context;
  State state = State::kDone;
  std::vector<char> stack;
};

std::vector<Fiber> fibers;
ucontext_t scheduler;
int current = -1;
const std::function<void()>* body = nullptr;
std::vector<float> warp_slots;

void SetThreadIdx(int t) {
  threadIdx.x = t % blockDim.x;
  threadIdx.y = (t / blockDim.x) % blockDim.y;
  threadIdx.z = t / (blockDim.x * blockDim.y);
}

void Entry() {
  (*body)();
  fibers[current].state = State::kDone;
  swapcontext(&fibers[current].context, &scheduler);
}

void Wait(State s) {
  fibers[current].state = s;
  swapcontext(&fibers[current].context, &scheduler);
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
  for (int t = begin; t < end; ++t)
    if (fibers[t].state == s) fibers[t].state = State::kRunnable;
  return true;
}

void RunBlock(int n) {
  for (int t = 0; t < n; ++t) {
    Fiber& f = fibers[t];
    if (f.stack.empty()) f.stack.resize(256 * 1024);
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.data();
    f.context.uc_stack.ss_size = f.stack.size();
    f.context.uc_link = nullptr;
    makecontext(&f.context, Entry, 0);
    f.state = State::kRunnable;
  }
  for (;;) {
    bool ran = false;
    for (int t = 0; t < n; ++t) {
      if (fibers[t].state != State::kRunnable) continue;
      ran = true;
      current = t;
      SetThreadIdx(t);
      swapcontext(&scheduler, &fibers[t].context);
    }
    bool released = false;
    for (int w = 0; w * 32 < n; ++w) released |= Release(w * 32, std::min(n, w * 32 + 32), State::kWarpWait);
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

void RunGrid(dim3 grid, dim3 block, const std::function<void()>& fn) {
  gridDim = grid, blockDim = block, body = &fn;
  const int n = static_cast<int>(block.x * block.y * block.z);
  if (fibers.size() < static_cast<size_t>(n)) fibers.resize(n);
  warp_slots.assign(static_cast<size_t>((n + 31) / 32) * 32, 0.0f);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx.x = x, blockIdx.y = y, blockIdx.z = z;
        RunBlock(n);
      }
}

void SyncThreads() { Wait(State::kBlockWait); }
void WarpBarrier() { Wait(State::kWarpWait); }
float* WarpSlots() { return warp_slots.data() + (current / 32) * 32; }

}  // namespace cuemu
