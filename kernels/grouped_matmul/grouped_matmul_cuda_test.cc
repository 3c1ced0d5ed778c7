// The CUDA grouped GEMM (grouped_matmul.h) against the CPU's per-group kernels/matmul calls on the same
// inputs: 5 groups of 0, 37, 5, 64 and 1 rows (an empty group, partial and whole 32-row tiles) in a buffer of
// M = 110 rows (the last 3 outside every group), K = 40, N = 48 (neither a multiple of the tile), with a bias;
// forward y, and backward dx, dw (+= onto random values) and dbias (+=). Tagged gpu: skips without a device;
// CI runs it on the CUDA emulation.
// Tolerances: fp32 1e-5 relative + 1e-5 absolute (sums of 40-110 products in another order); bf16 the
// STYLE.md rule with multiple 2 (only the outputs y and dx are rounded; dw and dbias are fp32 sums of bf16
// products, compared unrounded).
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/grouped_matmul/grouped_matmul.h"
#include "kernels/testing/compare.h"

namespace lmf::kernels::cuda {
namespace {

using ::lmf::kernels::testing::RandomNormal;
using testing::DeviceBuffer;
using testing::RoundTo;

constexpr int64_t kG = 5, kM = 110, kK = 40, kN = 48;
const std::vector<int32_t> kOffsets = {0, 0, 37, 42, 106, 107};

class GroupedMatmulCudaTest : public testing::DTypeGpuTest {};

struct Outputs {
  std::vector<float> y, dx, dw, dbias;
};

TEST_P(GroupedMatmulCudaTest, ForwardAndBackwardMatchThePerGroupCpuGemms) {
  const auto x = RandomNormal(kM * kK, 1), w = RandomNormal(kG * kN * kK, 2, 0.2f), bias = RandomNormal(kG * kN, 3);
  const auto dy = RandomNormal(kM * kN, 4), dw0 = RandomNormal(kG * kN * kK, 5), db0 = RandomNormal(kG * kN, 6);
  const auto run_cpu = [&](const std::vector<float>& xs, const std::vector<float>& ws, const std::vector<float>& bs,
                           const std::vector<float>& dys) {
    Outputs o{std::vector<float>(kM * kN, 0.0f), std::vector<float>(kM * kK, 0.0f), dw0, db0};
    cpu::GroupedMatmul(cpu_, {DType::kF32, kG, kM, kK, kN, kOffsets.data(), xs.data(), ws.data(), bs.data(), o.y.data()});
    cpu::GroupedMatmulBackward(cpu_, {DType::kF32, kG, kM, kK, kN, kOffsets.data(), xs.data(), ws.data(), dys.data(),
                                      o.dx.data(), o.dw.data(), o.dbias.data()});
    return o;
  };
  const Outputs want = run_cpu(x, w, bias, dy);
  const Outputs naive = run_cpu(RoundTo(x, dt()), RoundTo(w, dt()), RoundTo(bias, dt()), RoundTo(dy, dt()));
  DeviceBuffer offsets = DeviceBuffer::Ints(kOffsets);
  DeviceBuffer gx(x, dt()), gw(w, dt()), gb(bias, dt()), gdy(dy, dt()), gy(kM * kN, dt()), gdx(kM * kK, dt());
  DeviceBuffer gdw(dw0, DType::kF32), gdb(db0, DType::kF32);
  ASSERT_TRUE(cuda::GroupedMatmul(ctx(), {dt(), kG, kM, kK, kN, offsets.as<int32_t>(), gx.get(), gw.get(), gb.get(),
                                          gy.get()}).ok());
  ASSERT_TRUE(cuda::GroupedMatmulBackward(ctx(), {dt(), kG, kM, kK, kN, offsets.as<int32_t>(), gx.get(), gw.get(),
                                                  gdy.get(), gdx.get(), gdw.as<float>(), gdb.as<float>()}).ok());
  Sync();
  // Rows outside every group are not written: compare the grouped rows only.
  const int64_t rows = kOffsets.back();
  const auto head = [](const std::vector<float>& v, int64_t n) { return std::vector<float>(v.begin(), v.begin() + n); };
  Expect("y", head(gy.ToFloats(), rows * kN), head(want.y, rows * kN), head(naive.y, rows * kN), true, 2.0, 1e-5, 1e-5);
  Expect("dx", head(gdx.ToFloats(), rows * kK), head(want.dx, rows * kK), head(naive.dx, rows * kK), true, 2.0, 1e-5,
         1e-5);
  Expect("dw", gdw.ToFloats(), want.dw, naive.dw, false, 2.0, 1e-5, 1e-5);
  Expect("dbias", gdb.ToFloats(), want.dbias, naive.dbias, false, 2.0, 1e-5, 1e-5);
}

TEST(GroupedMatmulCudaArgs, BadShapesAreRefused) {
  GroupedMatmulParams p;
  p.G = 0, p.M = 4, p.K = 4, p.N = 4;
  EXPECT_EQ(cuda::GroupedMatmul(Context::Cpu(), p).code(), absl::StatusCode::kInvalidArgument);
  p.G = 2, p.dtype = DType::kI32;
  EXPECT_EQ(cuda::GroupedMatmul(Context::Cpu(), p).code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(DTypes, GroupedMatmulCudaTest, testing::GpuTestDTypes(), testing::DTypeTestName);

}  // namespace
}  // namespace lmf::kernels::cuda
