// The CUDA grouped GEMM (grouped_matmul.h) against the CPU's per-group kernels/matmul calls on the same
// inputs, forward y (with a bias) and backward dx, dw (+= onto random values) and dbias (+=), rows outside
// every group left out of the comparison (they are not written). Tagged gpu: skips without a device; CI runs
// it on the CUDA emulation. Cases:
// - 5 groups of 0, 37, 5, 64 and 1 rows (an empty group, partial and whole 32-row tiles) in M = 110 rows,
//   K = 40, N = 48: the default kernel (fp32: scalar; bf16: tensor cores), and the scalar kernel in bf16;
// - the tensor-core kernel on ragged groups (bf16): 6 groups of 0, 1, 63, 65, 0 and 300 rows (empty groups,
//   a single row, one short of and one past a 64-row tile, one huge group) in M = 432, K = 72 (a partial
//   32-deep step, not a multiple of 16), N = 80 (a partial 64-wide tile); its forward run twice, bitwise
//   equal;
// - shapes and dtypes the tensor-core kernel refuses.
// Tolerances: fp32 1e-5 relative + 1e-5 absolute (sums of 40-110 products in another order); bf16 the
// STYLE.md rule with multiple 2: both kernels see bf16 inputs and sum exact products in fp32 (the tensor
// cores' products of bf16 are exact in fp32 too), so they differ from the naive bf16 computation only in
// summation order and in the output's one rounding to bf16 (y, dx; dw and dbias are fp32 sums, compared
// unrounded).
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

struct Shape {
  std::vector<int32_t> offsets;  // (G + 1)
  int64_t M, K, N;
  int64_t G() const { return static_cast<int64_t>(offsets.size()) - 1; }
};
const Shape kSmall{{0, 0, 37, 42, 106, 107}, 110, 40, 48};
const Shape kRagged{{0, 0, 1, 64, 129, 129, 429}, 432, 72, 80};

struct Outputs {
  std::vector<float> y, dx, dw, dbias;
};

struct Inputs {
  explicit Inputs(const Shape& s)
      : x(RandomNormal(s.M * s.K, 1)),
        w(RandomNormal(s.G() * s.N * s.K, 2, 0.2f)),
        bias(RandomNormal(s.G() * s.N, 3)),
        dy(RandomNormal(s.M * s.N, 4)),
        dw0(RandomNormal(s.G() * s.N * s.K, 5)),
        db0(RandomNormal(s.G() * s.N, 6)) {}
  std::vector<float> x, w, bias, dy, dw0, db0;
};

// The grouped rows' part of a (M, cols) result.
std::vector<float> GroupedRows(const Shape& s, const std::vector<float>& v, int64_t cols) {
  return std::vector<float>(v.begin(), v.begin() + s.offsets.back() * cols);
}

class GroupedMatmulCudaTest : public testing::DTypeGpuTest {
 protected:
  // The CPU's per-group GEMMs in fp32 on the given inputs.
  Outputs RunCpu(const Shape& s, const Inputs& in) {
    Outputs o{std::vector<float>(s.M * s.N, 0.0f), std::vector<float>(s.M * s.K, 0.0f), in.dw0, in.db0};
    cpu::GroupedMatmul(cpu_, {DType::kF32, s.G(), s.M, s.K, s.N, s.offsets.data(), in.x.data(), in.w.data(),
                              in.bias.data(), o.y.data()});
    cpu::GroupedMatmulBackward(cpu_, {DType::kF32, s.G(), s.M, s.K, s.N, s.offsets.data(), in.x.data(),
                                      in.w.data(), in.dy.data(), o.dx.data(), o.dw.data(), o.dbias.data()});
    return o;
  }

  // Forward and backward with `kernel` in dt(), every output checked against the CPU's.
  void CheckAgainstCpu(const Shape& s, GroupedMatmulKernel kernel) {
    const Inputs in(s);
    Inputs rounded = in;
    for (auto* v : {&rounded.x, &rounded.w, &rounded.bias, &rounded.dy}) *v = RoundTo(*v, dt());
    const Outputs want = RunCpu(s, in), naive = RunCpu(s, rounded);
    DeviceBuffer offsets = DeviceBuffer::Ints(s.offsets);
    DeviceBuffer x(in.x, dt()), w(in.w, dt()), bias(in.bias, dt()), dy(in.dy, dt());
    DeviceBuffer y(s.M * s.N, dt()), dx(s.M * s.K, dt()), dw(in.dw0, DType::kF32), db(in.db0, DType::kF32);
    ASSERT_TRUE(
        GroupedMatmulWithKernel(
            ctx(), {dt(), s.G(), s.M, s.K, s.N, offsets.as<int32_t>(), x.get(), w.get(), bias.get(), y.get()},
            kernel)
            .ok());
    ASSERT_TRUE(GroupedMatmulBackwardWithKernel(ctx(),
                                                {dt(), s.G(), s.M, s.K, s.N, offsets.as<int32_t>(), x.get(),
                                                 w.get(), dy.get(), dx.get(), dw.as<float>(), db.as<float>()},
                                                kernel)
                    .ok());
    Sync();
    Expect("y", GroupedRows(s, y.ToFloats(), s.N), GroupedRows(s, want.y, s.N), GroupedRows(s, naive.y, s.N),
           true, 2.0, 1e-5, 1e-5);
    Expect("dx", GroupedRows(s, dx.ToFloats(), s.K), GroupedRows(s, want.dx, s.K),
           GroupedRows(s, naive.dx, s.K), true, 2.0, 1e-5, 1e-5);
    Expect("dw", dw.ToFloats(), want.dw, naive.dw, false, 2.0, 1e-5, 1e-5);
    Expect("dbias", db.ToFloats(), want.dbias, naive.dbias, false, 2.0, 1e-5, 1e-5);
  }
};

