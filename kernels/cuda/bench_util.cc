// Benchmark helpers; see bench_util.h.
#include "kernels/cuda/bench_util.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "kernels/testing/cpu_peer.h"

namespace lmf::kernels::cuda::bench {

std::unique_ptr<CudaContext> OpenDevice(const char* name, int* exit_code) {
  if (CudaDeviceCount() == 0) {
    std::printf("%s: no CUDA device, nothing measured\n", name);
    *exit_code = 0;
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<CudaContext>> cc = CudaContext::Create(0);
  if (!cc.ok()) {
    std::printf("%s: %s\n", name, cc.status().ToString().c_str());
    *exit_code = 1;
    return nullptr;
  }
  return *std::move(cc);
}

double MedianMs(void* stream, const std::function<void()>& fn, int warmup, int iters) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms(iters);
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(start, s);
    fn();
    cudaEventRecord(stop, s);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&ms[i], start, stop);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const cudaError_t e = cudaGetLastError();
  LMF_CHECK(e == cudaSuccess) << "benchmark kernel failed: " << cudaGetErrorString(e);
  std::sort(ms.begin(), ms.end());
  return ms[iters / 2];
}

namespace {

std::string FindScript(const std::string& script) {
  std::vector<std::string> candidates = {"tools/gpu_peers/" + script};
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = 0;
    std::string dir(exe);
    dir = dir.substr(0, dir.rfind('/'));
    candidates.push_back(dir + "/../peers/" + script);  // the GPU bundle's layout: bench/ beside peers/
  }
  for (const std::string& c : candidates)
    if (access(c.c_str(), R_OK) == 0) return c;
  return "";
}

}  // namespace

absl::StatusOr<std::map<std::string, double>> RunPeer(const std::string& script, const std::string& args) {
  const std::string path = FindScript(script);
  if (path.empty()) return absl::NotFoundError(absl::StrCat("peer script ", script, " not found"));
  absl::StatusOr<testing::CpuPeer> peer = testing::RunPeerCommand(absl::StrCat("python3 ", path, " ", args));
  if (!peer.ok()) return peer.status();
  return std::move(peer->ms);
}

std::string Ratio(const std::map<std::string, double>* peer, const std::string& label, double ours_ms) {
  if (peer == nullptr) return "n/a";
  auto it = peer->find(label);
  if (it == peer->end()) return "n/a";
  return absl::StrFormat("%.2fx", it->second / ours_ms);
}

std::vector<float> RandomUniform(int64_t n, uint64_t seed, float scale) {
  std::vector<float> out(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    out[i] = scale * (static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f);
  }
  return out;
}

double CopyBandwidthGBs(void* stream, size_t bytes) {
  void *a = nullptr, *b = nullptr;
  LMF_CHECK(cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&b, bytes) == cudaSuccess) << "copy buffers";
  cudaMemset(a, 1, bytes);
  const double ms = MedianMs(stream, [&] {
    cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream));
  });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

}  // namespace lmf::kernels::cuda::bench
