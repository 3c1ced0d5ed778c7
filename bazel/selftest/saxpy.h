// A minimal CUDA kernel used to test lmf_cuda_library: nvcc output linked into a C++ test, and the
// runtime's device probe. y[i] = a * x[i] + y[i] on the GPU.
#ifndef LMFORGE_BAZEL_SELFTEST_SAXPY_H_
#define LMFORGE_BAZEL_SELFTEST_SAXPY_H_

#include <string>

namespace lmf::selftest {

// Number of CUDA devices the runtime sees (0 where there is no GPU or no driver).
int CudaDeviceCount();

// Runs saxpy on the GPU for n host floats; returns "" on success or the CUDA error text.
std::string SaxpyOnDevice(int n, float a, const float* x, float* y);

}  // namespace lmf::selftest

#endif  // LMFORGE_BAZEL_SELFTEST_SAXPY_H_
