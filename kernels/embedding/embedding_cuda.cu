// CUDA embedding forward (row gather) and deterministic backward (stable sort by id, one block per id); see
// embedding.h. Both move 16 bytes per access where C is a multiple of 16 bytes' elements and the row
// pointers are 16-byte aligned (the gather copies the bits; the backward's sums keep their row order, so
// the result is the same on both paths), else one element per access.
#include <cub/cub.cuh>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/embedding/embedding.h"

namespace lmf::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsInFlight = 4;  // dout rows loaded ahead of their adds in the backward's segment sums

// Records the smallest row whose id is out of range (bad starts at INT64_MAX-like sentinel N).
__global__ void CheckIdsKernel(int64_t N, int64_t V, const int32_t* ids, unsigned long long* first_bad) {
  for (int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; n < N;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (ids[n] < 0 || ids[n] >= V) atomicMin(first_bad, static_cast<unsigned long long>(n));
  }
}

// Copies rows of C / W accesses of type A (one element, or a uint4 of W elements); index math in I (32-bit
// where the access count allows).
template <typename A, typename I>
__global__ void GatherKernel(I N, int64_t V, I CA, const int32_t* ids, const A* table, A* out) {
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < N * CA;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I n = i / CA, c = i - n * CA;
    const int32_t id = ids[n];
    if (id >= 0 && id < V) out[i] = table[static_cast<int64_t>(id) * CA + c];
  }
}

template <typename T, typename A>
void LaunchGather(const Context& ctx, const EmbeddingForwardParams& p) {
  const int64_t ca = p.C * static_cast<int64_t>(sizeof(T)) / static_cast<int64_t>(sizeof(A));
  const unsigned grid = GridFor(p.N * ca, kThreads);
  const A* table = static_cast<const A*>(p.table);
  A* out = static_cast<A*>(p.out);
  // 32-bit indices while the index plus one grid stride stays below 2^32.
  if (p.N * ca + static_cast<int64_t>(grid) * kThreads < (int64_t{1} << 32)) {
    GatherKernel<A, uint32_t><<<grid, kThreads, 0, StreamOf(ctx)>>>(
        static_cast<uint32_t>(p.N), p.V, static_cast<uint32_t>(ca), p.ids, table, out);
  } else {
    GatherKernel<A, int64_t><<<grid, kThreads, 0, StreamOf(ctx)>>>(p.N, p.V, ca, p.ids, table, out);
  }
}

__global__ void IotaKernel(int64_t N, int32_t* rows) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < N;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    rows[i] = static_cast<int32_t>(i);
}

// One block per sorted position; the block at the start of a run of equal ids sums that run's dout rows
// (in ascending row order: the sort is stable) and adds the sum to dtable[id], W channels per thread.
template <typename T, int W>
__global__ void SegmentSumKernel(int64_t N, int64_t C, const int32_t* sorted_ids, const int32_t* sorted_rows,
                                 const T* dout, float* dtable) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const int32_t id = sorted_ids[i];
    if (i > 0 && sorted_ids[i - 1] == id) continue;
    int64_t end = i + 1;
    while (end < N && sorted_ids[end] == id) ++end;
    for (int64_t c = threadIdx.x * W; c < C; c += blockDim.x * W) {
      float s[W], x[W];
#pragma unroll
      for (int k = 0; k < W; ++k) s[k] = 0.0f;
      // Four rows' loads are issued before their adds (a frequent id's run is hundreds of rows long, and one
      // load in flight per thread would leave the block waiting on memory latency row after row); the adds
      // keep the rows' order, so the sum is bitwise the one-row loop's.
      int64_t j = i;
      for (; j + kRowsInFlight <= end; j += kRowsInFlight) {
        float y[kRowsInFlight][W];
#pragma unroll
        for (int r = 0; r < kRowsInFlight; ++r)
          LoadN<T, W>(dout + static_cast<int64_t>(sorted_rows[j + r]) * C + c, y[r]);
#pragma unroll
        for (int r = 0; r < kRowsInFlight; ++r)
#pragma unroll
          for (int k = 0; k < W; ++k) s[k] += y[r][k];
      }
      for (; j < end; ++j) {
        LoadN<T, W>(dout + static_cast<int64_t>(sorted_rows[j]) * C + c, x);
#pragma unroll
        for (int k = 0; k < W; ++k) s[k] += x[k];
      }
      float* row = dtable + static_cast<int64_t>(id) * C + c;
      LoadN<float, W>(row, x);
#pragma unroll
      for (int k = 0; k < W; ++k) x[k] += s[k];
      StoreN<float, W>(row, x);
    }
  }
}

template <typename T, int W>
void LaunchSegmentSum(int64_t N, int64_t C, const int32_t* sorted_ids, const int32_t* sorted_rows,
                      const void* dout, void* dtable, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(N, 65535));
  // One thread per W channels, in whole warps, at most 256.
  const int64_t lanes = (C / W + 31) / 32 * 32;
  const int threads = static_cast<int>(std::min<int64_t>(lanes, 256));
  SegmentSumKernel<T, W><<<grid, threads, 0, stream>>>(
      N, C, sorted_ids, sorted_rows, static_cast<const T*>(dout), static_cast<float*>(dtable));
}

