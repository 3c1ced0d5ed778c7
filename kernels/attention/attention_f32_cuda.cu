// fp32 attention on CUDA cores; see attention_f32_cuda.h. Lane l of a warp owns head dimensions l, l + 32,
// ... (kPer = HS / 32 of them) of its row's output, and key (or query) l of the current 32-wide tile.
#include "kernels/attention/attention_f32_cuda.h"
#include "kernels/attention/attention_mask.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"

namespace lmf::kernels::cuda::internal {
namespace {

constexpr int kRows = 4;  // warps (rows) per block
constexpr int kTile = 32;

// Which scores are hidden and how they are soft-capped: attention_mask.cuh's Masked, SoftCap and
// SoftCapGrad, as in the bf16 kernels (positions fit an int: Validate in attention_cuda.cu keeps T and S below
// 2^31).

// Rows [row0, row0 + 32) of a (., HS) strided matrix into s (row stride HS + 1), zero past `valid`.
template <int kPer>
__device__ __forceinline__ void LoadTile(float* s, const float* g, int64_t row_stride, int64_t row0,
                                         int64_t valid) {
  constexpr int HS = 32 * kPer;
  for (int i = threadIdx.x; i < kTile * HS; i += blockDim.x) {
    const int r = i / HS, d = i - r * HS;
    s[r * (HS + 1) + d] = row0 + r < valid ? g[(row0 + r) * row_stride + d] : 0.0f;
  }
}

template <int kPer, bool kCausal>
__global__ void F32ForwardKernel(AttentionParams p) {
  constexpr int HS = 32 * kPer;
  __shared__ float sK[kTile * (HS + 1)], sV[kTile * (HS + 1)], sQ[kRows * HS];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (p.NH / p.NKV);
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kRows, t = t0 + warp;
  const float* q = static_cast<const float*>(p.q) + b * p.q_stride_b + h * p.q_stride_h;
  const float* k = static_cast<const float*>(p.k) + b * p.k_stride_b + kvh * p.k_stride_h;
  const float* v = static_cast<const float*>(p.v) + b * p.v_stride_b + kvh * p.v_stride_h;
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    sQ[warp * HS + lane + 32 * i] = t < p.T ? q[t * p.q_stride_t + lane + 32 * i] * p.scale : 0.0f;
  float o[kPer] = {};
  float m = -INFINITY, l = 0.0f;
  const int64_t end = kCausal ? min(p.S, t0 + kRows) : p.S;
  for (int64_t u0 = 0; u0 < end; u0 += kTile) {
    __syncthreads();
    LoadTile<kPer>(sK, k, p.k_stride_t, u0, p.S);
    LoadTile<kPer>(sV, v, p.v_stride_t, u0, p.S);
    __syncthreads();
    float s = 0.0f;
    for (int d = 0; d < HS; ++d) s += sQ[warp * HS + d] * sK[lane * (HS + 1) + d];
    const bool hidden = Masked(p, kCausal, b, h, static_cast<int>(t), static_cast<int>(u0 + lane));
    s = hidden ? -INFINITY : SoftCap(p, s);
    const float new_m = fmaxf(m, WarpMax(s));
    const float use = new_m == -INFINITY ? 0.0f : new_m;
    const float alpha = expf(m - use);
    const float pr = hidden ? 0.0f : expf(s - use);
    l = l * alpha + WarpSum(pr);
    m = new_m;
#pragma unroll
    for (int i = 0; i < kPer; ++i) o[i] *= alpha;
    for (int j = 0; j < kTile; ++j) {
      const float pj = __shfl_sync(0xffffffffu, pr, j);
#pragma unroll
      for (int i = 0; i < kPer; ++i) o[i] += pj * sV[j * (HS + 1) + lane + 32 * i];
    }
  }
  if (t >= p.T) return;
  float* out = static_cast<float*>(p.out) + b * p.out_stride_b + t * p.out_stride_t + h * p.out_stride_h;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) out[lane + 32 * i] = o[i] * inv;
  if (lane == 0) p.lse[(static_cast<int64_t>(b) * p.NH + h) * p.T + t] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// dsum[b, h, t] = dout . out over the head dimension; one warp per row.
__global__ void F32DotRowsKernel(AttentionBackwardParams bp, float* dsum) {
  const AttentionParams& p = bp.forward;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRows + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= p.B * p.NH * p.T) return;
  const int64_t t = row % p.T, h = (row / p.T) % p.NH, b = row / (p.T * p.NH);
  const int64_t off = b * p.out_stride_b + t * p.out_stride_t + h * p.out_stride_h;
  const float* o = static_cast<const float*>(p.out) + off;
  const float* d = static_cast<const float*>(bp.dout) + off;
  float s = 0.0f;
  for (int64_t i = lane; i < p.HS; i += 32) s += o[i] * d[i];
  s = WarpSum(s);
  if (lane == 0) dsum[row] = s;
}

template <int kPer, bool kCausal>
__global__ void F32BackwardDqKernel(AttentionBackwardParams bp, const float* dsum) {
  constexpr int HS = 32 * kPer;
  __shared__ float sK[kTile * (HS + 1)], sV[kTile * (HS + 1)], sQ[kRows * HS], sD[kRows * HS];
  const AttentionParams& p = bp.forward;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (p.NH / p.NKV);
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kRows, t = t0 + warp;
  const float* q = static_cast<const float*>(p.q) + b * p.q_stride_b + h * p.q_stride_h;
  const float* dout = static_cast<const float*>(bp.dout) + b * p.out_stride_b + h * p.out_stride_h;
  const float* k = static_cast<const float*>(p.k) + b * p.k_stride_b + kvh * p.k_stride_h;
  const float* v = static_cast<const float*>(p.v) + b * p.v_stride_b + kvh * p.v_stride_h;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    sQ[warp * HS + lane + 32 * i] = t < p.T ? q[t * p.q_stride_t + lane + 32 * i] * p.scale : 0.0f;
    sD[warp * HS + lane + 32 * i] = t < p.T ? dout[t * p.out_stride_t + lane + 32 * i] : 0.0f;
  }
  const int64_t stat = (static_cast<int64_t>(b) * p.NH + h) * p.T + t;
  const float lse = t < p.T ? p.lse[stat] : -INFINITY;
  const float drow = t < p.T ? dsum[stat] : 0.0f;
  float dq[kPer] = {};
  const int64_t end = kCausal ? min(p.S, t0 + kRows) : p.S;
  for (int64_t u0 = 0; u0 < end; u0 += kTile) {
    __syncthreads();
    LoadTile<kPer>(sK, k, p.k_stride_t, u0, p.S);
    LoadTile<kPer>(sV, v, p.v_stride_t, u0, p.S);
    __syncthreads();
    float s = 0.0f, dp = 0.0f;
    for (int d = 0; d < HS; ++d) {
      s += sQ[warp * HS + d] * sK[lane * (HS + 1) + d];
      dp += sD[warp * HS + d] * sV[lane * (HS + 1) + d];
    }
    const bool hidden =
        lse == -INFINITY || Masked(p, kCausal, b, h, static_cast<int>(t), static_cast<int>(u0 + lane));
    const float ds = hidden ? 0.0f : expf(SoftCap(p, s) - lse) * (dp - drow) * SoftCapGrad(p, s);
    for (int j = 0; j < kTile; ++j) {
      const float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
      for (int i = 0; i < kPer; ++i) dq[i] += dsj * sK[j * (HS + 1) + lane + 32 * i];
    }
  }
  if (t >= p.T) return;
  float* out = static_cast<float*>(bp.dq) + b * p.q_stride_b + t * p.q_stride_t + h * p.q_stride_h;
#pragma unroll
  for (int i = 0; i < kPer; ++i) out[lane + 32 * i] = dq[i] * p.scale;
}

