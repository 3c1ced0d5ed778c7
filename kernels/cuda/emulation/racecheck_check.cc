// The racecheck build's self-test (racecheck.sh): small kernels on the fiber emulator, built with
// ThreadSanitizer (RACECHECK=1). `racecheck_check CASE` runs one kernel; racecheck.sh runs each in its own
// process and expects a ThreadSanitizer race report from exactly the kernels named race_*: the hazards
// compute-sanitizer's racecheck reports on a GPU, most of which give the right values on this emulator's
// schedule (equal values, or the reading warp happening to run after the writing one), so only the race
// report can catch them, and races between blocks of one grid, which no device tool reports. The clean_*
// kernels are the same ones with the synchronisation (or the separate output rows) that makes them correct,
// so a racecheck build that reports everything fails too.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/emulation/cuemu.h"

namespace {

constexpr int kThreads = 128;

// Each kernel launched with two or more blocks writes one row of `out` per block (blocks are unordered).

// Thread t writes its slot, then reads its neighbour's in the next warp. The barriers around it check the
// emulator's barrier edges: a warp that reaches the last barrier (here, before the next warp has even resumed
// from the first) must not thereby order its write before the next warp's read.
__global__ void NeighbourRead(float* out, bool barrier) {
  __shared__ float s_key[kThreads];  // as common.sh rewrites `__shared__ float s[kThreads];`
  auto& s = ::cuemu::BlockShared(s_key);
  const int t = threadIdx.x;
  s[t] = 0.0f;
  __syncthreads();
  s[t] = 1.0f;  // every thread the same value: the result is right whatever the order
  if (barrier) __syncthreads();
  out[blockIdx.x * kThreads + t] = s[(t + 32) % kThreads];
  __syncthreads();
}

// Write-after-read: every thread reads its neighbour's slot, then overwrites its own with the same value.
__global__ void OverwriteWhileRead(float* out, bool barrier) {
  __shared__ float s_key[kThreads];  // as common.sh rewrites `__shared__ float s[kThreads];`
  auto& s = ::cuemu::BlockShared(s_key);
  const int t = threadIdx.x;
  s[t] = 2.0f;
  __syncthreads();
  out[blockIdx.x * kThreads + t] = s[(t + 32) % kThreads];
  if (barrier) __syncthreads();
  s[t] = 2.0f;
}

// Within one warp: lane l reads lane l ^ 1's slot. __syncwarp in between orders it; a shuffle does not (no
// memory barrier on the device: shfl.sync orders the exchange of registers only).
enum class LaneOrder { kNone, kShuffle, kSyncWarp };
__global__ void LaneExchange(float* out, LaneOrder order) {
  __shared__ float s_key[32];  // as common.sh rewrites `__shared__ float s[32];`
  auto& s = ::cuemu::BlockShared(s_key);
  const int lane = threadIdx.x;
  s[lane] = 3.0f;
  float v = 0.0f;
  if (order == LaneOrder::kShuffle) v = __shfl_xor_sync(0xffffffffu, v, 1);
  if (order == LaneOrder::kSyncWarp) __syncwarp();
  out[blockIdx.x * 32 + lane] = s[lane ^ 1] + v;
}

// Every thread adds into out[0]; the clean kernel lets one thread add the block's sum after a barrier.
__global__ void SharedAccumulator(float* out, bool one_writer) {
  __shared__ float s_key[kThreads];  // as common.sh rewrites `__shared__ float s[kThreads];`
  auto& s = ::cuemu::BlockShared(s_key);
  const int t = threadIdx.x;
  if (!one_writer) {
    out[0] += 1.0f;
    return;
  }
  s[t] = 1.0f;
  __syncthreads();
  if (t == 0) {
    float sum = 0.0f;
    for (int i = 0; i < kThreads; ++i) sum += s[i];
    out[0] += sum;
  }
}

// cp.async: thread t copies 16 bytes into the tile, waits for its copy and reads another warp's part; only a
// __syncthreads after the waits orders that thread's copy before the read.
__global__ void AsyncCopyRead(const float* in, float* out, bool barrier) {
  float* tile = static_cast<float*>(::cuemu::DynamicShared());
  const int t = threadIdx.x;
  ::cuemu::AsyncCopy(tile + 4 * t, in + 4 * t, 16, 16);
  ::cuemu::AsyncCommit();
  ::cuemu::AsyncWait(0);
  if (barrier) __syncthreads();
  out[blockIdx.x * kThreads + t] = tile[4 * ((t + 32) % kThreads)];
}

// Two warps at two different __syncthreads (divergent barrier): undefined on the device; the emulator (any
// build) aborts naming both call sites.
__global__ void DivergentBarrier(float* out) {
  const int t = threadIdx.x;
  if (t < 32) {
    out[t] = 1.0f;
    __syncthreads();
  } else {
    __syncthreads();
    out[t] = 2.0f;
  }
}

// Between blocks of one grid. Block (x, y) writes its row of `out`: row x when `per_column` (so blocks
// (x, 0) and (x, 1), gridDim.x apart in launch order, write the same elements, with the same values),
// else row y * gridDim.x + x (every block its own). Each block stages its values in static and dynamic
// shared memory and on its stack, which every block of the grid uses here too: no race unless two blocks
// write one element. Blocks with y = 0 write before their __syncthreads, the others after theirs, so a
// barrier that ordered the threads of different blocks would hide the race.
__global__ void BlockRows(float* out, bool per_column) {
  __shared__ float s_key[kThreads];  // as common.sh rewrites `__shared__ float s[kThreads];`
  auto& s = ::cuemu::BlockShared(s_key);
  float* tile = static_cast<float*>(::cuemu::DynamicShared());
  volatile float on_stack[4];
  const int t = threadIdx.x;
  const unsigned row = per_column ? blockIdx.x : blockIdx.y * gridDim.x + blockIdx.x;
  on_stack[t % 4] = 6.0f;
  s[t] = on_stack[t % 4];
  tile[t] = s[t] + 1.0f;
  if (blockIdx.y == 0) out[row * kThreads + t] = s[t];
  __syncthreads();
  if (blockIdx.y != 0) out[row * kThreads + t] = tile[kThreads - 1 - t];
}

// Block b reads row b + 1 of `x` and writes row b (an in-place shift: a block may read a row before or after
// the next block overwrote it). into_other writes the shifted rows into `out` instead.
__global__ void ShiftRows(float* x, float* out, bool into_other) {
  const int t = threadIdx.x;
  const unsigned b = blockIdx.x;
  const float next = b + 1 < gridDim.x ? x[(b + 1) * kThreads + t] : 0.0f;
  (into_other ? out : x)[b * kThreads + t] = next;
}

// The host reads what the grid wrote, and a second launch reads what the first wrote: launches are ordered.
__global__ void Fill(float* out) { out[threadIdx.x] = 4.0f; }
__global__ void AddOne(float* out) { out[threadIdx.x] += 1.0f; }

int Run(const std::string& name) {
  std::vector<float> in(8 * kThreads, 5.0f), out(8 * kThreads, 0.0f);
  const bool clean = name.rfind("clean_", 0) == 0;
  const std::string kernel = name.substr(name.find('_') + 1);
  if (kernel == "neighbour_read") {
    ::cuemu::Launch(NeighbourRead, dim3(2), dim3(kThreads))(out.data(), clean);
  } else if (kernel == "overwrite_while_read") {
    ::cuemu::Launch(OverwriteWhileRead, dim3(2), dim3(kThreads))(out.data(), clean);
  } else if (kernel == "lane_exchange") {
    ::cuemu::Launch(LaneExchange, dim3(2), dim3(32))(out.data(),
                                                     clean ? LaneOrder::kSyncWarp : LaneOrder::kNone);
  } else if (name == "race_shuffle_as_barrier") {
    ::cuemu::Launch(LaneExchange, dim3(2), dim3(32))(out.data(), LaneOrder::kShuffle);
  } else if (kernel == "shared_accumulator") {
    ::cuemu::Launch(SharedAccumulator, dim3(1), dim3(kThreads))(out.data(), clean);
  } else if (kernel == "async_copy_read") {
    ::cuemu::Launch(AsyncCopyRead, dim3(2), dim3(kThreads), 16 * kThreads)(in.data(), out.data(), clean);
  } else if (kernel == "block_rows") {  // 4 x 2 blocks: rows 0-3 written twice, 4 blocks apart
    ::cuemu::Launch(BlockRows, dim3(4, 2), dim3(kThreads), 4 * kThreads)(out.data(), !clean);
  } else if (kernel == "shift_rows") {
    ::cuemu::Launch(ShiftRows, dim3(8), dim3(kThreads))(in.data(), out.data(), clean);
  } else if (name == "divergent_barrier") {
    ::cuemu::Launch(DivergentBarrier, dim3(1), dim3(64))(out.data());
  } else if (name == "clean_launch_order") {
    ::cuemu::Launch(Fill, dim3(1), dim3(kThreads))(out.data());
    ::cuemu::Launch(AddOne, dim3(1), dim3(kThreads))(out.data());
    for (float& x : out) x *= 2.0f;
  } else {
    std::fprintf(stderr, "racecheck_check: no case %s\n", name.c_str());
    return 2;
  }
  std::printf("%s: ran (out[0] = %g)\n", name.c_str(), out[0]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: racecheck_check CASE\n");
    return 2;
  }
  return Run(argv[1]);
}
