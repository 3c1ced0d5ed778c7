// CUDA global gradient norm and clipping: a deterministic two-pass reduction (fixed chunks, fp32 within a
// chunk, double across chunks in a fixed order, as the CPU kernel) whose result can stay on the device and
// feed AdamW's clipping without a host synchronisation; see grad_norm.h.
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
  __shared__ float scratch[32];
  const Chunk c = chunks[blockIdx.x];
  const G* g = static_cast<const G*>(spans[c.tensor].data);
  float s = 0.0f;
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
    const float x = ToFloat(g[i]);
    s += x * x;
  }
  s = BlockSum(s, scratch);
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
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) g[i] = FromFloat<G>(ToFloat(g[i]) * s);
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
