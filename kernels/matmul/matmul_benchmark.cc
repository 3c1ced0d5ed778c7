// Matmul benchmark: our Matmul (oneDNN dnnl_sgemm per panel on our pool) against oneDNN's own OpenMP
// threading and OpenBLAS cblas_sgemm, same shapes, same thread count, same run, for the GEMMs of a
// GPT-2-small training step (B=4, T=64 and 256; forward, dX and dW shapes) plus a 2048^3 square product (the
// peak reference). Prints GFLOP/s of both and the ratio.
//
//   ./bazelw run //kernels/matmul:matmul_benchmark -- [--threads=N]   (default: LMF_NUM_THREADS or all cores)
// OpenBLAS runs with whatever OPENBLAS_CORETYPE the environment sets (printed).
#include <cblas.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "base/flags.h"
#include "dnnl.h"
#include "kernels/matmul/matmul.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/timing.h"

ABSL_FLAG(int64_t, threads, 0, "threads for every side; 0: LMF_NUM_THREADS, else all cores");

namespace lmf::kernels {
namespace {

struct Shape {
  const char* name;
  int64_t M, N, K;
  bool trans_a, trans_b;
};

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "GFLOP/s of our Matmul against oneDNN's OpenMP threading and OpenBLAS on GPT-2-small training GEMMs.");
  FlagsOptions flags;
  flags.checks = {InRange(FLAGS_threads, 0, ThreadPool::kMaxThreads)};
  ParseFlags(argc, argv, flags);
  const int threads = absl::GetFlag(FLAGS_threads) > 0 ? static_cast<int>(absl::GetFlag(FLAGS_threads))
                                                       : ThreadPool::Default().num_threads();
  ThreadPool pool(threads);
  Context ctx = Context::Cpu(&pool);
  openblas_set_num_threads(threads);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("threads %d, OPENBLAS_CORETYPE=%s (OpenBLAS core %s)\n", threads, coretype ? coretype : "(unset)",
              openblas_get_corename());
  const Shape shapes[] = {
      {"square 2048^3", 2048, 2048, 2048, false, false},
      {"T64 qkv fwd", 256, 2304, 768, false, true},
      {"T64 mlp up fwd", 256, 3072, 768, false, true},
      {"T64 mlp down fwd", 256, 768, 3072, false, true},
      {"T64 mlp up dX", 256, 768, 3072, false, false},
      {"T64 mlp up dW", 3072, 768, 256, true, false},
      {"T64 lm head fwd", 256, 50304, 768, false, true},
      {"T64 lm head dX", 256, 768, 50304, false, false},
      {"T64 lm head dW", 50304, 768, 256, true, false},
      {"T256 qkv fwd", 1024, 2304, 768, false, true},
      {"T256 mlp up fwd", 1024, 3072, 768, false, true},
      {"T256 mlp up dW", 3072, 768, 1024, true, false},
      {"T256 lm head fwd", 1024, 50304, 768, false, true},
      {"T256 lm head dW", 50304, 768, 1024, true, false},
      {"6L-384 qkv fwd", 1024, 1152, 384, false, true},
  };
  std::printf("ours = Matmul (oneDNN sequential per panel, panels over our pool); oneDNN-omp = dnnl_sgemm with its\n"
              "own OpenMP team of the same size; OpenBLAS = cblas_sgemm. GFLOP/s, best of several runs.\n");
  std::printf("%-18s %6s %6s %6s  %10s %10s %10s  %s\n", "shape", "M", "N", "K", "ours", "oneDNN-omp", "OpenBLAS",
              "ours/OpenBLAS");
  for (const Shape& s : shapes) {
    const int64_t lda = s.trans_a ? s.M : s.K, ldb = s.trans_b ? s.K : s.N;
    auto a = testing::RandomNormal(s.M * s.K, 1), b = testing::RandomNormal(s.K * s.N, 2);
    std::vector<float> c1(s.M * s.N), c2(s.M * s.N);
    MatmulParams p;
    p.M = s.M, p.N = s.N, p.K = s.K, p.a = a.data(), p.lda = lda, p.trans_a = s.trans_a;
    p.b = b.data(), p.ldb = ldb, p.trans_b = s.trans_b, p.c = c1.data(), p.ldc = s.N;
    const double flops = 2.0 * s.M * s.N * s.K;
    const int reps = std::max(3, static_cast<int>(3e10 / flops));
    const double ours = Time([&] { Matmul(ctx, p); }, reps);
    const double blas = Time([&] {
      cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans, s.M,
                  s.N, s.K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c2.data(), s.N);
    }, reps);
    std::vector<float> c3(s.M * s.N);
    omp_set_num_threads(threads);
    const double omp = Time([&] {
      dnnl_sgemm(s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N', s.M, s.N, s.K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                 c3.data(), s.N);
    }, reps);
    omp_set_num_threads(1);
    const auto err = testing::CompareArrays(c1.data(), c2.data(), s.M * s.N, 1e-4, 1e-3);
    std::printf("%-18s %6ld %6ld %6ld  %10.1f %10.1f %10.1f  %.2fx%s\n", s.name, static_cast<long>(s.M),
                static_cast<long>(s.N), static_cast<long>(s.K), flops / ours * 1e-9, flops / omp * 1e-9,
                flops / blas * 1e-9, blas / ours,
                err.violations ? "  RESULTS DIFFER" : "");
  }
  return 0;
}

}  // namespace
}  // namespace lmf::kernels

int main(int argc, char** argv) { return lmf::kernels::Main(argc, argv); }
