// GEMM benchmark (bf16 in, fp32 accumulate, cuBLASLt through kernels/matmul): TFLOP/s for the GPT-2-small /
// 350M training shapes (M = 16384 tokens) and 8192^3, each in the three passes of a Linear layer, against
// torch.matmul measured in the same run (tools/gpu_peers/gemm_peer.py) and against the ~790 TFLOP/s
// measured bf16 peak of an H200:
//   fwd    y (M, N) = x (M, K) W^T          (bf16 out)            torch: x @ W.t()
//   dgrad  dx (M, K) = dy (M, N) W           (bf16 out)            torch: dy @ W
//   wgrad  dW (N, K) += dy^T x               (fp32 out, accumulated: the fp32 master gradient)
//                                                                  torch: dy.t() @ x (bf16 out, as autocast)
// Each pass is timed with the heuristic's first algorithm (the default, PyTorch's choice) and autotuned
// (CudaContext::set_gemm_autotune: the fastest of up to 8 candidates), so "tuned/heur" says whether
// run.gemm_autotune pays on this GPU.
//
//   matmul_cuda_benchmark (needs a CUDA device; part of the GPU bundle)
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/flags.h"
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

constexpr const char* kPasses[] = {"fwd", "dgrad", "wgrad"};

int Main() {
  int exit_code = 0;
  const std::unique_ptr<CudaContext> cc = bench::OpenDevice("matmul_cuda_benchmark", &exit_code);
  if (cc == nullptr) return exit_code;
  const Context ctx = cc->context();
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
  std::printf("%-12s %-5s %6s %6s %6s %9s %8s %9s %7s %9s %10s\n", "shape", "pass", "M", "N", "K", "heur ms",
              "TFLOP/s", "vs torch", "of 790", "tuned ms", "tuned/heur");
  for (const Shape& s : shapes) {
    testing::DeviceBuffer x(bench::RandomUniform(s.M * s.K, 1), DType::kBF16);
    testing::DeviceBuffer w(bench::RandomUniform(s.N * s.K, 2, 0.05f), DType::kBF16);
    testing::DeviceBuffer y(bench::RandomUniform(s.M * s.N, 3), DType::kBF16);  // y, and dy for the backward
    testing::DeviceBuffer dx(s.M * s.K, DType::kBF16);
    testing::DeviceBuffer dw(std::vector<float>(s.N * s.K, 0.0f), DType::kF32);
    MatmulParams p = LinearParams(s.M, s.K, s.N, x.get(), w.get(), nullptr, y.get());
    p.dtype = DType::kBF16;
    for (const char* pass : kPasses) {
      const std::string label = pass == kPasses[0] ? s.name : absl::StrCat(s.name, "_", pass);
      MatmulBackwardParams bp;
      bp.forward = p, bp.dc = y.get();
      if (pass == kPasses[1]) bp.da = dx.get();
      if (pass == kPasses[2]) bp.db = dw.get();
      bool ok = true;
      const std::function<void()> run = [&] {
        ok = ok && (pass == kPasses[0] ? cuda::Matmul(ctx, p) : cuda::MatmulBackward(ctx, bp)).ok();
      };
      cc->set_gemm_autotune(false);
      const double heur_ms = bench::MedianMs(ctx.stream, run);
      cc->set_gemm_autotune(true);
      const double tuned_ms = bench::MedianMs(ctx.stream, run);
      cc->set_gemm_autotune(false);
      if (!ok) {
        std::printf("%-12s %-5s failed\n", s.name, pass);
        continue;
      }
      const double tflops = 2.0 * s.M * s.N * s.K / (heur_ms * 1e-3) / 1e12;
      std::printf("%-12s %-5s %6ld %6ld %6ld %9.3f %8.1f %9s %6.0f%% %9.3f %9.2fx\n", s.name, pass,
                  static_cast<long>(s.M), static_cast<long>(s.N), static_cast<long>(s.K), heur_ms, tflops,
                  bench::Ratio(pm, label, heur_ms).c_str(), 100.0 * tflops / 790.0, tuned_ms,
                  heur_ms / tuned_ms);
    }
  }
  std::printf("vs torch: torch.matmul's median ms over ours (heuristic); tuned/heur: how much faster the\n"
              "autotuned algorithm ran (run.gemm_autotune)\n");
  return 0;
}

}  // namespace
}  // namespace lmf::kernels::cuda

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "bf16 GEMM TFLOP/s (cuBLASLt, heuristic and autotuned) for GPT-2 training shapes against torch.matmul; "
      "takes no flags.");
  lmf::ParseFlags(argc, argv);
  return lmf::kernels::cuda::Main();
}
