// Grouped GEMM benchmark (bf16 in, fp32 accumulate): TFLOP/s of the mixture of experts' expert GEMMs through
// kernels/grouped_matmul's two CUDA kernels, tensor cores (mma.sync) and scalar, against the per-expert
// cuBLASLt GEMMs it replaces (kernels/matmul, one call per non-empty expert, host offsets), all in the same
// run on the same buffers, and against the ~790 TFLOP/s measured bf16 peak of an H200. Each shape is E
// experts over R routed rows (tokens x top-k) split unevenly (expert e gets a share proportional to
// 1 + (7 e mod E), a fixed imbalance), in the three passes of the experts' Linear:
//   fwd    y_g (rows_g, N) = x_g (rows_g, K) w_g^T     (bf16 out)
//   dgrad  dx_g (rows_g, K) = dy_g w_g                 (bf16 out)
//   wgrad  dw_g (N, K) += dy_g^T x_g                   (fp32 out, accumulated)
//
//   grouped_matmul_cuda_benchmark (needs a CUDA device; part of the GPU bundle)
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/usage.h"
#include "base/flags.h"
#include "kernels/cuda/bench_util.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/grouped_matmul/grouped_matmul.h"
#include "kernels/matmul/matmul.h"

namespace lmf::kernels::cuda {
namespace {

using testing::DeviceBuffer;

struct Shape {
  const char* name;
  int64_t E, R, K, N;  // E experts, R routed rows, w (E N, K)
};

constexpr const char* kPasses[] = {"fwd", "dgrad", "wgrad"};

// Offsets (E + 1) of R rows over E experts, expert e's share proportional to 1 + (7 e mod E).
std::vector<int32_t> UnevenOffsets(int64_t experts, int64_t rows) {
  std::vector<int64_t> weight(experts);
  int64_t total = 0;
  for (int64_t e = 0; e < experts; ++e) total += weight[e] = 1 + (7 * e) % experts;
  std::vector<int32_t> offsets(experts + 1, 0);
  int64_t cumulative = 0;
  for (int64_t e = 0; e < experts; ++e) {
    cumulative += weight[e];
    offsets[e + 1] = static_cast<int32_t>(rows * cumulative / total);
  }
  return offsets;
}

// The buffers of one shape: bf16 x, w, dy, y, dx; fp32 dw; offsets on the device and on the host.
struct Buffers {
  explicit Buffers(const Shape& s)
      : host_offsets(UnevenOffsets(s.E, s.R)),
        offsets(DeviceBuffer::Ints(host_offsets)),
        x(bench::RandomUniform(s.R * s.K, 1), DType::kBF16),
        w(bench::RandomUniform(s.E * s.N * s.K, 2, 0.05f), DType::kBF16),
        dy(bench::RandomUniform(s.R * s.N, 3), DType::kBF16),
        y(s.R * s.N, DType::kBF16),
        dx(s.R * s.K, DType::kBF16),
        dw(std::vector<float>(s.E * s.N * s.K, 0.0f), DType::kF32) {}
  std::vector<int32_t> host_offsets;
  DeviceBuffer offsets, x, w, dy, y, dx, dw;
};

// One pass through the grouped GEMM with `kernel`.
absl::Status RunGrouped(const Context& ctx, const Shape& s, Buffers& b, const char* pass,
                        GroupedMatmulKernel kernel) {
  if (pass == kPasses[0]) {
    return GroupedMatmulWithKernel(
        ctx,
        {DType::kBF16, s.E, s.R, s.K, s.N, b.offsets.as<int32_t>(), b.x.get(), b.w.get(), nullptr, b.y.get()},
        kernel);
  }
  GroupedMatmulBackwardParams p{DType::kBF16, s.E,       s.R,       s.K, s.N, b.offsets.as<int32_t>(),
                                b.x.get(),    b.w.get(), b.dy.get()};
  if (pass == kPasses[1]) p.dx = b.dx.get();
  if (pass == kPasses[2]) p.dw = b.dw.as<float>();
  return GroupedMatmulBackwardWithKernel(ctx, p, kernel);
}

// One pass as per-expert cuBLASLt GEMMs (kernels/matmul), skipping empty experts.
absl::Status RunPerExpert(const Context& ctx, const Shape& s, Buffers& b, const char* pass) {
  const auto* x = b.x.as<const uint16_t>();
  const auto* w = b.w.as<const uint16_t>();
  const auto* dy = b.dy.as<const uint16_t>();
  for (int64_t e = 0; e < s.E; ++e) {
    const int64_t first = b.host_offsets[e], rows = b.host_offsets[e + 1] - first;
    if (rows == 0) continue;
    MatmulParams p = LinearParams(rows, s.K, s.N, x + first * s.K, w + e * s.N * s.K, nullptr,
                                  b.y.as<uint16_t>() + first * s.N);
    p.dtype = DType::kBF16;
    if (pass == kPasses[0]) {
      LMF_RETURN_IF_ERROR_STATUS(cuda::Matmul(ctx, p));
      continue;
    }
    MatmulBackwardParams bp;
    bp.forward = p, bp.dc = dy + first * s.N;
    if (pass == kPasses[1]) bp.da = b.dx.as<uint16_t>() + first * s.K;
    if (pass == kPasses[2]) bp.db = b.dw.as<float>() + e * s.N * s.K;
    LMF_RETURN_IF_ERROR_STATUS(cuda::MatmulBackward(ctx, bp));
  }
  return absl::OkStatus();
}

// Median ms of fn (which returns a status), or a negative value when it failed.
double TimeMs(const Context& ctx, const std::function<absl::Status()>& fn) {
  bool ok = true;
  const double ms = bench::MedianMs(ctx.stream, [&] { ok = ok && fn().ok(); });
  return ok ? ms : -1.0;
}

void PrintRow(const Shape& s, const char* pass, double mma_ms, double scalar_ms, double cublas_ms) {
  const double flop = 2.0 * s.R * s.N * s.K;
  const auto tflops = [&](double ms) { return ms > 0 ? flop / (ms * 1e-3) / 1e12 : 0.0; };
  const auto ratio = [](double a, double b) { return a > 0 && b > 0 ? a / b : 0.0; };
  std::printf("%-10s %-5s %4ld %6ld %5ld %5ld %8.3f %8.1f %6.0f%% %8.3f %8.1f %8.3f %8.1f %9.2fx %9.2fx\n",
              s.name, pass, static_cast<long>(s.E), static_cast<long>(s.R), static_cast<long>(s.K),
              static_cast<long>(s.N), mma_ms, tflops(mma_ms), 100.0 * tflops(mma_ms) / 790.0, scalar_ms,
              tflops(scalar_ms), cublas_ms, tflops(cublas_ms), ratio(scalar_ms, mma_ms),
              ratio(cublas_ms, mma_ms));
}

int Main() {
  int exit_code = 0;
  const std::unique_ptr<CudaContext> cc = bench::OpenDevice("grouped_matmul_cuda_benchmark", &exit_code);
  if (cc == nullptr) return exit_code;
  const Context ctx = cc->context();
  // 16384 tokens, top-2: a GPT-2-350M-sized MoE's fc and fc2 (8 experts), and a fine-grained one (64).
  const std::vector<Shape> shapes = {
      {"fc_e8", 8, 32768, 1024, 4096},
      {"fc2_e8", 8, 32768, 4096, 1024},
      {"fc_e64", 64, 32768, 1024, 512},
  };
  std::printf("%-10s %-5s %4s %6s %5s %5s %8s %8s %7s %8s %8s %8s %8s %10s %10s\n", "shape", "pass", "E", "R",
              "K", "N", "mma ms", "TFLOP/s", "of 790", "scal ms", "TFLOP/s", "cublas ms", "TFLOP/s",
              "scal/mma", "cublas/mma");
  int failures = 0;
  for (const Shape& s : shapes) {
    Buffers b(s);
    for (const char* pass : kPasses) {
      const double mma_ms =
          TimeMs(ctx, [&] { return RunGrouped(ctx, s, b, pass, GroupedMatmulKernel::kTensorCore); });
      const double scalar_ms =
          TimeMs(ctx, [&] { return RunGrouped(ctx, s, b, pass, GroupedMatmulKernel::kScalar); });
      const double cublas_ms = TimeMs(ctx, [&] { return RunPerExpert(ctx, s, b, pass); });
      failures += (mma_ms < 0) + (scalar_ms < 0) + (cublas_ms < 0);
      PrintRow(s, pass, mma_ms, scalar_ms, cublas_ms);
    }
  }
  std::printf(
      "mma: the tensor-core grouped kernel; scal: the scalar grouped kernel; cublas: one cuBLASLt GEMM per\n"
      "non-empty expert (host offsets); x/mma: how much faster the tensor-core kernel ran (a failed run\n"
      "shows 0)\n");
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace lmf::kernels::cuda

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "bf16 grouped GEMM TFLOP/s (tensor-core and scalar kernels) for MoE expert shapes against per-expert "
      "cuBLASLt GEMMs; takes no flags.");
  lmf::ParseFlags(argc, argv);
  return lmf::kernels::cuda::Main();
}
