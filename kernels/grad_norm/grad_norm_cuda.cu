// CUDA global gradient norm and clipping: a deterministic two-pass reduction (fixed chunks, fp32 within a
// chunk, double across chunks in a fixed order, as the CPU kernel) whose result can stay on the device and
// feed AdamW's clipping without a host synchronisation; see grad_norm.h. Where a gradient is 16-byte
// aligned (chunk starts are multiples of kChunk, so all its chunks are), each thread reads 16 bytes per
// access (4 fp32 or 8 bf16) into as many independent fp32 accumulators (one per lane, so several loads and
// FMAs are in flight), combined in a fixed order with the scalar tail's sum, then the block sum: the order
// within a chunk is not the CPU kernel's, but it is fixed (bitwise reproducible run to run; fp32 over at
// most 16K terms, ~1e-6 relative from the CPU). Clipping scales with 16-byte accesses too (same operations
// per element as the scalar path).
#include <cmath>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/tensor_chunks.h"
#include "kernels/grad_norm/grad_norm.h"

namespace lmf::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <typename G>
__global__ void SquareSumKernel(const GradSpan* spans, const Chunk* chunks, double* partial) {
  constexpr int kW = 16 / sizeof(G);
  static_assert(kChunk % kW == 0, "chunk starts must keep 16-byte alignment");
  __shared__ float scratch[32];
  const Chunk c = chunks[blockIdx.x];
  const G* g = static_cast<const G*>(spans[c.tensor].data);
  float lanes[kW];
#pragma unroll
  for (int j = 0; j < kW; ++j) lanes[j] = 0.0f;
  int64_t scalar_begin = c.begin;
  if (reinterpret_cast<uintptr_t>(g) % 16 == 0) {
    const int64_t vec_end = c.begin + (c.end - c.begin) / kW * kW;
#pragma unroll 4
    for (int64_t i = c.begin + threadIdx.x * kW; i < vec_end; i += blockDim.x * kW) {
      float x[kW];
      LoadN<G, kW>(g + i, x);
#pragma unroll
      for (int j = 0; j < kW; ++j) lanes[j] += x[j] * x[j];
    }
    scalar_begin = vec_end;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < c.end; i += blockDim.x) {
    const float x = ToFloat(g[i]);
    lanes[0] += x * x;
  }
  // Pairwise over the lanes, in a fixed order.
#pragma unroll
  for (int w = kW / 2; w > 0; w >>= 1)
#pragma unroll
    for (int j = 0; j < w; ++j) lanes[j] += lanes[j + w];
  const float s = BlockSum(lanes[0], scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// One block of 256 threads: strided double sums, then a fixed tree.
__global__ void FinishNormKernel(const double* partial, int64_t num, float* norm) {
  __shared__ double buf[kThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < num; i += blockDim.x) s += partial[i];
  buf[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) buf[threadIdx.x] += buf[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *norm = static_cast<float>(sqrt(buf[0]));
}

template <typename G>
__global__ void ScaleKernel(const GradSpan* spans, const Chunk* chunks, const float* norm, float max_norm) {
  const Chunk c = chunks[blockIdx.x];
  G* g = static_cast<G*>(spans[c.tensor].data);
  float s = max_norm / (*norm + 1e-6f);
  s = s < 1.0f ? s : 1.0f;
  int64_t scalar_begin = c.begin;
  constexpr int kW = 16 / sizeof(G);
  if (reinterpret_cast<uintptr_t>(g) % 16 == 0) {
    const int64_t vec_end = c.begin + (c.end - c.begin) / kW * kW;
    for (int64_t i = c.begin + threadIdx.x * kW; i < vec_end; i += blockDim.x * kW) {
      float x[kW];
      LoadN<G, kW>(g + i, x);
#pragma unroll
      for (int j = 0; j < kW; ++j) x[j] *= s;
      StoreN<G, kW>(g + i, x);
    }
    scalar_begin = vec_end;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < c.end; i += blockDim.x)
    g[i] = FromFloat<G>(ToFloat(g[i]) * s);
}

}  // namespace

absl::Status GlobalGradNormToDevice(const Context& ctx, const GradNormParams& p, float* norm_device) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "grad_norm"));
  const std::vector<Chunk> chunks = MakeChunks(p.grads, p.num_grads);
  if (chunks.empty()) {
    LMF_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(norm_device, 0, sizeof(float), StreamOf(ctx)));
    return absl::OkStatus();
  }
  Scratch scratch;
  GradSpan* d_spans = nullptr;
  Chunk* d_chunks = nullptr;
  void* partial = nullptr;
  LMF_RETURN_IF_ERROR_STATUS(Upload(ctx, p.grads, p.num_grads, chunks, sizeof(double) * chunks.size(),
                                    scratch, &d_spans, &d_chunks, &partial));
  const unsigned grid = static_cast<unsigned>(chunks.size());
  if (p.dtype == DType::kF32) {
    SquareSumKernel<float>
        <<<grid, kThreads, 0, StreamOf(ctx)>>>(d_spans, d_chunks, static_cast<double*>(partial));
  } else {
    SquareSumKernel<bf16>
        <<<grid, kThreads, 0, StreamOf(ctx)>>>(d_spans, d_chunks, static_cast<double*>(partial));
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("SquareSumKernel");
  FinishNormKernel<<<1, kThreads, 0, StreamOf(ctx)>>>(static_cast<double*>(partial),
                                                      static_cast<int64_t>(chunks.size()), norm_device);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("FinishNormKernel");
  return absl::OkStatus();
}

