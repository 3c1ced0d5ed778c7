// Reads the versions of the CUDA libraries lmforge links (runtime, driver, cuBLAS, cuBLASLt, NCCL) at run
// time and compares them with the headers the code was compiled against. None of these calls needs a GPU.
#ifndef LMFORGE_TOOLS_CUDA_INFO_CUDA_VERSIONS_H_
#define LMFORGE_TOOLS_CUDA_INFO_CUDA_VERSIONS_H_

#include <string>
#include <vector>

namespace lmf::cuda_info {

struct LibraryVersion {
  std::string library;  // "cudart", "cublas", ...
  int compiled = 0;     // from the header, in the library's own encoding
  int runtime = 0;      // reported by the loaded library; 0 if it could not say
  bool compatible = false;
  std::string note;     // why it is (in)compatible
};

struct CudaReport {
  std::vector<LibraryVersion> libraries;
  int driver_version = 0;  // 0: no driver (no GPU on this machine)
  int device_count = 0;
  std::vector<std::string> devices;  // "NVIDIA H200 (sm_90, 139 GiB)"
};

CudaReport Probe();

// Human-readable table of the report.
std::string Format(const CudaReport& report);

}  // namespace lmf::cuda_info

#endif  // LMFORGE_TOOLS_CUDA_INFO_CUDA_VERSIONS_H_
