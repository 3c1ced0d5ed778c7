// CUDA residual add forward and backward (accumulating into both inputs) against the CPU kernel. Tagged gpu:
// skips without a CUDA device (runs in the GPU bundle). Tolerances: fp32 |gpu - cpu| <= 1e-5 |cpu| + atol
// (atol per quantity, stated where it is not 1e-6); bf16 the STYLE.md rule of kernels/cuda/gpu_test_util.h
// with multiple 2.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/residual/residual.h"
#include "kernels/testing/compare.h"

namespace lmf::kernels::cuda {
namespace {

using ::lmf::kernels::testing::RandomNormal;
using testing::DeviceBuffer;
using testing::RoundTo;

class ResidualCudaTest : public testing::DTypeGpuTest {};

TEST_P(ResidualCudaTest, ResidualBackwardAccumulatesIntoBothInputs) {
  const int64_t n = 5003;  // 16-byte vectors, then a tail of 3 one element at a time (f32 and bf16)
  const auto a = RandomNormal(n, 61), b = RandomNormal(n, 62), d = RandomNormal(n, 63);
  std::vector<float> out(n), da = a, db = b;
  kernels::ResidualForward(cpu_, ResidualForwardParams{DType::kF32, n, a.data(), b.data(), out.data()});
  kernels::ResidualBackward(cpu_, ResidualBackwardParams{DType::kF32, n, d.data(), da.data(), db.data()});
  const auto ar = RoundTo(a, dt()), br = RoundTo(b, dt()), dr = RoundTo(d, dt());
  std::vector<float> nout(n), nda = ar, ndb = br;
  kernels::ResidualForward(cpu_, ResidualForwardParams{DType::kF32, n, ar.data(), br.data(), nout.data()});
  kernels::ResidualBackward(cpu_, ResidualBackwardParams{DType::kF32, n, dr.data(), nda.data(), ndb.data()});
  DeviceBuffer ga(a, dt()), gb(b, dt()), gd(d, dt()), gout(n, dt());
  ASSERT_TRUE(
      cuda::ResidualForward(ctx(), ResidualForwardParams{dt(), n, ga.get(), gb.get(), gout.get()}).ok());
  ASSERT_TRUE(
      cuda::ResidualBackward(ctx(), ResidualBackwardParams{dt(), n, gd.get(), ga.get(), gb.get()}).ok());
  Expect("residual out", gout.ToFloats(), out, nout);
  Expect("residual da (+=)", ga.ToFloats(), da, nda);
  Expect("residual db (+=)", gb.ToFloats(), db, ndb);
}

INSTANTIATE_TEST_SUITE_P(DTypes, ResidualCudaTest, testing::GpuTestDTypes(), testing::DTypeTestName);

}  // namespace
}  // namespace lmf::kernels::cuda
