// Runs the selftest kernel on a GPU and checks every element; skips with a message where there is none.
#include <vector>

#include "bazel/selftest/saxpy.h"
#include "gtest/gtest.h"

namespace lmf::selftest {
namespace {

TEST(CudaSelftest, SaxpyMatchesHost) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the kernel was compiled and linked, not run";
  const int n = 1 << 20;
  std::vector<float> x(n), y(n), expected(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 1000) * 0.5f;
    y[i] = static_cast<float>(i % 7);
    expected[i] = 3.0f * x[i] + y[i];  // exact in fp32 for these small values, on host and device alike
  }
  ASSERT_EQ(SaxpyOnDevice(n, 3.0f, x.data(), y.data()), "");
  for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], expected[i]) << "at " << i;
}

}  // namespace
}  // namespace lmf::selftest
