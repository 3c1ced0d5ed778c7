// `bazel run //tools/cuda_info` prints the CUDA library versions lmforge was built against and runs with,
// and the visible GPUs. Exits 1 if a loaded library is incompatible with its headers.
#include <cstdio>

#include "absl/flags/usage.h"
#include "base/flags.h"
#include "tools/cuda_info/cuda_versions.h"

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Prints the CUDA library versions built against and loaded, and the visible GPUs; exits 1 if a loaded "
      "library is incompatible with its headers. Takes no flags.");
  lmf::ParseFlags(argc, argv);
  const lmf::cuda_info::CudaReport report = lmf::cuda_info::Probe();
  std::fputs(lmf::cuda_info::Format(report).c_str(), stdout);
  for (const auto& lib : report.libraries) {
    if (!lib.compatible) return 1;
  }
  return 0;
}
