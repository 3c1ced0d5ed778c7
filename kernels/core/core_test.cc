// Tensor, Shape, allocator and context: ownership, views, strides and typed access behave as documented.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"
#include "kernels/core/tensor.h"
#include "kernels/cpu/isa.h"

namespace lmf::kernels {
namespace {

TEST(Shape, NumelStridesAndPrinting) {
  Shape s{4, 64, 768};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 4 * 64 * 768);
  EXPECT_EQ(ContiguousStrides(s), (Shape{64 * 768, 768, 1}));
  EXPECT_EQ(s.ToString(), "[4, 64, 768]");
  EXPECT_EQ(Shape{}.numel(), 1);
}

TEST(Tensor, EmptyIsContiguousAlignedAndOwning) {
  Tensor t = Tensor::Empty({3, 5}, DType::kF32);
  EXPECT_TRUE(t.defined());
  EXPECT_TRUE(t.owns_memory());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.nbytes(), 60u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % Allocator::kAlignment, 0u);
  EXPECT_EQ(t.device(), Device::Cpu());
}

TEST(Tensor, ZerosAreZero) {
  Tensor t = Tensor::Zeros({7, 3}, DType::kF32);
  for (int i = 0; i < 21; ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
}

TEST(Tensor, AllocatorBytesReturnWhenLastViewDies) {
  CpuAllocator allocator;
  {
    Tensor view;
    {
      Tensor t = Tensor::Empty({100}, DType::kF32, &allocator);
      EXPECT_EQ(allocator.bytes_in_use(), 400u);
      view = t.Slice(0, 10, 20);
    }
    EXPECT_EQ(allocator.bytes_in_use(), 400u) << "a view keeps its storage alive";
    EXPECT_EQ(view.dim(0), 20);
  }
  EXPECT_EQ(allocator.bytes_in_use(), 0u);
}

TEST(Tensor, SliceSelectAndReshapeAddressTheRightElements) {
  Tensor t = Tensor::Empty({2, 3, 4}, DType::kF32);
  float* p = t.data<float>();
  for (int i = 0; i < 24; ++i) p[i] = static_cast<float>(i);
  Tensor s = t.Slice(1, 1, 2);  // [2, 2, 4]
  EXPECT_EQ(s.shape(), (Shape{2, 2, 4}));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.data<float>()[0], 4.0f);
  Tensor row = t.Select(0, 1);  // [3, 4]
  EXPECT_EQ(row.shape(), (Shape{3, 4}));
  EXPECT_EQ(row.data<float>()[0], 12.0f);
  Tensor col = t.Select(2, 3);  // [2, 3], strides [12, 4]
  EXPECT_EQ(col.strides(), (Shape{12, 4}));
  EXPECT_EQ(col.data<float>()[0], 3.0f);
  Tensor r = t.Reshape({6, 4});
  EXPECT_EQ(r.data(), t.data());
  EXPECT_EQ(r.stride(0), 4);
}

TEST(Tensor, WrapDoesNotOwn) {
  float buffer[6] = {1, 2, 3, 4, 5, 6};
  Tensor t = Tensor::Wrap(buffer, {2, 3}, DType::kF32);
  EXPECT_FALSE(t.owns_memory());
  EXPECT_EQ(t.data<float>()[5], 6.0f);
  Tensor copy = Tensor::Empty({2, 3}, DType::kF32);
  copy.CopyFrom(t);
  EXPECT_EQ(copy.data<float>()[4], 5.0f);
}

TEST(TensorDeathTest, WrongElementTypeAborts) {
  Tensor t = Tensor::Empty({2}, DType::kI32);
  EXPECT_DEATH(t.data<float>(), "i32 tensor read as a float");
  EXPECT_DEATH(t.Reshape({3}), "Reshape");
}

