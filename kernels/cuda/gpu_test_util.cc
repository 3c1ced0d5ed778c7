// Test helpers for the CUDA kernels; see gpu_test_util.h.
#include "kernels/cuda/gpu_test_util.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <sstream>

namespace lmf::kernels::cuda::testing {

void GpuTest::SetUp() {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: GPU test skipped (runs in the GPU bundle)";
  absl::StatusOr<std::unique_ptr<CudaContext>> cc = CudaContext::Create(0);
  ASSERT_TRUE(cc.ok()) << cc.status();
  cc_ = std::move(*cc);
}

void GpuTest::TearDown() {
  if (cc_ != nullptr) Sync();
  cc_.reset();
}

void GpuTest::Sync() {
  const cudaError_t e = cudaDeviceSynchronize();
  ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
}

void DTypeGpuTest::Expect(const std::string& what, const std::vector<float>& gpu,
                          const std::vector<float>& ref, const std::vector<float>& naive, bool rounded_output,
                          double multiple, double rtol, double atol) {
  if (dt() == DType::kF32) {
    EXPECT_TRUE(CloseF32(what, gpu, ref, rtol, atol));
  } else {
    EXPECT_TRUE(
        WithinBf16Tolerance(what, gpu, ref, rounded_output ? RoundTo(naive, DType::kBF16) : naive, multiple));
  }
}

::testing::internal::ParamGenerator<DType> GpuTestDTypes() {
  return ::testing::Values(DType::kF32, DType::kBF16);
}

std::string DTypeTestName(const ::testing::TestParamInfo<DType>& info) { return DTypeName(info.param); }

// cudaMemset and cudaMemcpy run on the legacy default stream, which does not order work on the
// CudaContext's non-blocking stream (and a pageable cudaMemcpy may return before its DMA lands): each
// constructor waits for the device, so the kernels under test never race the poison or the upload.
DeviceBuffer::DeviceBuffer(int64_t n, DType dtype) : n_(n), dtype_(dtype) {
  const cudaError_t e = cudaMalloc(&ptr_, std::max<size_t>(1, n * DTypeSize(dtype)));
  EXPECT_EQ(e, cudaSuccess) << "cudaMalloc: " << cudaGetErrorString(e);
  // Poison (NaN for floats) so that unwritten outputs fail the comparisons.
  cudaMemset(ptr_, 0xff, std::max<size_t>(1, n * DTypeSize(dtype)));
  cudaDeviceSynchronize();
}

DeviceBuffer::DeviceBuffer(const std::vector<float>& values, DType dtype)
    : DeviceBuffer(static_cast<int64_t>(values.size()), dtype) {
  if (dtype == DType::kF32) {
    cudaMemcpy(ptr_, values.data(), values.size() * 4, cudaMemcpyHostToDevice);
  } else {
    std::vector<uint16_t> h(values.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = FloatToBF16(values[i]);
    cudaMemcpy(ptr_, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
  }
  cudaDeviceSynchronize();
}

DeviceBuffer DeviceBuffer::Ints(const std::vector<int32_t>& values) {
  DeviceBuffer b(static_cast<int64_t>(values.size()), DType::kI32);
  cudaMemcpy(b.ptr_, values.data(), values.size() * 4, cudaMemcpyHostToDevice);
  cudaDeviceSynchronize();
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_), dtype_(o.dtype_) {
  o.ptr_ = nullptr;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = o.ptr_, n_ = o.n_, dtype_ = o.dtype_;
    o.ptr_ = nullptr;
  }
  return *this;
}

std::vector<float> DeviceBuffer::ToFloats() const {
  cudaDeviceSynchronize();
  std::vector<float> out(n_);
  if (dtype_ == DType::kF32) {
    cudaMemcpy(out.data(), ptr_, n_ * 4, cudaMemcpyDeviceToHost);
  } else if (dtype_ == DType::kBF16) {
    std::vector<uint16_t> h(n_);
    cudaMemcpy(h.data(), ptr_, n_ * 2, cudaMemcpyDeviceToHost);
    for (int64_t i = 0; i < n_; ++i) out[i] = BF16ToFloat(h[i]);
  } else {
    ADD_FAILURE() << "ToFloats on a " << DTypeName(dtype_) << " buffer";
  }
  return out;
}

std::vector<uint8_t> DeviceBuffer::Bytes() const {
  cudaDeviceSynchronize();
  std::vector<uint8_t> out(n_ * DTypeSize(dtype_));
  cudaMemcpy(out.data(), ptr_, out.size(), cudaMemcpyDeviceToHost);
  return out;
}

void DeviceBuffer::Fill(float value) { *this = DeviceBuffer(std::vector<float>(n_, value), dtype_); }

std::vector<float> RoundTo(const std::vector<float>& x, DType dtype) {
  return dtype == DType::kBF16 ? RoundToBF16(x) : x;
}

::testing::AssertionResult CloseF32(const std::string& what, const std::vector<float>& kernel,
                                    const std::vector<float>& reference, double rtol, double atol) {
  if (kernel.size() != reference.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  int64_t bad = 0, worst = -1;
  double worst_excess = 0;
  for (size_t i = 0; i < kernel.size(); ++i) {
    const double d = std::fabs(static_cast<double>(kernel[i]) - reference[i]);
    const double tol = atol + rtol * std::fabs(reference[i]);
    if (!(d <= tol) && !(std::isinf(kernel[i]) && kernel[i] == reference[i])) {
      ++bad;
      if (worst < 0 || !(d - tol <= worst_excess)) worst = static_cast<int64_t>(i), worst_excess = d - tol;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << kernel.size() << " elements differ; worst [" << worst << "] "
         << kernel[worst] << " vs " << reference[worst];
}

}  // namespace lmf::kernels::cuda::testing