template <int kPer, bool kCausal>
__global__ void F32BackwardDkDvKernel(AttentionBackwardParams bp, const float* dsum) {
  constexpr int HS = 32 * kPer;
  __shared__ float sQ[kTile * (HS + 1)], sD[kTile * (HS + 1)], sK[kRows * HS], sV[kRows * HS], sL[kTile],
      sR[kTile];
  const AttentionParams& p = bp.forward;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, kvh = blockIdx.y, b = blockIdx.z;
  const int group = static_cast<int>(p.NH / p.NKV);
  const int64_t u0 = static_cast<int64_t>(blockIdx.x) * kRows, u = u0 + warp;
  const float* k = static_cast<const float*>(p.k) + b * p.k_stride_b + kvh * p.k_stride_h;
  const float* v = static_cast<const float*>(p.v) + b * p.v_stride_b + kvh * p.v_stride_h;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    sK[warp * HS + lane + 32 * i] = u < p.S ? k[u * p.k_stride_t + lane + 32 * i] : 0.0f;
    sV[warp * HS + lane + 32 * i] = u < p.S ? v[u * p.v_stride_t + lane + 32 * i] : 0.0f;
  }
  float dk[kPer] = {}, dv[kPer] = {};
  const int64_t begin = kCausal ? u0 / kTile * kTile : 0;
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const float* q = static_cast<const float*>(p.q) + b * p.q_stride_b + h * p.q_stride_h;
    const float* dout = static_cast<const float*>(bp.dout) + b * p.out_stride_b + h * p.out_stride_h;
    const int64_t stat = (static_cast<int64_t>(b) * p.NH + h) * p.T;
    for (int64_t t0 = begin; t0 < p.T; t0 += kTile) {
      __syncthreads();
      LoadTile<kPer>(sQ, q, p.q_stride_t, t0, p.T);
      LoadTile<kPer>(sD, dout, p.out_stride_t, t0, p.T);
      if (threadIdx.x < kTile) {
        const bool in = t0 + threadIdx.x < p.T;
        sL[threadIdx.x] = in ? p.lse[stat + t0 + threadIdx.x] : -INFINITY;
        sR[threadIdx.x] = in ? dsum[stat + t0 + threadIdx.x] : 0.0f;
      }
      __syncthreads();
      // Lane j: query t0 + j against this warp's key u.
      float s = 0.0f, dp = 0.0f;
      for (int d = 0; d < HS; ++d) {
        s += sQ[lane * (HS + 1) + d] * sK[warp * HS + d];
        dp += sD[lane * (HS + 1) + d] * sV[warp * HS + d];
      }
      const bool hidden =
          sL[lane] == -INFINITY || Masked(p, kCausal, b, h, static_cast<int>(t0 + lane), static_cast<int>(u));
      const float x = s * p.scale;
      const float pr = hidden ? 0.0f : expf(SoftCap(p, x) - sL[lane]);
      const float ds = pr * (dp - sR[lane]) * SoftCapGrad(p, x);
      for (int j = 0; j < kTile; ++j) {
        const float pj = __shfl_sync(0xffffffffu, pr, j), dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          dv[i] += pj * sD[j * (HS + 1) + lane + 32 * i];
          dk[i] += dsj * sQ[j * (HS + 1) + lane + 32 * i];
        }
      }
    }
  }
  if (u >= p.S) return;
  float* dkp = static_cast<float*>(bp.dk) + b * p.k_stride_b + u * p.k_stride_t + kvh * p.k_stride_h;
  float* dvp = static_cast<float*>(bp.dv) + b * p.v_stride_b + u * p.v_stride_t + kvh * p.v_stride_h;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    dkp[lane + 32 * i] = dk[i] * p.scale;
    dvp[lane + 32 * i] = dv[i];
  }
}