TEST(DType, SizesAndBF16RoundTrip) {
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF8E4M3), 1u);
  EXPECT_EQ(BF16ToFloat(FloatToBF16(1.0f)), 1.0f);
  // 1 + 2^-8 is halfway between two bf16 values; ties go to the even mantissa (1.0).
  EXPECT_EQ(BF16ToFloat(FloatToBF16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(BF16ToFloat(FloatToBF16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
}

TEST(Context, CpuContextHasPoolAndAllocator) {
  ThreadPool pool(2);
  Context ctx = Context::Cpu(&pool);
  EXPECT_EQ(ctx.num_threads(), 2);
  EXPECT_NE(ctx.allocator, nullptr);
}

// Making a CPU context reads LMF_CPU_ISA (kernels/cpu/isa.h), so a bad value stops a program before its
// first kernel rather than in the middle of its work.
TEST(ContextDeathTest, ACpuContextChecksLmfCpuIsa) {
  EXPECT_EXIT(
      {
        setenv("LMF_CPU_ISA", "avx1024", 1);
        vec::internal::g_use_avx512.store(-1);
        Context::Cpu();
      },
      ::testing::ExitedWithCode(2), "LMF_CPU_ISA=\"avx1024\" is not one of auto, avx2, avx512");
}

TEST(Dispatch, CpuBackendRunsEveryOpInF32AndTheDenseTransformersOpsInBf16) {
  EXPECT_TRUE(BackendSupports("rmsnorm", Device::Cpu(), DType::kF32));
  EXPECT_TRUE(BackendSupports("softmax", Device::Cpu(), DType::kF32));
  for (const char* op : {"activation", "attention", "cross_entropy", "embedding", "layernorm", "matmul", "residual",
                         "rmsnorm", "rope", "swiglu"}) {
    EXPECT_TRUE(BackendSupports(op, Device::Cpu(), DType::kBF16)) << op;
    EXPECT_FALSE(BackendSupports(op, Device::Cpu(), DType::kF16)) << op;
  }
  // The MoE's row moves and the router's softmax have no bf16 CPU path; AdamW and the norm read fp32 grads.
  for (const char* op : {"moe_rows", "softmax", "adamw", "grad_norm"})
    EXPECT_FALSE(BackendSupports(op, Device::Cpu(), DType::kBF16)) << op;
}

TEST(Dispatch, CpuBackendCastsBetweenF32AndBf16) {
  EXPECT_TRUE(BackendSupports("cast", Device::Cpu(), DType::kF32));
  EXPECT_TRUE(BackendSupports("cast", Device::Cpu(), DType::kBF16));
  EXPECT_FALSE(BackendSupports("cast", Device::Cpu(), DType::kF16));
}

#if LMF_WITH_CUDA
TEST(Dispatch, CudaBackendRunsItsOpsInF32AndBf16) {
  for (const char* op : {"activation", "adamw", "attention", "cast", "cross_entropy", "embedding", "grad_norm",
                         "layernorm", "matmul", "residual", "rmsnorm", "rope", "swiglu"}) {
    EXPECT_TRUE(BackendSupports(op, Device::Cuda(0), DType::kF32)) << op;
    EXPECT_TRUE(BackendSupports(op, Device::Cuda(0), DType::kBF16)) << op;
    EXPECT_FALSE(BackendSupports(op, Device::Cuda(0), DType::kI32)) << op;
  }
  EXPECT_FALSE(BackendSupports("softmax", Device::Cuda(0), DType::kF32));  // no CUDA softmax
}
#else
TEST(Dispatch, NoCudaBackendInThisBinary) {
  EXPECT_FALSE(BackendSupports("rmsnorm", Device::Cuda(0), DType::kF32));
  EXPECT_FALSE(BackendSupports("rmsnorm", Device::Cuda(0), DType::kBF16));
}
#endif

struct SeenOps {
  std::vector<std::string> names;
};

TEST(CudaOpHook, SeesEachSuccessfulOpByNameUntilCleared) {
  SeenOps seen;
  SetCudaOpHook([](void* arg, const char* op) { static_cast<SeenOps*>(arg)->names.push_back(op); }, &seen);
  CheckCuda(absl::OkStatus(), "Matmul");
  CheckCuda(absl::OkStatus(), "RmsNormForward");
  EXPECT_EQ(CheckCudaValue(absl::StatusOr<int>(7), "GlobalGradNorm"), 7);
  SetCudaOpHook(nullptr, nullptr);
  CheckCuda(absl::OkStatus(), "Cast");
  EXPECT_EQ(seen.names, (std::vector<std::string>{"Matmul", "RmsNormForward", "GlobalGradNorm"}));
}

TEST(CudaOpHookDeathTest, AFailedOpAbortsBeforeTheHook) {
  SetCudaOpHook([](void*, const char*) { std::abort(); }, nullptr);
  EXPECT_DEATH(CheckCuda(absl::InternalError("launch failed"), "Matmul"), "Matmul on CUDA failed: launch failed");
  SetCudaOpHook(nullptr, nullptr);
}

}  // namespace
}  // namespace lmf::kernels
