// GEMM benchmark (bf16 in, fp32 accumulate, bf16 out, cuBLASLt through kernels/matmul): TFLOP/s for the
// GPT-2-small / 350M training shapes (N = 16384 tokens) and 8192^3, against torch.matmul measured in the
// same run (tools/gpu_peers/gemm_peer.py) and against the ~790 TFLOP/s measured bf16 peak of an H200.
//
//   matmul_cuda_benchmark (needs a CUDA device; part of the GPU bundle)
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cuda/bench_util.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/matmul/matmul.h"

namespace lmf::kernels::cuda {
namespace {

struct Shape {
  const char* name;
  int64_t M, N, K;  // y (M, N) = x (M, K) W^T, W (N, K)
};

int Main() {
  if (CudaDeviceCount() == 0) {
    std::printf("matmul_cuda_benchmark: no CUDA device, nothing measured\n");
    return 0;
  }
  auto cc = CudaContext::Create(0);
  if (!cc.ok()) {
    std::printf("gemm_benchmark: %s\n", cc.status().ToString().c_str());
    return 1;
  }
  const Context ctx = (*cc)->context();
  const std::vector<Shape> shapes = {
      {"qkv_768", 16384, 2304, 768},     {"proj_768", 16384, 768, 768},     {"fc_768", 16384, 3072, 768},
      {"fc2_768", 16384, 768, 3072},     {"lmhead_768", 16384, 50304, 768}, {"fc_1024", 16384, 4096, 1024},
      {"square_8192", 8192, 8192, 8192},
  };
  std::vector<std::string> args;
  for (const Shape& s : shapes) args.push_back(absl::StrCat(s.name, ":", s.M, ",", s.N, ",", s.K));
  auto peer = bench::RunPeer("gemm_peer.py", absl::StrJoin(args, " "));
  if (!peer.ok())
    std::printf("peer (torch.matmul): unavailable: %s\n", std::string(peer.status().message()).c_str());
  const std::map<std::string, double>* pm = peer.ok() ? &*peer : nullptr;
  std::printf("%-14s %7s %7s %7s %10s %9s %12s %10s\n", "shape", "M", "N", "K", "ms", "TFLOP/s", "vs torch",
              "of 790");
  for (const Shape& s : shapes) {
    testing::DeviceBuffer x(bench::RandomUniform(s.M * s.K, 1), DType::kBF16);
    testing::DeviceBuffer w(bench::RandomUniform(s.N * s.K, 2, 0.05f), DType::kBF16);
    testing::DeviceBuffer y(s.M * s.N, DType::kBF16);
    MatmulParams p = LinearParams(s.M, s.K, s.N, x.get(), w.get(), nullptr, y.get());
    p.dtype = DType::kBF16;
    bool ok = true;
    const double ms = bench::MedianMs(ctx.stream, [&] { ok = ok && cuda::Matmul(ctx, p).ok(); });
    if (!ok) {
      std::printf("%-14s failed\n", s.name);
      continue;
    }
    const double tflops = 2.0 * s.M * s.N * s.K / (ms * 1e-3) / 1e12;
    std::printf("%-14s %7ld %7ld %7ld %10.3f %9.1f %12s %9.0f%%\n", s.name, static_cast<long>(s.M),
                static_cast<long>(s.N), static_cast<long>(s.K), ms, tflops,
                bench::Ratio(pm, s.name, ms).c_str(), 100.0 * tflops / 790.0);
  }
  return 0;
}

}  // namespace
}  // namespace lmf::kernels::cuda

int main() { return lmf::kernels::cuda::Main(); }
