// CUDA fused cross-entropy; see cross_entropy.h.
#include <cmath>

#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"

namespace lmf::kernels::cuda {
namespace {

constexpr int kThreads = 512;

// Merges two (max, sum of exp(x - max)) pairs.
__device__ __forceinline__ void Merge(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // both empty
  s = s * __expf(m - mx) + s2 * __expf(m2 - mx);
  m = mx;
}

// Online update of (max m, sum s of exp(x - m)) with one value. A -inf logit adds 0 (while m is still
// -inf, x - m would be NaN); a NaN logit still propagates.
__device__ __forceinline__ void Accumulate(float& m, float& s, float x) {
  if (x > m) {
    s = s * __expf(m - x) + 1.0f;
    m = x;
  } else if (x != -INFINITY) {
    s += __expf(x - m);
  }
}

// W elements per access (16 bytes when the row stride and pointers allow, else 1); columns past the last
// full vector below V are done one at a time.
template <typename T, bool kForward, bool kGradient, int W>
__global__ void CrossEntropyKernel(CrossEntropyParams p, int64_t stride) {
  __shared__ float sm[32], ss[32];
  const int64_t n = blockIdx.x;
  const T* x = static_cast<const T*>(p.logits) + n * stride;
  T* g = kGradient ? static_cast<T*>(p.dlogits) + n * stride : nullptr;
  const int32_t target = p.targets[n];
  const bool ignored = target == p.ignore_index;
  const bool valid = ignored || (target >= 0 && target < p.V);
  // Read before anything may overwrite the row (dlogits may alias logits).
  const float picked = (!ignored && valid) ? ToFloat(x[target]) : 0.0f;
  float lse;
  if constexpr (kForward) {
    float m = -INFINITY, s = 0.0f;
    const int64_t vec_end = p.V / W * W;
    for (int64_t v = threadIdx.x * W; v < vec_end; v += static_cast<int64_t>(blockDim.x) * W) {
      float xv[W];
      LoadN<T, W>(x + v, xv);
#pragma unroll
      for (int i = 0; i < W; ++i) Accumulate(m, s, xv[i]);
    }
    for (int64_t v = vec_end + threadIdx.x; v < p.V; v += blockDim.x) Accumulate(m, s, ToFloat(x[v]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      Merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (lane == 0) {
      sm[warp] = m;
      ss[warp] = s;
    }
    __syncthreads();
    m = lane < warps ? sm[lane] : -INFINITY;
    s = lane < warps ? ss[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      Merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    lse = m + logf(s);
    if (threadIdx.x == 0) {
      if (p.lse != nullptr) p.lse[n] = lse;
      // A target outside [0, V) (and not ignore_index) is a data error: its loss is NaN, never silently 0.
      if (p.losses != nullptr)
        p.losses[n] = !valid ? NAN : ignored ? 0.0f : lse - picked + p.z_loss * lse * lse;
    }
  } else {
    lse = p.lse[n];
    __syncthreads();
  }
  if constexpr (kGradient) {
    const float dloss = p.dlosses != nullptr ? p.dlosses[n] : p.dloss;
    const bool zero = ignored || !valid || !isfinite(lse);
    const float k = dloss * (1.0f + 2.0f * p.z_loss * lse);
    // stride is a multiple of W here (checked at launch), so whole vectors cover the row.
    for (int64_t v = threadIdx.x * W; v < stride; v += static_cast<int64_t>(blockDim.x) * W) {
      float d[W];
      LoadN<T, W>(x + v, d);
#pragma unroll
      for (int i = 0; i < W; ++i) {
        const int64_t col = v + i;
        float gv = 0.0f;
        if (!zero && col < p.V) {
          gv = k * __expf(d[i] - lse);
          if (col == target) gv -= dloss;
          if (p.softcap > 0.0f) {  // w.r.t. the uncapped z: dy/dz = 1 - (y / c)^2
            const float r = d[i] / p.softcap;
            gv *= 1.0f - r * r;
          }
        }
        d[i] = gv;
      }
      StoreN<T, W>(g + v, d);
    }
  }
}

template <typename T>
absl::Status Launch(const Context& ctx, const CrossEntropyParams& p, bool forward, bool gradient,
                    int64_t stride) {
  const unsigned grid = static_cast<unsigned>(p.N);
  constexpr int kW = 16 / sizeof(T);
  const bool vec = stride % kW == 0 && Aligned16({p.logits, p.dlogits});
  if (forward && gradient) {
    auto* kernel = vec ? CrossEntropyKernel<T, true, true, kW> : CrossEntropyKernel<T, true, true, 1>;
    kernel<<<grid, kThreads, 0, StreamOf(ctx)>>>(p, stride);
  } else if (forward) {
    auto* kernel = vec ? CrossEntropyKernel<T, true, false, kW> : CrossEntropyKernel<T, true, false, 1>;
    kernel<<<grid, kThreads, 0, StreamOf(ctx)>>>(p, stride);
  } else {
    auto* kernel = vec ? CrossEntropyKernel<T, false, true, kW> : CrossEntropyKernel<T, false, true, 1>;
    kernel<<<grid, kThreads, 0, StreamOf(ctx)>>>(p, stride);
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("CrossEntropyKernel");
  return absl::OkStatus();
}

absl::Status Run(const Context& ctx, const CrossEntropyParams& p, bool forward, bool gradient) {
  if (p.dtype != DType::kF32 && p.dtype != DType::kBF16)
    return absl::InvalidArgumentError(
        absl::StrCat("cross_entropy: CUDA runs f32 and bf16, not ", DTypeName(p.dtype)));
  const int64_t stride = p.row_stride ? p.row_stride : p.V;
  if (stride < p.V)
    return absl::InvalidArgumentError(absl::StrCat("cross_entropy: row_stride ", stride, " < V ", p.V));
  if (!(p.softcap >= 0.0f) || !std::isfinite(p.softcap))
    return absl::InvalidArgumentError(absl::StrCat("cross_entropy: softcap ", p.softcap, " must be finite and >= 0"));
  if (gradient && p.dlogits == nullptr)
    return absl::InvalidArgumentError("cross_entropy: backward without dlogits");
  if (!forward && p.lse == nullptr)
    return absl::InvalidArgumentError("cross_entropy: backward needs lse from the forward");
  if (p.N == 0) return absl::OkStatus();
  if (p.N > 0x7fffffff) return absl::InvalidArgumentError("cross_entropy: more than 2^31 rows");
  return p.dtype == DType::kF32 ? Launch<float>(ctx, p, forward, gradient, stride)
                                : Launch<bf16>(ctx, p, forward, gradient, stride);
}

}  // namespace

absl::Status CrossEntropyForward(const Context& ctx, const CrossEntropyParams& p) {
  return Run(ctx, p, /*forward=*/true, /*gradient=*/p.dlogits != nullptr);
}

absl::Status CrossEntropyBackward(const Context& ctx, const CrossEntropyParams& p) {
  return Run(ctx, p, /*forward=*/false, /*gradient=*/true);
}

}  // namespace lmf::kernels::cuda
