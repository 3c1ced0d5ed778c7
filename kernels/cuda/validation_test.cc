// Argument checking of the CUDA ops, which runs on the host before any CUDA call: these tests run (and
// must pass) on machines without a GPU. Each unsupported or malformed call returns a Status naming the
// problem; none launches a kernel (host pointers stand in for device memory, which is never touched).
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/activations/activations.h"
#include "kernels/adamw/adamw.h"
#include "kernels/attention/attention.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/grad_norm/grad_norm.h"
#include "kernels/layernorm/layernorm.h"
#include "kernels/matmul/matmul.h"
#include "kernels/residual/residual.h"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/rope/rope.h"
#include "kernels/swiglu/swiglu.h"

namespace lmf::kernels::cuda {
namespace {

Context FakeCudaContext() {
  Context ctx;
  ctx.device = Device::Cuda(0);
  return ctx;  // no stream, no allocator
}

class ValidationTest : public ::testing::Test {
 protected:
  alignas(16) uint16_t q_[4096] = {};
  alignas(16) uint16_t out_[4096] = {};
  float lse_[64] = {};
  AttentionParams Attention() {
    AttentionParams p = ContiguousAttentionParams(1, 8, 8, 2, 2, 64, true, q_, q_, q_, out_, lse_);
    p.dtype = DType::kBF16;
    return p;
  }
};

TEST_F(ValidationTest, AttentionRejectsUnsupportedHeadSizeDtypeAndGrouping) {
  AttentionParams p = Attention();
  p.HS = 96;
  absl::Status s = cuda::AttentionForward(FakeCudaContext(), p);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("head size 96"), std::string::npos) << s;
  p = Attention();
  p.dtype = DType::kF16;
  EXPECT_EQ(cuda::AttentionForward(FakeCudaContext(), p).code(), absl::StatusCode::kUnimplemented);
  p = Attention();
  p.dtype = DType::kF32, p.HS = 80;
  EXPECT_EQ(cuda::AttentionForward(FakeCudaContext(), p).code(), absl::StatusCode::kUnimplemented);
  p = Attention();
  p.NH = 3;
  p.NKV = 2;
  EXPECT_EQ(cuda::AttentionForward(FakeCudaContext(), p).code(), absl::StatusCode::kInvalidArgument);
  p = Attention();
  p.lse = nullptr;
  EXPECT_EQ(cuda::AttentionForward(FakeCudaContext(), p).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ValidationTest, AttentionRejectsMisalignedStridesAndPointers) {
  AttentionParams p = Attention();
  p.q_stride_t = 130;  // not a multiple of 8 elements: 16-byte loads would straddle rows
  absl::Status s = cuda::AttentionForward(FakeCudaContext(), p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("stride 130"), std::string::npos) << s;
  p = Attention();
  p.k = q_ + 1;  // 2-byte aligned
  EXPECT_EQ(cuda::AttentionForward(FakeCudaContext(), p).code(), absl::StatusCode::kInvalidArgument);
  AttentionBackwardParams bp;
  bp.forward = Attention();
  bp.dout = out_ + 1, bp.dq = q_, bp.dk = q_, bp.dv = q_;
  EXPECT_EQ(cuda::AttentionBackward(FakeCudaContext(), bp).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ValidationTest, ElementwiseAndNormOpsRejectOtherDtypes) {
  float x[16] = {};
  EXPECT_EQ(
      cuda::RmsNormForward(FakeCudaContext(), RmsNormForwardParams{DType::kF16, 2, 8, 1e-5f, x, x, x, x})
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::ActivationForward(FakeCudaContext(),
                                    ActivationForwardParams{DType::kI32, Activation::kSilu, 16, x, x})
                .code(),
            absl::StatusCode::kInvalidArgument);
  RopeParams r = ContiguousRopeParams(1, 2, 1, 7, 10000.0f, x, x);
  EXPECT_EQ(cuda::RopeForward(FakeCudaContext(), r).code(), absl::StatusCode::kInvalidArgument)
      << "odd head size";
  MatmulParams m = LinearParams(2, 2, 2, x, x, nullptr, x);
  m.dtype = DType::kF16;
  EXPECT_EQ(cuda::Matmul(FakeCudaContext(), m).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ValidationTest, BackwardNeedingScratchReportsAMissingAllocator) {
  float x[16] = {};
  RmsNormBackwardParams p{DType::kF32, 2, 8, x, x, x, x, x, x};
  absl::Status s = cuda::RmsNormBackward(FakeCudaContext(), p);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("allocator"), std::string::npos) << s;
}

TEST_F(ValidationTest, CrossEntropyChecksStrideAndBackwardInputs) {
  float x[16] = {};
  int32_t t[2] = {0, 1};
  CrossEntropyParams p;
  p.N = 2, p.V = 8, p.row_stride = 4, p.logits = x, p.targets = t, p.lse = x;
  EXPECT_EQ(cuda::CrossEntropyForward(FakeCudaContext(), p).code(), absl::StatusCode::kInvalidArgument);
  p.row_stride = 8, p.lse = nullptr, p.dlogits = x;
  EXPECT_EQ(cuda::CrossEntropyBackward(FakeCudaContext(), p).code(), absl::StatusCode::kInvalidArgument);
  p.lse = x, p.dlogits = nullptr;
  EXPECT_EQ(cuda::CrossEntropyBackward(FakeCudaContext(), p).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ValidationTest, AdamWChecksStepAndDtypes) {
  float x[4] = {};
  AdamWTensor t{4, x, x, x, x, nullptr};
  MultiTensorAdamWParams p;
  p.tensors = &t, p.num_tensors = 1, p.step = 0;
  EXPECT_EQ(cuda::MultiTensorAdamW(FakeCudaContext(), p).code(), absl::StatusCode::kInvalidArgument);
  p.step = 1, p.grad_dtype = DType::kI32;
  EXPECT_EQ(cuda::MultiTensorAdamW(FakeCudaContext(), p).code(), absl::StatusCode::kInvalidArgument);
  AdamWParams single;
  single.dtype = DType::kBF16, single.n = 4, single.param = x, single.grad = x, single.m = x, single.v = x;
  EXPECT_EQ(cuda::AdamWStep(FakeCudaContext(), single).code(), absl::StatusCode::kInvalidArgument);
}

// The device-generic entry points (kernels::Op) send a CUDA context to the CUDA backend, whose Status
// aborts the run naming the op (core/dispatch.h's CheckCuda): each call below fails in the backend's
// argument checks, before any CUDA call, so this runs the same with or without a GPU. The CPU kernels would
// not produce these messages.
TEST_F(ValidationTest, EntryPointsSendCudaContextsToTheCudaBackendAndAbortOnItsErrors) {
  float x[16] = {};
  RmsNormBackwardParams rb{DType::kF32, 2, 8, x, x, x, x, x, x};
  EXPECT_DEATH(kernels::RmsNormBackward(FakeCudaContext(), rb),
               "RmsNormBackward on CUDA failed: .*allocator");
  const GradSpan span{x, 16};
  EXPECT_DEATH(kernels::GlobalGradNorm(FakeCudaContext(), GradNormParams{DType::kBF16, &span, 1}),
               "GlobalGradNorm on CUDA failed: .*allocator");
  AdamWTensor t{4, x, x, x, x, nullptr};
  MultiTensorAdamWParams adamw;
  adamw.tensors = &t, adamw.num_tensors = 1, adamw.step = 0;
  EXPECT_DEATH(kernels::MultiTensorAdamW(FakeCudaContext(), adamw),
               "MultiTensorAdamW on CUDA failed: adamw: step 0");
  AttentionParams a = Attention();
  a.HS = 96;
  EXPECT_DEATH(kernels::AttentionForward(FakeCudaContext(), a),
               "AttentionForward on CUDA failed: .*head size 96");
  // A dtype no backend runs stops at BackendSupports.
  RmsNormForwardParams rf{DType::kF16, 2, 8, 1e-5f, x, x, x, x};
  EXPECT_DEATH(kernels::RmsNormForward(FakeCudaContext(), rf), "no backend in this binary runs op 'rmsnorm'");
}

absl::Status SetInvalidDevice() {
  LMF_CUDA_RETURN_IF_ERROR(cudaSetDevice(-1));
  return absl::OkStatus();
}

TEST(CudaCheckTest, FailedCallBecomesAStatusNamingTheCall) {
  const absl::Status s = SetInvalidDevice();  // fails with or without a GPU
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("cudaSetDevice(-1)"), std::string::npos) << s;
  EXPECT_NE(s.message().find("validation_test.cc"), std::string::npos) << s;
}

}  // namespace
}  // namespace lmf::kernels::cuda
