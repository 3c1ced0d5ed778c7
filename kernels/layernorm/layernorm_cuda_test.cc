// CUDA LayerNorm forward and backward against the CPU kernel (a mean far from zero for the two-pass
// variance, a row length that takes the scalar path), the one-kernel backward on its edge shapes, and the
// fused residual + RMSNorm/LayerNorm forward against the residual add followed by the CPU norm. Tagged gpu:
// skips without a CUDA device (runs in the GPU bundle). Tolerances: fp32 |gpu - cpu| <= 1e-5 |cpu| + atol
// (atol per quantity, stated where it is not 1e-6); bf16 the STYLE.md rule of kernels/cuda/gpu_test_util.h
// with multiple 2.
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/layernorm/layernorm.h"
#include "kernels/residual/residual.h"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/testing/compare.h"

namespace lmf::kernels::cuda {
namespace {

using ::lmf::kernels::testing::RandomNormal;
using testing::DeviceBuffer;
using testing::RoundTo;

class LayerNormCudaTest : public testing::DTypeGpuTest {};

TEST_P(LayerNormCudaTest, LayerNormForwardAndBackwardMatchCpu) {
  const int64_t N = 45, C = 1001;  // not a multiple of 8: the scalar (non-vector) path
  auto x = RandomNormal(N * C, 11);
  for (float& v : x) v += 3.0f;  // a mean far from zero exercises the two-pass variance
  const auto w = RandomNormal(C, 12), bias = RandomNormal(C, 13), dout = RandomNormal(N * C, 14);
  const auto dw0 = RandomNormal(C, 15), db0 = RandomNormal(C, 16);
  auto cpu = [&](const std::vector<float>& xi, const std::vector<float>& wi, const std::vector<float>& bi,
                 const std::vector<float>& di, std::vector<std::vector<float>>& r) {
    r.assign(6, {});
    r[0].resize(N * C), r[1].resize(N), r[2].resize(N), r[3].resize(N * C), r[4] = dw0, r[5] = db0;
    LayerNormForwardParams f{DType::kF32, N,         C,           1e-5f,       xi.data(),
                             wi.data(),   bi.data(), r[0].data(), r[1].data(), r[2].data()};
    kernels::LayerNormForward(cpu_, f);
    LayerNormBackwardParams b{DType::kF32, N,         C,           xi.data(),   wi.data(),  r[1].data(),
                              r[2].data(), di.data(), r[3].data(), r[4].data(), r[5].data()};
    kernels::LayerNormBackward(cpu_, b);
  };
  std::vector<std::vector<float>> ref, naive;
  cpu(x, w, bias, dout, ref);
  cpu(RoundTo(x, dt()), RoundTo(w, dt()), RoundTo(bias, dt()), RoundTo(dout, dt()), naive);

  DeviceBuffer gx(x, dt()), gw(w, dt()), gb(bias, dt()), gd(dout, dt()), gout(N * C, dt());
  DeviceBuffer gmean(N, DType::kF32), grstd(N, DType::kF32), gdx(N * C, dt()), gdw(dw0, DType::kF32),
      gdb(db0, DType::kF32);
  LayerNormForwardParams f{
      dt(), N, C, 1e-5f, gx.get(), gw.get(), gb.get(), gout.get(), gmean.as<float>(), grstd.as<float>()};
  ASSERT_TRUE(cuda::LayerNormForward(ctx(), f).ok());
  LayerNormBackwardParams b{
      dt(),     N,         C,         gx.get(), gw.get(), gmean.as<float>(), grstd.as<float>(),
      gd.get(), gdx.get(), gdw.get(), gdb.get()};
  ASSERT_TRUE(cuda::LayerNormBackward(ctx(), b).ok());
  Expect("layernorm out", gout.ToFloats(), ref[0], naive[0], true, 2.0, 1e-5, 1e-5);
  Expect("layernorm mean", gmean.ToFloats(), ref[1], naive[1], false);
  Expect("layernorm rstd", grstd.ToFloats(), ref[2], naive[2], false);
  Expect("layernorm dx", gdx.ToFloats(), ref[3], naive[3], true, 2.0, 1e-5, 1e-5);
  Expect("layernorm dweight (+=)", gdw.ToFloats(), ref[4], naive[4], false, 2.0, 1e-5, 1e-4);
  Expect("layernorm dbias (+=)", gdb.ToFloats(), ref[5], naive[5], false, 2.0, 1e-5, 1e-4);
}

// The one-kernel backward (kernels/cuda/norm_kernels.cuh) on its own edge shapes: 4133 rows (blocks of
// several 8-row groups, a last block of 5 rows) on the vector path with dx over dout and on the scalar path
// (C = 13); C = 8192 (more than 48 KiB of shared memory); C = 40000 (the per-block sums in global scratch).
// With and without dbias; a second run must give the same bits. dweight/dbias sum up to 4133 products in a
// different order from the CPU: atol 1e-3 (~4133 x 2^-24 x the largest partial sum, ~40, bounds the
// difference of two fp32 orders; a random-walk error is ~50x smaller).
TEST_P(LayerNormCudaTest, OneKernelBackwardMatchesCpuOnItsEdgeShapesAndIsDeterministic) {
  struct Shape {
    int64_t N, C;
    bool bias, in_place;
  };
  for (const Shape& sh :
       {Shape{4133, 40, true, true}, Shape{4133, 13, false, false}, Shape{20, 8192, true, false},
        Shape{3, 40000, true, false}, Shape{3, 40000, false, true}}) {
    const int64_t N = sh.N, C = sh.C;
    SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " bias=" << sh.bias);
    auto x = RandomNormal(N * C, 31);
    for (float& v : x) v += 0.5f;
    const auto w = RandomNormal(C, 32), dout = RandomNormal(N * C, 33);
    const auto dw0 = RandomNormal(C, 34), db0 = RandomNormal(C, 35);
    auto cpu = [&](const std::vector<float>& xi, const std::vector<float>& wi, const std::vector<float>& di,
                   std::vector<std::vector<float>>& r) {
      r.assign(5, {});
      r[0].resize(N), r[1].resize(N), r[2].resize(N * C), r[3] = dw0, r[4] = db0;
      std::vector<float> out(N * C);
      kernels::LayerNormForward(cpu_, LayerNormForwardParams{DType::kF32, N, C, 1e-5f, xi.data(), wi.data(),
                                                             nullptr, out.data(), r[0].data(), r[1].data()});
      kernels::LayerNormBackward(
          cpu_,
          LayerNormBackwardParams{DType::kF32, N, C, xi.data(), wi.data(), r[0].data(), r[1].data(),
                                  di.data(), r[2].data(), r[3].data(), sh.bias ? r[4].data() : nullptr});
    };
    std::vector<std::vector<float>> ref, naive;
    cpu(x, w, dout, ref);
    cpu(RoundTo(x, dt()), RoundTo(w, dt()), RoundTo(dout, dt()), naive);
    // The statistics from the CPU (of the inputs rounded to dtype), so that only the backward is checked.
    DeviceBuffer gx(x, dt()), gw(w, dt()), gmean(naive[0], DType::kF32), grstd(naive[1], DType::kF32);
    std::vector<std::vector<uint8_t>> bits;
    for (int run = 0; run < 2; ++run) {
      DeviceBuffer gd(dout, dt()), gdx(N * C, dt()), gdw(dw0, DType::kF32), gdb(db0, DType::kF32);
      DeviceBuffer& dx = sh.in_place ? gd : gdx;
      LayerNormBackwardParams b{dt(),
                                N,
                                C,
                                gx.get(),
                                gw.get(),
                                gmean.as<float>(),
                                grstd.as<float>(),
                                gd.get(),
                                dx.get(),
                                gdw.get(),
                                sh.bias ? gdb.get() : nullptr};
      ASSERT_TRUE(cuda::LayerNormBackward(ctx(), b).ok());
      if (run == 0) {
        Expect("layernorm dx", dx.ToFloats(), ref[2], naive[2], true, 2.0, 1e-5, 1e-5);
        Expect("layernorm dweight (+=)", gdw.ToFloats(), ref[3], naive[3], false, 2.0, 1e-5, 1e-3);
        Expect("layernorm dbias (+=)", gdb.ToFloats(), ref[4], naive[4], false, 2.0, 1e-5, 1e-3);
      }
      for (DeviceBuffer* o : {&dx, &gdw, &gdb}) bits.push_back(o->Bytes());
    }
    EXPECT_EQ(bits[0], bits[3]) << "dx differs between two runs";
    EXPECT_EQ(bits[1], bits[4]) << "dweight differs between two runs";
    EXPECT_EQ(bits[2], bits[5]) << "dbias differs between two runs";
  }
}

TEST_P(LayerNormCudaTest, FusedResidualNormsEqualResidualAddThenNorm) {
  const int64_t N = 33, C = 512;
  const auto res = RandomNormal(N * C, 21), x = RandomNormal(N * C, 22), w = RandomNormal(C, 23),
             bias = RandomNormal(C, 24);
  // Reference: the residual add (rounded to dtype, as the kernel stores it), then the CPU norm.
  auto sum_of = [&](const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> s(N * C);
    ResidualForwardParams rp{DType::kF32, N * C, a.data(), b.data(), s.data()};
    kernels::ResidualForward(cpu_, rp);
    return s;
  };
  const auto sum = sum_of(res, x);
  const auto nsum = RoundTo(sum_of(RoundTo(res, dt()), RoundTo(x, dt())), dt());
  std::vector<float> rms(N * C), nrms(N * C), ln(N * C), nln(N * C), rstd(N), mean(N);
  kernels::RmsNormForward(
      cpu_, RmsNormForwardParams{DType::kF32, N, C, 1e-5f, sum.data(), w.data(), rms.data(), rstd.data()});
  const auto wr = RoundTo(w, dt()), br = RoundTo(bias, dt());
  kernels::RmsNormForward(
      cpu_, RmsNormForwardParams{DType::kF32, N, C, 1e-5f, nsum.data(), wr.data(), nrms.data(), rstd.data()});
  kernels::LayerNormForward(cpu_, LayerNormForwardParams{DType::kF32, N, C, 1e-5f, sum.data(), w.data(),
                                                         bias.data(), ln.data(), mean.data(), rstd.data()});
  kernels::LayerNormForward(cpu_, LayerNormForwardParams{DType::kF32, N, C, 1e-5f, nsum.data(), wr.data(),
                                                         br.data(), nln.data(), mean.data(), rstd.data()});

  DeviceBuffer gres(res, dt()), gx(x, dt()), gw(w, dt()), gb(bias, dt()), gsum(N * C, dt()),
      gout(N * C, dt());
  ResidualRmsNormForwardParams rp{dt(),     N,          C,        1e-5f,      gres.get(),
                                  gx.get(), gsum.get(), gw.get(), gout.get(), nullptr};
  ASSERT_TRUE(cuda::ResidualRmsNormForward(ctx(), rp).ok());
  Expect("residual_out", gsum.ToFloats(), sum, nsum);
  Expect("residual + rmsnorm", gout.ToFloats(), rms, nrms, true, 2.0, 1e-5, 1e-5);
  // In place: residual_out aliases residual.
  ResidualLayerNormForwardParams lp{dt(),       N,        C,        1e-5f,      gres.get(), gx.get(),
                                    gres.get(), gw.get(), gb.get(), gout.get(), nullptr,    nullptr};
  ASSERT_TRUE(cuda::ResidualLayerNormForward(ctx(), lp).ok());
  Expect("residual_out in place", gres.ToFloats(), sum, nsum);
  Expect("residual + layernorm", gout.ToFloats(), ln, nln, true, 2.0, 1e-5, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(DTypes, LayerNormCudaTest, testing::GpuTestDTypes(), testing::DTypeTestName);

}  // namespace
}  // namespace lmf::kernels::cuda
