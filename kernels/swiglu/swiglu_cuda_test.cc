// CUDA gated linear units (SwiGLU, GeGLU) forward and backward reading and writing the halves of one fused
// (N, 2H) buffer, against the CPU kernel, on the 16-byte and the one-element paths. Tagged gpu: skips without
// a CUDA device (runs in the GPU bundle). Tolerances: fp32 |gpu - cpu| <= 1e-5 |cpu| + atol (atol per
// quantity, stated where it is not 1e-6); bf16 the STYLE.md rule of kernels/cuda/gpu_test_util.h with
// multiple 2.
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/swiglu/swiglu.h"
#include "kernels/testing/compare.h"

namespace lmf::kernels::cuda {
namespace {

using ::lmf::kernels::testing::RandomNormal;
using testing::DeviceBuffer;
using testing::RoundTo;

class SwiGluCudaTest : public testing::DTypeGpuTest {};

TEST_P(SwiGluCudaTest, SwiGluReadsAndWritesHalvesOfAFusedBuffer) {
  // H = 304: 16-byte accesses in both dtypes; H = 300: one element at a time in bf16 (300 % 8 != 0).
  for (const std::pair<int64_t, Activation>& config : {std::pair<int64_t, Activation>{304, Activation::kSilu},
                                                       {300, Activation::kSilu},
                                                       {304, Activation::kGeluTanh},
                                                       {300, Activation::kGeluTanh}}) {
    const int64_t H = config.first;
    const Activation act = config.second;  // SwiGLU, GeGLU
    SCOPED_TRACE(::testing::Message() << "H " << H << " gate " << ActivationName(act));
    const int64_t N = 37;
    const auto gu = RandomNormal(N * 2 * H, 41, 2.0f), dout = RandomNormal(N * H, 42);
    auto cpu = [&](const std::vector<float>& in, const std::vector<float>& di, std::vector<float>& y,
                   std::vector<float>& dgu) {
      y.resize(N * H), dgu.assign(N * 2 * H, 0.0f);
      kernels::SwiGluForward(cpu_, SwiGluForwardParams{DType::kF32, N, H, in.data(), 2 * H, in.data() + H,
                                                       2 * H, y.data(), act});
      kernels::SwiGluBackward(cpu_, SwiGluBackwardParams{DType::kF32, N, H, in.data(), 2 * H, in.data() + H,
                                                         2 * H, di.data(), dgu.data(), dgu.data() + H, act});
    };
    std::vector<float> y, dgu, ny, ndgu;
    cpu(gu, dout, y, dgu);
    cpu(RoundTo(gu, dt()), RoundTo(dout, dt()), ny, ndgu);
    DeviceBuffer ggu(gu, dt()), gd(dout, dt()), gy(N * H, dt()), gdgu(N * 2 * H, dt());
    const size_t es = DTypeSize(dt());
    char* base = ggu.as<char>();
    char* dbase = gdgu.as<char>();
    ASSERT_TRUE(cuda::SwiGluForward(
                    ctx(), SwiGluForwardParams{dt(), N, H, base, 2 * H, base + H * es, 2 * H, gy.get(), act})
                    .ok());
    ASSERT_TRUE(cuda::SwiGluBackward(ctx(), SwiGluBackwardParams{dt(), N, H, base, 2 * H, base + H * es,
                                                                 2 * H, gd.get(), dbase, dbase + H * es, act})
                    .ok());
    Expect("swiglu out", gy.ToFloats(), y, ny, true, 2.0, 1e-5, 1e-6);
    Expect("swiglu dgate|dup", gdgu.ToFloats(), dgu, ndgu, true, 2.0, 1e-5, 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, SwiGluCudaTest, testing::GpuTestDTypes(), testing::DTypeTestName);

}  // namespace
}  // namespace lmf::kernels::cuda
