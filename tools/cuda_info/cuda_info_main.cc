// `bazel run //tools/cuda_info` prints the CUDA library versions lmforge was built against and runs with,
// and the visible GPUs. Exits 1 if a loaded library is incompatible with its headers.
#include <cstdio>

#include "tools/cuda_info/cuda_versions.h"

int main() {
  const lmf::cuda_info::CudaReport report = lmf::cuda_info::Probe();
  std::fputs(lmf::cuda_info::Format(report).c_str(), stdout);
  for (const auto& lib : report.libraries) {
    if (!lib.compatible) return 1;
  }
  return 0;
}
