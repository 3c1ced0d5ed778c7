// Test helpers for the CUDA kernels: a fixture that skips without a device and owns a CudaContext,
// device buffers filled from and read back into float vectors (stored as fp32 or bf16), and the bf16
// tolerance rule of STYLE.md:
//
//   error(kernel)  = max |kernel - reference|, reference = the fp32 CPU kernel on the unrounded inputs
//   error(naive)   = max |naive - reference|,  naive = the same CPU kernel on bf16-rounded inputs, its
//                    output rounded to bf16 (what a plain bf16-storage computation of the op gives)
//   pass when error(kernel) <= multiple * error(naive) + floor
// The kernel sees the same rounded inputs and rounds its output the same way; it differs from the naive
// computation only in the order of fp32 operations and in bf16 roundings of intermediates it stores, so a
// multiple of 2 covers output rounding landing on the other side of a tie and 4 covers an intermediate
// stored in bf16 (stated per test).
#ifndef LMFORGE_KERNELS_CUDA_GPU_TEST_UTIL_H_
#define LMFORGE_KERNELS_CUDA_GPU_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/testing/compare.h"

namespace lmf::kernels::cuda::testing {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  Context ctx() const { return cc_->context(); }
  CudaContext& cuda() { return *cc_; }
  void Sync();  // synchronises and fails the test on an asynchronous error

 private:
  std::unique_ptr<CudaContext> cc_;
};

// A GpuTest run once per dtype (fp32, bf16: INSTANTIATE_TEST_SUITE_P(DTypes, Fixture, GpuTestDTypes(),
// DTypeTestName)) with the comparison every op test makes against its CPU kernel: fp32 results close to
// the fp32 CPU result, bf16 results within `multiple` x the naive bf16 error (the rule above).
class DTypeGpuTest : public GpuTest, public ::testing::WithParamInterface<DType> {
 protected:
  DType dt() const { return GetParam(); }
  // `naive` is the CPU result on rounded inputs; it is rounded here when the output is stored in dtype
  // (`rounded_output`); statistics and parameter gradients stay fp32 (rounded_output = false).
  void Expect(const std::string& what, const std::vector<float>& gpu, const std::vector<float>& ref,
              const std::vector<float>& naive, bool rounded_output = true, double multiple = 2.0,
              double rtol = 1e-5, double atol = 1e-6);
  const Context cpu_ = Context::Cpu();
};

::testing::internal::ParamGenerator<DType> GpuTestDTypes();
std::string DTypeTestName(const ::testing::TestParamInfo<DType>& info);

// Device memory holding n elements of dtype, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int64_t n, DType dtype);
  DeviceBuffer(const std::vector<float>& values,
               DType dtype);  // converts to dtype (bf16: round to nearest even)
  static DeviceBuffer Ints(const std::vector<int32_t>& values);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  int64_t size() const { return n_; }
  DType dtype() const { return dtype_; }
  std::vector<float> ToFloats() const;  // synchronous copy back, converted to float
  std::vector<uint8_t> Bytes() const;   // raw contents, for bitwise determinism checks
  void Fill(float value);               // every element (converted to dtype)

 private:
  void* ptr_ = nullptr;
  int64_t n_ = 0;
  DType dtype_ = DType::kF32;
};

// The STYLE.md bf16 rule above and its helpers live in kernels/testing/compare.h (the CPU bf16 tests use them
// too).
using ::lmf::kernels::testing::MaxAbsDiff;
using ::lmf::kernels::testing::RoundToBF16;
using ::lmf::kernels::testing::WithinBf16Tolerance;
std::vector<float> RoundTo(const std::vector<float>& x, DType dtype);  // identity for kF32

// fp32 kernels against the fp32 CPU kernel: |a - b| <= rtol |b| + atol everywhere.
::testing::AssertionResult CloseF32(const std::string& what, const std::vector<float>& kernel,
                                    const std::vector<float>& reference, double rtol = 1e-5,
                                    double atol = 1e-6);

}  // namespace lmf::kernels::cuda::testing

#endif  // LMFORGE_KERNELS_CUDA_GPU_TEST_UTIL_H_