TEST_P(GroupedMatmulCudaTest, ForwardAndBackwardMatchThePerGroupCpuGemms) {
  CheckAgainstCpu(kSmall, GroupedMatmulKernel::kAuto);
}

TEST_P(GroupedMatmulCudaTest, ScalarKernelMatchesThePerGroupCpuGemms) {
  if (dt() == DType::kF32) GTEST_SKIP() << "fp32 runs the scalar kernel by default (the test above)";
  CheckAgainstCpu(kSmall, GroupedMatmulKernel::kScalar);
}

TEST_P(GroupedMatmulCudaTest, TensorCoreKernelMatchesTheCpuOnRaggedGroups) {
  if (dt() == DType::kF32) GTEST_SKIP() << "the tensor-core kernel is bf16 only";
  CheckAgainstCpu(kRagged, GroupedMatmulKernel::kTensorCore);
}

TEST_P(GroupedMatmulCudaTest, TensorCoreForwardIsDeterministic) {
  if (dt() == DType::kF32) GTEST_SKIP() << "the tensor-core kernel is bf16 only";
  const Shape& s = kRagged;
  const Inputs in(s);
  DeviceBuffer offsets = DeviceBuffer::Ints(s.offsets), x(in.x, dt()), w(in.w, dt());
  DeviceBuffer y1(s.M * s.N, dt()), y2(s.M * s.N, dt());
  for (DeviceBuffer* y : {&y1, &y2}) {
    ASSERT_TRUE(GroupedMatmulWithKernel(
                    ctx(),
                    {dt(), s.G(), s.M, s.K, s.N, offsets.as<int32_t>(), x.get(), w.get(), nullptr, y->get()},
                    GroupedMatmulKernel::kTensorCore)
                    .ok());
  }
  Sync();
  EXPECT_EQ(y1.Bytes(), y2.Bytes());
}

TEST(GroupedMatmulCudaArgs, BadShapesAreRefused) {
  GroupedMatmulParams p;
  p.G = 0, p.M = 4, p.K = 4, p.N = 4;
  EXPECT_EQ(cuda::GroupedMatmul(Context::Cpu(), p).code(), absl::StatusCode::kInvalidArgument);
  p.G = 2, p.dtype = DType::kI32;
  EXPECT_EQ(cuda::GroupedMatmul(Context::Cpu(), p).code(), absl::StatusCode::kInvalidArgument);
}

// Checked before any launch: no device needed.
TEST(GroupedMatmulCudaArgs, TensorCoreKernelRefusesWhatItCannotTake) {
  GroupedMatmulParams p;
  p.G = 2, p.M = 4, p.K = 16, p.N = 16, p.dtype = DType::kF32;
  EXPECT_EQ(GroupedMatmulWithKernel(Context::Cpu(), p, GroupedMatmulKernel::kTensorCore).code(),
            absl::StatusCode::kInvalidArgument);  // fp32
  p.dtype = DType::kBF16, p.K = 12;
  EXPECT_EQ(GroupedMatmulWithKernel(Context::Cpu(), p, GroupedMatmulKernel::kTensorCore).code(),
            absl::StatusCode::kInvalidArgument);  // K not a multiple of 8
  GroupedMatmulBackwardParams b;
  b.G = 2, b.M = 4, b.K = 16, b.N = 20, b.dtype = DType::kBF16;
  EXPECT_EQ(GroupedMatmulBackwardWithKernel(Context::Cpu(), b, GroupedMatmulKernel::kTensorCore).code(),
            absl::StatusCode::kInvalidArgument);  // N not a multiple of 8
  alignas(16) static uint16_t buffer[64];
  b.N = 16, b.x = buffer + 1, b.w = buffer, b.dy = buffer;
  EXPECT_EQ(GroupedMatmulBackwardWithKernel(Context::Cpu(), b, GroupedMatmulKernel::kTensorCore).code(),
            absl::StatusCode::kInvalidArgument);  // x not 16-byte aligned
}

INSTANTIATE_TEST_SUITE_P(DTypes, GroupedMatmulCudaTest, testing::GpuTestDTypes(), testing::DTypeTestName);

}  // namespace
}  // namespace lmf::kernels::cuda
