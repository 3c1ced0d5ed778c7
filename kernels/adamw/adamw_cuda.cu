// CUDA multi-tensor AdamW: torch.optim.AdamW's math on fp32 master weights and moments, fp32 or bf16
// gradients, an optional bf16 copy of the updated weights, clipping from a norm that stays on the device;
// see adamw.h. One launch for all tensors (kernels/cuda/tensor_chunks.h). Each thread updates 8 consecutive
// elements with 16-byte accesses (two per fp32 array, one per bf16 array) where all of a tensor's pointers
// are 16-byte aligned (chunk starts are multiples of kChunk, so every chunk of such a tensor is too), then a
// scalar tail; a tensor with any pointer off 16 bytes takes the scalar path. Both paths do the same float
// operations per element, so the updates are bitwise the same either way.
#include <cmath>
#include <vector>

#include "kernels/adamw/adamw.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/tensor_chunks.h"

namespace lmf::kernels::cuda {
namespace {

constexpr int kThreads = 256;

struct AdamWConstants {
  float lr_decay;   // 1 - lr * weight_decay
  float step_size;  // lr / (1 - beta1^step)
  float sqrt_bc2;   // sqrt(1 - beta2^step)
  float beta1, beta2, one_b1, one_b2, eps, grad_scale, max_norm;
  const float* norm;
};

// The update of one element (g already scaled); writes m and v, returns the new weight.
__device__ __forceinline__ float Update(float g, float& m, float& v, float w, const AdamWConstants& k) {
  m = k.beta1 * m + k.one_b1 * g;
  v = k.beta2 * v + k.one_b2 * (g * g);
  const float decayed = w * k.lr_decay;
  return decayed - k.step_size * (m / (sqrtf(v) / k.sqrt_bc2 + k.eps));
}

// Elements per thread on the vector path: 16-byte accesses (device_util's LoadN/StoreN), two per fp32 array
// and one per bf16 array.
constexpr int kVec = 8;
static_assert(kChunk % kVec == 0, "chunk starts must keep 16-byte alignment");

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
  const uintptr_t addresses = reinterpret_cast<uintptr_t>(t.param) | reinterpret_cast<uintptr_t>(grad) |
                              reinterpret_cast<uintptr_t>(t.m) | reinterpret_cast<uintptr_t>(t.v) |
                              reinterpret_cast<uintptr_t>(copy);
  int64_t scalar_begin = c.begin;
  if (addresses % 16 == 0) {  // c.begin is a multiple of kChunk, hence of kVec
    const int64_t vec_end = c.begin + (c.end - c.begin) / kVec * kVec;
    for (int64_t i = c.begin + threadIdx.x * kVec; i < vec_end; i += blockDim.x * kVec) {
      float g[kVec], m[kVec], v[kVec], w[kVec];
      LoadN(grad + i, g);
      LoadN(t.m + i, m);
      LoadN(t.v + i, v);
      LoadN(t.param + i, w);
#pragma unroll
      for (int j = 0; j < kVec; ++j) w[j] = Update(g[j] * gs, m[j], v[j], w[j], k);
      StoreN(t.m + i, m);
      StoreN(t.v + i, v);
      StoreN(t.param + i, w);
      if (copy != nullptr) StoreN(copy + i, w);
    }
    scalar_begin = vec_end;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < c.end; i += blockDim.x) {
    float m = t.m[i], v = t.v[i];
    const float updated = Update(ToFloat(grad[i]) * gs, m, v, t.param[i], k);
    t.m[i] = m;
    t.v[i] = v;
    t.param[i] = updated;
    if (copy != nullptr) copy[i] = __float2bfloat16_rn(updated);
  }
}

}  // namespace

absl::Status MultiTensorAdamW(const Context& ctx, const MultiTensorAdamWParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.grad_dtype, "adamw"));
  if (p.step < 1)
    return absl::InvalidArgumentError(absl::StrCat("adamw: step ", p.step, " (steps count from 1)"));
  if (p.zero_grads) {
    return absl::InvalidArgumentError(
        "adamw: zero_grads (zeroing the gradients in the update's pass) is CPU-only; zero them with FillZero");
  }
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
  return cuda::MultiTensorAdamW(ctx, mp);
}

}  // namespace lmf::kernels::cuda
