// CUDA RMSNorm forward and backward against the CPU kernel on the same random inputs, also on the one-kernel
// backward's edge shapes; the gradients are bitwise reproducible run to run. Tagged gpu: skips without a CUDA
// device (runs in the GPU bundle). Tolerances: fp32 |gpu - cpu| <= 1e-5 |cpu| + atol (atol per quantity,
// stated where it is not 1e-6); bf16 the STYLE.md rule of kernels/cuda/gpu_test_util.h with multiple 2.
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/testing/compare.h"

namespace lmf::kernels::cuda {
namespace {

using ::lmf::kernels::testing::RandomNormal;
using testing::DeviceBuffer;
using testing::RoundTo;

class RmsNormCudaTest : public testing::DTypeGpuTest {};

TEST_P(RmsNormCudaTest, RmsNormForwardAndBackwardMatchCpu) {
  const int64_t N = 67, C = 768;
  const auto x = RandomNormal(N * C, 1), w = RandomNormal(C, 2), dout = RandomNormal(N * C, 3);
  const auto dw0 = RandomNormal(C, 4);
  auto cpu = [&](const std::vector<float>& xi, const std::vector<float>& wi, const std::vector<float>& di,
                 std::vector<float>& out, std::vector<float>& rstd, std::vector<float>& dx,
                 std::vector<float>& dw) {
    out.resize(N * C), rstd.resize(N), dx.resize(N * C), dw = dw0;
    RmsNormForwardParams f{DType::kF32, N, C, 1e-5f, xi.data(), wi.data(), out.data(), rstd.data()};
    kernels::RmsNormForward(cpu_, f);
    RmsNormBackwardParams b{DType::kF32, N,         C,         xi.data(), wi.data(),
                            rstd.data(), di.data(), dx.data(), dw.data()};
    kernels::RmsNormBackward(cpu_, b);
  };
  std::vector<float> out, rstd, dx, dw, nout, nrstd, ndx, ndw;
  cpu(x, w, dout, out, rstd, dx, dw);
  cpu(RoundTo(x, dt()), RoundTo(w, dt()), RoundTo(dout, dt()), nout, nrstd, ndx, ndw);

  DeviceBuffer gx(x, dt()), gw(w, dt()), gd(dout, dt()), gout(N * C, dt()), grstd(N, DType::kF32);
  DeviceBuffer gdx(N * C, dt()), gdw(dw0, DType::kF32);
  RmsNormForwardParams f{dt(), N, C, 1e-5f, gx.get(), gw.get(), gout.get(), grstd.as<float>()};
  kernels::RmsNormForward(ctx(), f);  // the device-generic entry point: dispatches by ctx().device
  RmsNormBackwardParams b{dt(), N, C, gx.get(), gw.get(), grstd.as<float>(), gd.get(), gdx.get(), gdw.get()};
  ASSERT_TRUE(cuda::RmsNormBackward(ctx(), b).ok());
  Expect("rmsnorm out", gout.ToFloats(), out, nout);
  Expect("rmsnorm rstd", grstd.ToFloats(), rstd, nrstd, /*rounded_output=*/false);
  Expect("rmsnorm dx", gdx.ToFloats(), dx, ndx, true, 2.0, 1e-5, 1e-5);
  // dweight sums N products: fp32 accumulation order differs from the CPU's (atol 1e-4 for sums of ~67
  // terms).
  Expect("rmsnorm dweight (+=)", gdw.ToFloats(), dw, ndw, /*rounded_output=*/false, 2.0, 1e-5, 1e-4);

  // Deterministic: the same call again gives the same bits.
  DeviceBuffer gdw2(dw0, DType::kF32);
  b.dweight = gdw2.get();
  ASSERT_TRUE(cuda::RmsNormBackward(ctx(), b).ok());
  EXPECT_EQ(gdw.Bytes(), gdw2.Bytes());
}

// The one-kernel backward (kernels/cuda/norm_kernels.cuh) on its edge shapes: 4133 rows (blocks of several
// 8-row groups, a last block of 5 rows) on the vector path with dx over dout and on the scalar path (C = 13),
// and C = 40000 (the per-block sums in global scratch); a second run must give the same bits. dweight sums
// up to 4133 products in a different order from the CPU: atol 1e-3 (~4133 x 2^-24 x the largest partial
// sum, ~40, bounds the difference of two fp32 orders).
TEST_P(RmsNormCudaTest, OneKernelBackwardMatchesCpuOnItsEdgeShapesAndIsDeterministic) {
  struct Shape {
    int64_t N, C;
    bool in_place;
  };
  for (const Shape& sh : {Shape{4133, 40, true}, Shape{4133, 13, false}, Shape{3, 40000, false}}) {
    const int64_t N = sh.N, C = sh.C;
    SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C);
    const auto x = RandomNormal(N * C, 41), w = RandomNormal(C, 42), dout = RandomNormal(N * C, 43);
    const auto dw0 = RandomNormal(C, 44);
    auto cpu = [&](const std::vector<float>& xi, const std::vector<float>& wi, const std::vector<float>& di,
                   std::vector<float>& rstd, std::vector<float>& dx, std::vector<float>& dw) {
      std::vector<float> out(N * C);
      rstd.resize(N), dx.resize(N * C), dw = dw0;
      kernels::RmsNormForward(cpu_, RmsNormForwardParams{DType::kF32, N, C, 1e-5f, xi.data(), wi.data(),
                                                         out.data(), rstd.data()});
      kernels::RmsNormBackward(cpu_, RmsNormBackwardParams{DType::kF32, N, C, xi.data(), wi.data(),
                                                           rstd.data(), di.data(), dx.data(), dw.data()});
    };
    std::vector<float> rstd, dx, dw, nrstd, ndx, ndw;
    cpu(x, w, dout, rstd, dx, dw);
    cpu(RoundTo(x, dt()), RoundTo(w, dt()), RoundTo(dout, dt()), nrstd, ndx, ndw);
    // rstd from the CPU (of the inputs rounded to dtype), so that only the backward is checked.
    DeviceBuffer gx(x, dt()), gw(w, dt()), grstd(nrstd, DType::kF32);
    std::vector<std::vector<uint8_t>> bits;
    for (int run = 0; run < 2; ++run) {
      DeviceBuffer gd(dout, dt()), gdx(N * C, dt()), gdw(dw0, DType::kF32);
      DeviceBuffer& gout = sh.in_place ? gd : gdx;
      RmsNormBackwardParams b{dt(),     N,          C,        gx.get(), gw.get(), grstd.as<float>(),
                              gd.get(), gout.get(), gdw.get()};
      ASSERT_TRUE(cuda::RmsNormBackward(ctx(), b).ok());
      if (run == 0) {
        Expect("rmsnorm dx", gout.ToFloats(), dx, ndx, true, 2.0, 1e-5, 1e-5);
        Expect("rmsnorm dweight (+=)", gdw.ToFloats(), dw, ndw, false, 2.0, 1e-5, 1e-3);
      }
      for (DeviceBuffer* o : {&gout, &gdw}) bits.push_back(o->Bytes());
    }
    EXPECT_EQ(bits[0], bits[2]) << "dx differs between two runs";
    EXPECT_EQ(bits[1], bits[3]) << "dweight differs between two runs";
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, RmsNormCudaTest, testing::GpuTestDTypes(), testing::DTypeTestName);

}  // namespace
}  // namespace lmf::kernels::cuda
