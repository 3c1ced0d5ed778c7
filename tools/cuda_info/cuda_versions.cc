// Version probes for the CUDA libraries; see cuda_versions.h. Compatibility rules: the runtime and cuBLAS
// must match the headers' major version (their sonames carry it), NCCL must have the same major and at
// least the compiled minor version.
#include "tools/cuda_info/cuda_versions.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <sstream>

namespace lmf::cuda_info {
namespace {

LibraryVersion Compare(const char* name, int compiled, int runtime, int major_divisor) {
  LibraryVersion v;
  v.library = name;
  v.compiled = compiled;
  v.runtime = runtime;
  if (runtime == 0) {
    v.note = "the library did not report a version";
  } else if (compiled / major_divisor != runtime / major_divisor) {
    v.note = "major version differs from the headers";
  } else {
    v.compatible = true;
    v.note = runtime >= compiled ? "ok" : "ok (older minor version than the headers)";
  }
  return v;
}

}  // namespace

CudaReport Probe() {
  CudaReport r;
  int cudart = 0;
  cudaRuntimeGetVersion(&cudart);
  r.libraries.push_back(Compare("cudart", CUDART_VERSION, cudart, 1000));

  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  r.libraries.push_back(Compare("cublas", CUBLAS_VERSION, major * 10000 + minor * 100 + patch, 10000));

  r.libraries.push_back(Compare("cublasLt", CUBLAS_VERSION, static_cast<int>(cublasLtGetVersion()), 10000));

  int nccl = 0;
  ncclGetVersion(&nccl);
  r.libraries.push_back(Compare("nccl", NCCL_VERSION_CODE, nccl, 10000));

  if (cudaDriverGetVersion(&r.driver_version) != cudaSuccess) r.driver_version = 0;
  if (cudaGetDeviceCount(&r.device_count) != cudaSuccess) {
    cudaGetLastError();
    r.device_count = 0;
  }
  for (int d = 0; d < r.device_count; ++d) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%s (sm_%d%d, %.0f GiB, %d SMs)", prop.name, prop.major, prop.minor,
                  static_cast<double>(prop.totalGlobalMem) / (1ull << 30), prop.multiProcessorCount);
    r.devices.push_back(buf);
  }
  return r;
}

std::string Format(const CudaReport& report) {
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof(line), "%-10s %10s %10s  %s\n", "library", "headers", "loaded", "status");
  out << line;
  for (const LibraryVersion& v : report.libraries) {
    std::snprintf(line, sizeof(line), "%-10s %10d %10d  %s\n", v.library.c_str(), v.compiled, v.runtime,
                  v.note.c_str());
    out << line;
  }
  out << "driver: " << (report.driver_version ? std::to_string(report.driver_version) : "none (no GPU driver)")
      << "\n";
  out << "devices: " << report.device_count << "\n";
  for (const std::string& d : report.devices) out << "  " << d << "\n";
  return out.str();
}

}  // namespace lmf::cuda_info