template <int kPer>
absl::Status Forward(const Context& ctx, const AttentionParams& p) {
  const dim3 grid(static_cast<unsigned>((p.T + kRows - 1) / kRows), static_cast<unsigned>(p.NH),
                  static_cast<unsigned>(p.B));
  if (p.causal) {
    F32ForwardKernel<kPer, true><<<grid, 32 * kRows, 0, StreamOf(ctx)>>>(p);
  } else {
    F32ForwardKernel<kPer, false><<<grid, 32 * kRows, 0, StreamOf(ctx)>>>(p);
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("F32ForwardKernel");
  return absl::OkStatus();
}

template <int kPer>
absl::Status Backward(const Context& ctx, const AttentionBackwardParams& bp, float* dsum) {
  const AttentionParams& p = bp.forward;
  const cudaStream_t stream = StreamOf(ctx);
  const int64_t rows = p.B * p.NH * p.T;
  F32DotRowsKernel<<<static_cast<unsigned>((rows + kRows - 1) / kRows), 32 * kRows, 0, stream>>>(bp, dsum);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("F32DotRowsKernel");
  const dim3 qgrid(static_cast<unsigned>((p.T + kRows - 1) / kRows), static_cast<unsigned>(p.NH),
                   static_cast<unsigned>(p.B));
  const dim3 kgrid(static_cast<unsigned>((p.S + kRows - 1) / kRows), static_cast<unsigned>(p.NKV),
                   static_cast<unsigned>(p.B));
  if (p.causal) {
    F32BackwardDqKernel<kPer, true><<<qgrid, 32 * kRows, 0, stream>>>(bp, dsum);
    F32BackwardDkDvKernel<kPer, true><<<kgrid, 32 * kRows, 0, stream>>>(bp, dsum);
  } else {
    F32BackwardDqKernel<kPer, false><<<qgrid, 32 * kRows, 0, stream>>>(bp, dsum);
    F32BackwardDkDvKernel<kPer, false><<<kgrid, 32 * kRows, 0, stream>>>(bp, dsum);
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("F32BackwardKernels");
  return absl::OkStatus();
}

}  // namespace

bool F32AttentionSupportsHeadSize(int64_t hs) { return hs == 32 || hs == 64 || hs == 128; }

absl::Status AttentionForwardF32(const Context& ctx, const AttentionParams& p) {
  switch (p.HS) {
    case 32:
      return Forward<1>(ctx, p);
    case 64:
      return Forward<2>(ctx, p);
    case 128:
      return Forward<4>(ctx, p);
  }
  return absl::UnimplementedError(absl::StrCat("attention: CUDA f32 head size ", p.HS, " (32, 64 or 128)"));
}

absl::Status AttentionBackwardF32(const Context& ctx, const AttentionBackwardParams& bp, float* dsum) {
  switch (bp.forward.HS) {
    case 32:
      return Backward<1>(ctx, bp, dsum);
    case 64:
      return Backward<2>(ctx, bp, dsum);
    case 128:
      return Backward<4>(ctx, bp, dsum);
  }
  return absl::UnimplementedError(
      absl::StrCat("attention: CUDA f32 head size ", bp.forward.HS, " (32, 64 or 128)"));
}

}  // namespace lmf::kernels::cuda::internal
