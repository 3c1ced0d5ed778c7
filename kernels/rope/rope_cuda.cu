// CUDA RoPE, fp32 and bf16, with the params of rope.h: (b, t, h) strides, optional (per-batch) positions,
// cos/sin tables computed in double and rounded once (as the CPU kernel) into per-call scratch memory, then
// the rotation: four pairs per thread with 16-byte accesses where HS, the strides and the pointers allow,
// else one pair per thread (the same float operations either way). Backward is the rotation by the
// negative angle.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/rope/rope.h"

namespace lmf::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// cos/sin of position * theta^(-2i/HS) for rows of positions (rows = T shared, or B * T), in double.
__global__ void RopeTableKernel(int64_t rows, int64_t T, int64_t half, int64_t HS, double theta,
                                const int32_t* positions, int64_t positions_stride_b, float sign, float* cs,
                                float* sn) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * half;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / half, k = i - r * half;
    double pos = static_cast<double>(r % T);
    if (positions != nullptr) pos = positions[(r / T) * positions_stride_b + r % T];
    const double angle = pos * pow(theta, -2.0 * static_cast<double>(k) / static_cast<double>(HS));
    cs[i] = static_cast<float>(cos(angle));
    sn[i] = sign * static_cast<float>(sin(angle));
  }
}

// One thread per W elements (W / 2 pairs) of one (b, t, h) row; index math in I (32-bit where the element
// count allows: three 32-bit divisions per W elements instead of four 64-bit ones per pair). W = 8 needs HS
// and every stride multiples of 16 bytes' elements and 16-byte aligned in/out; the table rows are then
// 16-byte aligned too (half is a multiple of 4).
template <typename T, int W, typename I>
__global__ void RopeRotateKernel(RopeParams p, bool per_batch, const float* cs, const float* sn) {
  constexpr int kPairs = W / 2;
  const I half = static_cast<I>(p.HS / 2), groups = static_cast<I>(p.HS / W);
  const I NH = static_cast<I>(p.NH), T_ = static_cast<I>(p.T);
  const I total = static_cast<I>(p.B * p.T * p.NH) * groups;
  const T* in = static_cast<const T*>(p.in);
  T* out = static_cast<T*>(p.out);
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I r = i / groups, k = (i - r * groups) * kPairs;
    const I bt = r / NH, h = r - bt * NH;
    const I b = bt / T_, t = bt - b * T_;
    const I row = per_batch ? bt : t;
    float c[kPairs], s[kPairs];
    LoadN<float, kPairs>(cs + row * half + k, c);
    LoadN<float, kPairs>(sn + row * half + k, s);
    // Written this way (not with every index cast to int64 first), nvcc 13 keeps the 16-byte stores whole
    // for 32-bit indices (checked in the PTX); with int64 indices it splits them into 4-byte stores.
    const T* x_row = in + b * p.in_stride_b + t * p.in_stride_t + h * p.in_stride_h + 2 * k;
    T* y_row = out + b * p.out_stride_b + t * p.out_stride_t + h * p.out_stride_h + 2 * k;
    // W elements as kPieces accesses of kPer: 16 bytes each (kPer = 4 fp32 or 8 bf16), or two scalars.
    constexpr int kPer = W == 2 ? 1 : 16 / sizeof(T), kPieces = W / kPer;
    float x[kPieces][kPer], y[kPieces][kPer];
#pragma unroll
    for (int q = 0; q < kPieces; ++q) LoadN<T, kPer>(x_row + q * kPer, x[q]);
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      const int e0 = 2 * j, e1 = 2 * j + 1;
      const float x0 = x[e0 / kPer][e0 % kPer], x1 = x[e1 / kPer][e1 % kPer];
      y[e0 / kPer][e0 % kPer] = x0 * c[j] - x1 * s[j];
      y[e1 / kPer][e1 % kPer] = x0 * s[j] + x1 * c[j];
    }
#pragma unroll
    for (int q = 0; q < kPieces; ++q) StoreN<T, kPer>(y_row + q * kPer, y[q]);
  }
}

template <typename T, int W>
void LaunchRotate(const Context& ctx, const RopeParams& p, bool per_batch, const float* cs, const float* sn) {
  const int64_t threads = p.B * p.T * p.NH * (p.HS / W);
  const unsigned grid = GridFor(threads, kThreads);
  // 32-bit indices while the index plus one grid stride stays below 2^32.
  if (threads + static_cast<int64_t>(grid) * kThreads < (int64_t{1} << 32)) {
    RopeRotateKernel<T, W, uint32_t><<<grid, kThreads, 0, StreamOf(ctx)>>>(p, per_batch, cs, sn);
  } else {
    RopeRotateKernel<T, W, int64_t><<<grid, kThreads, 0, StreamOf(ctx)>>>(p, per_batch, cs, sn);
  }
}

template <typename T>
void LaunchRotate(const Context& ctx, const RopeParams& p, bool per_batch, const float* cs, const float* sn) {
  constexpr int64_t kPer = 16 / sizeof(T);  // elements per 16 bytes
  const bool vec = p.HS % 8 == 0 && p.in_stride_b % kPer == 0 && p.in_stride_t % kPer == 0 &&
                   p.in_stride_h % kPer == 0 && p.out_stride_b % kPer == 0 && p.out_stride_t % kPer == 0 &&
                   p.out_stride_h % kPer == 0 && Aligned16({p.in, p.out});
  if (vec) {
    LaunchRotate<T, 8>(ctx, p, per_batch, cs, sn);
  } else {
    LaunchRotate<T, 2>(ctx, p, per_batch, cs, sn);
  }
}

absl::Status Rope(const Context& ctx, const RopeParams& p, float sign) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "rope"));
  if (p.HS % 2 != 0) return absl::InvalidArgumentError(absl::StrCat("rope: head size ", p.HS, " is odd"));
  const int64_t half = p.HS / 2;
  if (p.B * p.T * p.NH * half == 0) return absl::OkStatus();
  const bool per_batch = p.positions != nullptr && p.positions_stride_b != 0;
  const int64_t rows = per_batch ? p.B * p.T : p.T;
  Scratch table;
  LMF_RETURN_IF_ERROR_STATUS(table.Allocate(ctx, sizeof(float) * 2 * rows * half));
  float* cs = table.get<float>();
  float* sn = cs + rows * half;
  RopeTableKernel<<<GridFor(rows * half, kThreads), kThreads, 0, StreamOf(ctx)>>>(
      rows, p.T, half, p.HS, static_cast<double>(p.theta), p.positions, p.positions_stride_b, sign, cs, sn);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("RopeTableKernel");
  if (p.dtype == DType::kF32) {
    LaunchRotate<float>(ctx, p, per_batch, cs, sn);
  } else {
    LaunchRotate<bf16>(ctx, p, per_batch, cs, sn);
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("RopeRotateKernel");
  return absl::OkStatus();
}

}  // namespace

absl::Status RopeForward(const Context& ctx, const RopeParams& p) { return Rope(ctx, p, 1.0f); }
absl::Status RopeBackward(const Context& ctx, const RopeParams& p) { return Rope(ctx, p, -1.0f); }

}  // namespace lmf::kernels::cuda