absl::Status CheckIds(const Context& ctx, int64_t N, int64_t V, const int32_t* ids,
                      unsigned long long* flag) {
  const unsigned long long none = static_cast<unsigned long long>(N);
  LMF_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(flag, &none, sizeof(none), cudaMemcpyHostToDevice, StreamOf(ctx)));
  CheckIdsKernel<<<GridFor(N, kThreads), kThreads, 0, StreamOf(ctx)>>>(N, V, ids, flag);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("CheckIdsKernel");
  unsigned long long bad = 0;
  LMF_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&bad, flag, sizeof(bad), cudaMemcpyDeviceToHost, StreamOf(ctx)));
  LMF_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(StreamOf(ctx)));
  if (bad < none) {
    int32_t id = 0;
    LMF_CUDA_RETURN_IF_ERROR(cudaMemcpy(&id, ids + bad, sizeof(id), cudaMemcpyDeviceToHost));
    return absl::InvalidArgumentError(
        absl::StrCat("embedding: id ", id, " at row ", bad, " outside [0, ", V, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EmbeddingForward(const Context& ctx, const EmbeddingForwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "embedding"));
  if (p.N * p.C == 0) return absl::OkStatus();
  if (!p.ids_checked) {
    Scratch flag;
    LMF_RETURN_IF_ERROR_STATUS(flag.Allocate(ctx, sizeof(unsigned long long)));
    LMF_RETURN_IF_ERROR_STATUS(CheckIds(ctx, p.N, p.V, p.ids, flag.get<unsigned long long>()));
  }
  const bool vec = p.C * DTypeSize(p.dtype) % 16 == 0 && Aligned16({p.table, p.out});
  if (vec) {
    p.dtype == DType::kF32 ? LaunchGather<float, uint4>(ctx, p) : LaunchGather<bf16, uint4>(ctx, p);
  } else {
    p.dtype == DType::kF32 ? LaunchGather<float, float>(ctx, p) : LaunchGather<bf16, bf16>(ctx, p);
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("GatherKernel");
  return absl::OkStatus();
}

absl::Status EmbeddingBackward(const Context& ctx, const EmbeddingBackwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "embedding"));
  if (p.N * p.C == 0) return absl::OkStatus();
  if (p.N > INT32_MAX) return absl::InvalidArgumentError("embedding backward: more than 2^31 rows");
  const cudaStream_t stream = StreamOf(ctx);
  const int N = static_cast<int>(p.N);
  // Scratch: flag, rows, sorted ids, sorted rows, then CUB's temporary storage.
  size_t sort_bytes = 0;
  LMF_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), N, 0, 32, stream));
  const size_t ints = 3 * static_cast<size_t>(N);
  Scratch scratch;
  LMF_RETURN_IF_ERROR_STATUS(scratch.Allocate(ctx, 256 + ints * sizeof(int32_t) + 256 + sort_bytes));
  char* base = scratch.get<char>();
  auto* flag = reinterpret_cast<unsigned long long*>(base);
  int32_t* rows = reinterpret_cast<int32_t*>(base + 256);
  int32_t* sorted_ids = rows + N;
  int32_t* sorted_rows = sorted_ids + N;
  void* temp = base + 256 + ((ints * sizeof(int32_t) + 255) / 256) * 256;
  if (!p.ids_checked) LMF_RETURN_IF_ERROR_STATUS(CheckIds(ctx, p.N, p.V, p.ids, flag));
  IotaKernel<<<GridFor(p.N, kThreads), kThreads, 0, stream>>>(p.N, rows);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("IotaKernel");
  // Ids are in [0, V): sorting only the bits V needs is enough (and faster).
  int end_bit = 1;
  while (end_bit < 31 && (int64_t{1} << end_bit) < p.V) ++end_bit;
  LMF_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(temp, sort_bytes, p.ids, sorted_ids, rows,
                                                           sorted_rows, N, 0, end_bit, stream));
  // 16-byte accesses to dout (4 fp32 or 8 bf16 channels) and to dtable (one or two) where C and the pointers
  // allow.
  const int64_t w = 16 / static_cast<int64_t>(DTypeSize(p.dtype));
  const bool vec = p.C % w == 0 && Aligned16({p.dout, p.dtable});
  if (p.dtype == DType::kF32) {
    vec ? LaunchSegmentSum<float, 4>(p.N, p.C, sorted_ids, sorted_rows, p.dout, p.dtable, stream)
        : LaunchSegmentSum<float, 1>(p.N, p.C, sorted_ids, sorted_rows, p.dout, p.dtable, stream);
  } else {
    vec ? LaunchSegmentSum<bf16, 8>(p.N, p.C, sorted_ids, sorted_rows, p.dout, p.dtable, stream)
        : LaunchSegmentSum<bf16, 1>(p.N, p.C, sorted_ids, sorted_rows, p.dout, p.dtable, stream);
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("SegmentSumKernel");
  return absl::OkStatus();
}

}  // namespace lmf::kernels::cuda
