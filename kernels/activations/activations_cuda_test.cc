// CUDA SiLU, GELU-tanh, ReLU and soft-cap forward and backward against the CPU kernels (ReLU'(0) = 0). Tagged
// gpu: skips without a CUDA device (runs in the GPU bundle). Tolerances: fp32 |gpu - cpu| <= 1e-5 |cpu| +
// atol (atol per quantity, stated where it is not 1e-6); bf16 the STYLE.md rule of
// kernels/cuda/gpu_test_util.h with multiple 2.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/activations/activations.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/testing/compare.h"

namespace lmf::kernels::cuda {
namespace {

using ::lmf::kernels::testing::RandomNormal;
using testing::DeviceBuffer;
using testing::RoundTo;

class ActivationCudaTest : public testing::DTypeGpuTest {};

TEST_P(ActivationCudaTest, ActivationsMatchCpu) {
  const int64_t n = 10007;
  auto x = RandomNormal(n, 31, 3.0f);
  x[0] = 0.0f;  // ReLU'(0) = 0
  const auto dout = RandomNormal(n, 32);
  for (Activation kind :
       {Activation::kSilu, Activation::kGeluTanh, Activation::kRelu, Activation::kSoftCap}) {
    const float cap = 2.5f;  // kSoftCap's c; ignored by the others
    SCOPED_TRACE(ActivationName(kind));
    auto cpu = [&](const std::vector<float>& xi, const std::vector<float>& di, std::vector<float>& y,
                   std::vector<float>& dx) {
      y.resize(n), dx.resize(n);
      kernels::ActivationForward(cpu_,
                                 ActivationForwardParams{DType::kF32, kind, n, xi.data(), y.data(), cap});
      kernels::ActivationBackward(
          cpu_, ActivationBackwardParams{DType::kF32, kind, n, xi.data(), di.data(), dx.data(), cap});
    };
    std::vector<float> y, dx, ny, ndx;
    cpu(x, dout, y, dx);
    cpu(RoundTo(x, dt()), RoundTo(dout, dt()), ny, ndx);
    DeviceBuffer gx(x, dt()), gd(dout, dt()), gy(n, dt()), gdx(n, dt());
    ASSERT_TRUE(
        cuda::ActivationForward(ctx(), ActivationForwardParams{dt(), kind, n, gx.get(), gy.get(), cap}).ok());
    ASSERT_TRUE(cuda::ActivationBackward(
                    ctx(), ActivationBackwardParams{dt(), kind, n, gx.get(), gd.get(), gdx.get(), cap})
                    .ok());
    // __expf differs from the CPU's exp by a few ulps: rtol 1e-5 with atol 1e-6 still holds for |y| >~ 0.1.
    Expect("activation out", gy.ToFloats(), y, ny, true, 2.0, 1e-5, 1e-6);
    Expect("activation dx", gdx.ToFloats(), dx, ndx, true, 2.0, 1e-5, 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, ActivationCudaTest, testing::GpuTestDTypes(), testing::DTypeTestName);

}  // namespace
}  // namespace lmf::kernels::cuda
