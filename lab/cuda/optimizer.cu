// CUDA multi-tensor AdamW and global gradient norm; see optimizer.h. Work is cut into fixed chunks of
// kChunk elements (tensor index, offset) listed on the host and uploaded once per call, so one launch covers
// every tensor and the chunking (hence the reduction order of the norm) does not depend on the device.
#include <cmath>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "lab/cuda/optimizer.h"
#include "kernels/cuda/scratch.h"

namespace lmf::kernels::cuda {
namespace {

constexpr int64_t kChunk = 16384;  // the CPU grad norm's block size: fp32 within it, double across
constexpr int kThreads = 256;

struct Chunk {
  int32_t tensor;
  int64_t begin;
  int64_t end;
};

struct AdamWConstants {
  float lr_decay;   // 1 - lr * weight_decay
  float step_size;  // lr / (1 - beta1^step)
  float sqrt_bc2;   // sqrt(1 - beta2^step)
  float beta1, beta2, one_b1, one_b2, eps, grad_scale, max_norm;
  const float* norm;
};

template <typename G>
__global__ void AdamWKernel(const AdamWTensor* tensors, const Chunk* chunks, AdamWConstants k) {
  const Chunk c = chunks[blockIdx.x];
  const AdamWTensor t = tensors[c.tensor];
  const G* grad = static_cast<const G*>(t.grad);
  bf16* copy = static_cast<bf16*>(t.param_copy);
  float gs = k.grad_scale;
  if (k.norm != nullptr) {
    const float s = k.max_norm / (*k.norm + 1e-6f);
    gs *= s < 1.0f ? s : 1.0f;
  }
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
    const float g = ToFloat(grad[i]) * gs;
    const float m = k.beta1 * t.m[i] + k.one_b1 * g;
    const float v = k.beta2 * t.v[i] + k.one_b2 * (g * g);
    t.m[i] = m;
    t.v[i] = v;
    const float w = t.param[i] * k.lr_decay;
    const float updated = w - k.step_size * (m / (sqrtf(v) / k.sqrt_bc2 + k.eps));
    t.param[i] = updated;
    if (copy != nullptr) copy[i] = __float2bfloat16_rn(updated);
  }
}

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

template <typename Span>
std::vector<Chunk> MakeChunks(const Span* spans, int64_t num) {
  std::vector<Chunk> chunks;
  for (int64_t t = 0; t < num; ++t)
    for (int64_t b = 0; b < spans[t].n; b += kChunk)
      chunks.push_back(Chunk{static_cast<int32_t>(t), b, std::min(spans[t].n, b + kChunk)});
  return chunks;
}

// Uploads the span table and the chunk list into one scratch block (returns device pointers).
template <typename Span>
absl::Status Upload(const Context& ctx, const Span* spans, int64_t num, const std::vector<Chunk>& chunks,
                    size_t extra_bytes, Scratch& scratch, Span** d_spans, Chunk** d_chunks, void** d_extra) {
  const size_t span_bytes = (sizeof(Span) * num + 255) / 256 * 256;
  const size_t chunk_bytes = (sizeof(Chunk) * chunks.size() + 255) / 256 * 256;
  LMF_RETURN_IF_ERROR_STATUS(scratch.Allocate(ctx, span_bytes + chunk_bytes + extra_bytes));
  char* base = scratch.get<char>();
  *d_spans = reinterpret_cast<Span*>(base);
  *d_chunks = reinterpret_cast<Chunk*>(base + span_bytes);
  *d_extra = base + span_bytes + chunk_bytes;
  // From pageable host memory: the copy has read the source when the call returns.
  LMF_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(*d_spans, spans, sizeof(Span) * num, cudaMemcpyHostToDevice, StreamOf(ctx)));
  LMF_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(*d_chunks, chunks.data(), sizeof(Chunk) * chunks.size(),
                                           cudaMemcpyHostToDevice, StreamOf(ctx)));
  return absl::OkStatus();
}

absl::Status CheckDType(DType t, const char* op) {
  if (t == DType::kF32 || t == DType::kBF16) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": CUDA gradients are f32 or bf16, not ", DTypeName(t)));
}

}  // namespace

absl::Status MultiTensorAdamW(const Context& ctx, const MultiTensorAdamWParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckDType(p.grad_dtype, "adamw"));
  if (p.step < 1)
    return absl::InvalidArgumentError(absl::StrCat("adamw: step ", p.step, " (steps count from 1)"));
  const std::vector<Chunk> chunks = MakeChunks(p.tensors, p.num_tensors);
  if (chunks.empty()) return absl::OkStatus();
  Scratch scratch;
  AdamWTensor* d_tensors = nullptr;
  Chunk* d_chunks = nullptr;
  void* unused = nullptr;
  LMF_RETURN_IF_ERROR_STATUS(
      Upload(ctx, p.tensors, p.num_tensors, chunks, 0, scratch, &d_tensors, &d_chunks, &unused));
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  AdamWConstants k;
  k.lr_decay = 1.0f - p.lr * p.weight_decay;
  k.step_size = static_cast<float>(p.lr / bc1);
  k.sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  k.beta1 = p.beta1, k.beta2 = p.beta2, k.one_b1 = 1.0f - p.beta1, k.one_b2 = 1.0f - p.beta2;
  k.eps = p.eps, k.grad_scale = p.grad_scale, k.max_norm = p.max_norm, k.norm = p.norm;
  const unsigned grid = static_cast<unsigned>(chunks.size());
  if (p.grad_dtype == DType::kF32) {
    AdamWKernel<float><<<grid, kThreads, 0, StreamOf(ctx)>>>(d_tensors, d_chunks, k);
  } else {
    AdamWKernel<bf16><<<grid, kThreads, 0, StreamOf(ctx)>>>(d_tensors, d_chunks, k);
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("AdamWKernel");
  return absl::OkStatus();
}

absl::Status AdamWStep(const Context& ctx, const AdamWParams& p) {
  if (p.dtype != DType::kF32)
    return absl::InvalidArgumentError(
        "adamw: AdamWParams holds fp32 params and grads; use MultiTensorAdamW for bf16 grads");
  AdamWTensor t;
  t.n = p.n, t.param = static_cast<float*>(p.param), t.grad = p.grad, t.m = p.m, t.v = p.v;
  MultiTensorAdamWParams mp;
  mp.tensors = &t, mp.num_tensors = 1;
  mp.lr = p.lr, mp.beta1 = p.beta1, mp.beta2 = p.beta2, mp.eps = p.eps, mp.weight_decay = p.weight_decay;
  mp.step = p.step, mp.grad_scale = p.grad_scale;
  return MultiTensorAdamW(ctx, mp);
}

absl::Status GlobalGradNormToDevice(const Context& ctx, const GradNormParams& p, float* norm_device) {
  LMF_RETURN_IF_ERROR_STATUS(CheckDType(p.dtype, "grad_norm"));
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
  LMF_RETURN_IF_ERROR_STATUS(GlobalGradNormToDevice(ctx, p, out.get<float>()));
  float norm = 0.0f;
  LMF_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&norm, out.get<float>(), sizeof(float), cudaMemcpyDeviceToHost, StreamOf(ctx)));
  LMF_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(StreamOf(ctx)));
  return norm;
}

absl::StatusOr<float> ClipGradNorm(const Context& ctx, const GradNormParams& p, float max_norm) {
  Scratch out;
  LMF_RETURN_IF_ERROR_STATUS(out.Allocate(ctx, sizeof(float)));
  LMF_RETURN_IF_ERROR_STATUS(GlobalGradNormToDevice(ctx, p, out.get<float>()));
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
