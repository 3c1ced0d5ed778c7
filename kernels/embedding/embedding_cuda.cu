// CUDA embedding forward (row gather) and deterministic backward (stable sort by id, one block per id); see
// embedding.h.
#include <cub/cub.cuh>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/embedding/embedding.h"

namespace lmf::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// Records the smallest row whose id is out of range (bad starts at INT64_MAX-like sentinel N).
__global__ void CheckIdsKernel(int64_t N, int64_t V, const int32_t* ids, unsigned long long* first_bad) {
  for (int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; n < N;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (ids[n] < 0 || ids[n] >= V) atomicMin(first_bad, static_cast<unsigned long long>(n));
  }
}

template <typename T>
__global__ void GatherKernel(int64_t N, int64_t V, int64_t C, const int32_t* ids, const T* table, T* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < N * C;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i - n * C;
    const int32_t id = ids[n];
    if (id >= 0 && id < V) out[i] = table[static_cast<int64_t>(id) * C + c];
  }
}

__global__ void IotaKernel(int64_t N, int32_t* rows) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < N;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    rows[i] = static_cast<int32_t>(i);
}

// One block per sorted position; the block at the start of a run of equal ids sums that run's dout rows
// (in ascending row order: the sort is stable) and adds the sum to dtable[id].
template <typename T>
__global__ void SegmentSumKernel(int64_t N, int64_t C, const int32_t* sorted_ids, const int32_t* sorted_rows,
                                 const T* dout, float* dtable) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const int32_t id = sorted_ids[i];
    if (i > 0 && sorted_ids[i - 1] == id) continue;
    int64_t end = i + 1;
    while (end < N && sorted_ids[end] == id) ++end;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      float s = 0.0f;
      for (int64_t j = i; j < end; ++j) s += ToFloat(dout[static_cast<int64_t>(sorted_rows[j]) * C + c]);
      dtable[static_cast<int64_t>(id) * C + c] += s;
    }
  }
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
  Scratch flag;
  LMF_RETURN_IF_ERROR_STATUS(flag.Allocate(ctx, sizeof(unsigned long long)));
  LMF_RETURN_IF_ERROR_STATUS(CheckIds(ctx, p.N, p.V, p.ids, flag.get<unsigned long long>()));
  const unsigned grid = GridFor(p.N * p.C, kThreads);
  if (p.dtype == DType::kF32) {
    GatherKernel<float><<<grid, kThreads, 0, StreamOf(ctx)>>>(
        p.N, p.V, p.C, p.ids, static_cast<const float*>(p.table), static_cast<float*>(p.out));
  } else {
    GatherKernel<bf16><<<grid, kThreads, 0, StreamOf(ctx)>>>(
        p.N, p.V, p.C, p.ids, static_cast<const bf16*>(p.table), static_cast<bf16*>(p.out));
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
  LMF_RETURN_IF_ERROR_STATUS(CheckIds(ctx, p.N, p.V, p.ids, flag));
  IotaKernel<<<GridFor(p.N, kThreads), kThreads, 0, stream>>>(p.N, rows);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("IotaKernel");
  // Ids are in [0, V): sorting only the bits V needs is enough (and faster).
  int end_bit = 1;
  while (end_bit < 31 && (int64_t{1} << end_bit) < p.V) ++end_bit;
  LMF_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(temp, sort_bytes, p.ids, sorted_ids, rows,
                                                           sorted_rows, N, 0, end_bit, stream));
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(p.N, 65535));
  const int threads = p.C >= 256 ? 256 : 128;
  if (p.dtype == DType::kF32) {
    SegmentSumKernel<float><<<grid, threads, 0, stream>>>(
        p.N, p.C, sorted_ids, sorted_rows, static_cast<const float*>(p.dout), static_cast<float*>(p.dtable));
  } else {
    SegmentSumKernel<bf16><<<grid, threads, 0, stream>>>(
        p.N, p.C, sorted_ids, sorted_rows, static_cast<const bf16*>(p.dout), static_cast<float*>(p.dtable));
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("SegmentSumKernel");
  return absl::OkStatus();
}

}  // namespace lmf::kernels::cuda
