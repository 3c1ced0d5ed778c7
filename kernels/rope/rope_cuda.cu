// CUDA RoPE, fp32 and bf16, with the params of rope.h: (b, t, h) strides, optional (per-batch) positions,
// cos/sin tables computed in double and rounded once (as the CPU kernel) into per-call scratch memory, one
// rotation pair per thread. Backward is the rotation by the negative angle.
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

template <typename T>
__global__ void RopeRotateKernel(RopeParams p, bool per_batch, const float* cs, const float* sn) {
  const int64_t half = p.HS / 2;
  const int64_t total = p.B * p.T * p.NH * half;
  const T* in = static_cast<const T*>(p.in);
  T* out = static_cast<T*>(p.out);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = i;
    const int64_t k = r % half;
    r /= half;
    const int64_t h = r % p.NH;
    r /= p.NH;
    const int64_t t = r % p.T;
    const int64_t b = r / p.T;
    const int64_t row = per_batch ? b * p.T + t : t;
    const float c = cs[row * half + k], s = sn[row * half + k];
    const T* x = in + b * p.in_stride_b + t * p.in_stride_t + h * p.in_stride_h + 2 * k;
    T* y = out + b * p.out_stride_b + t * p.out_stride_t + h * p.out_stride_h + 2 * k;
    const float x0 = ToFloat(x[0]), x1 = ToFloat(x[1]);
    y[0] = FromFloat<T>(x0 * c - x1 * s);
    y[1] = FromFloat<T>(x0 * s + x1 * c);
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
  const unsigned grid = GridFor(p.B * p.T * p.NH * half, kThreads);
  if (p.dtype == DType::kF32) {
    RopeRotateKernel<float><<<grid, kThreads, 0, StreamOf(ctx)>>>(p, per_batch, cs, sn);
  } else {
    RopeRotateKernel<bf16><<<grid, kThreads, 0, StreamOf(ctx)>>>(p, per_batch, cs, sn);
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("RopeRotateKernel");
  return absl::OkStatus();
}

}  // namespace

absl::Status RopeForward(const Context& ctx, const RopeParams& p) { return Rope(ctx, p, 1.0f); }
absl::Status RopeBackward(const Context& ctx, const RopeParams& p) { return Rope(ctx, p, -1.0f); }

}  // namespace lmf::kernels::cuda