absl::StatusOr<float> GlobalGradNorm(const Context& ctx, const GradNormParams& p) {
  Scratch out;
  LMF_RETURN_IF_ERROR_STATUS(out.Allocate(ctx, sizeof(float)));
  LMF_RETURN_IF_ERROR_STATUS(cuda::GlobalGradNormToDevice(ctx, p, out.get<float>()));
  float norm = 0.0f;
  LMF_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&norm, out.get<float>(), sizeof(float), cudaMemcpyDeviceToHost, StreamOf(ctx)));
  LMF_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(StreamOf(ctx)));
  return norm;
}

absl::StatusOr<float> ClipGradNorm(const Context& ctx, const GradNormParams& p, float max_norm) {
  Scratch out;
  LMF_RETURN_IF_ERROR_STATUS(out.Allocate(ctx, sizeof(float)));
  LMF_RETURN_IF_ERROR_STATUS(cuda::GlobalGradNormToDevice(ctx, p, out.get<float>()));
  const std::vector<Chunk> chunks = MakeChunks(p.grads, p.num_grads);
  if (!chunks.empty()) {
    Scratch scratch;
    GradSpan* d_spans = nullptr;
    Chunk* d_chunks = nullptr;
    void* unused = nullptr;
    LMF_RETURN_IF_ERROR_STATUS(
        Upload(ctx, p.grads, p.num_grads, chunks, 0, scratch, &d_spans, &d_chunks, &unused));
    const unsigned grid = static_cast<unsigned>(chunks.size());
    if (p.dtype == DType::kF32) {
      ScaleKernel<float><<<grid, kThreads, 0, StreamOf(ctx)>>>(d_spans, d_chunks, out.get<float>(), max_norm);
    } else {
      ScaleKernel<bf16><<<grid, kThreads, 0, StreamOf(ctx)>>>(d_spans, d_chunks, out.get<float>(), max_norm);
    }
    LMF_CUDA_RETURN_IF_LAUNCH_ERROR("ScaleKernel");
  }
  float norm = 0.0f;
  LMF_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&norm, out.get<float>(), sizeof(float), cudaMemcpyDeviceToHost, StreamOf(ctx)));
  LMF_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(StreamOf(ctx)));
  return norm;
}

}  // namespace lmf::kernels::cuda
