// bf16 GEMM on the CPU: our bf16 Matmul (widen A and B to fp32, dnnl_sgemm per panel on our pool, round C;
// matmul_bf16_cpu.cc) against oneDNN's own bf16 matmul primitive (bf16 A, B, C; fp32 accumulation; its
// OpenMP team of the same size), and our fp32 Matmul as the reference, on GPT-2-small training GEMMs, same
// run. Prints the CPU's bf16 units, the implementation oneDNN picked, GFLOP/s and the largest difference
// between the two bf16 results (both round the same fp32 sums once, so only the sums' order separates them).
// This is the measurement behind matmul_bf16_cpu.cc's choice: a oneDNN bf16 path could pay only where the
// CPU has AVX512-BF16 or AMX (oneDNN's jit bf16 kernels); oneDNN 2.6 creates no bf16 matmul at all on a CPU
// without avx512_core (the row says "unavailable").
//
//   ./bazelw run -c opt //kernels/matmul:matmul_bf16_benchmark -- [--threads=N]
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "base/flags.h"
#include "base/thread_pool.h"
#include "dnnl.hpp"
#include "kernels/matmul/matmul.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/timing.h"

ABSL_FLAG(int64_t, threads, 0, "threads for every side; 0: LMF_NUM_THREADS, else all cores");

namespace lmf::kernels {
namespace {

struct Shape {
  const char* name;
  int64_t M, N, K;
  bool trans_b;
};

const char* Bf16Units() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("amx-bf16")) return "AMX-BF16 and AVX512-BF16";
  if (__builtin_cpu_supports("avx512bf16")) return "AVX512-BF16";
  return "none (no AVX512-BF16, no AMX): oneDNN has no jit bf16 GEMM for this CPU";
}

// oneDNN's bf16 matmul primitive for C (M, N) = A (M, K) op(B), all row-major, B (N, K) when trans_b.
struct OneDnnBf16 {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  dnnl::memory a, b, c;

  OneDnnBf16(const Shape& s, void* a_data, void* b_data, void* c_data) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc a_md({s.M, s.K}, dt::bf16, tag::ab);
    const dnnl::memory::desc b_md({s.K, s.N}, dt::bf16, s.trans_b ? tag::ba : tag::ab);
    const dnnl::memory::desc c_md({s.M, s.N}, dt::bf16, tag::ab);
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), engine);
    prim = dnnl::matmul(pd);
    a = dnnl::memory(a_md, engine, a_data), b = dnnl::memory(b_md, engine, b_data);
    c = dnnl::memory(c_md, engine, c_data);
  }
  void Run() {
    prim.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
  }
};

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage("GFLOP/s of our bf16 Matmul (widen + sgemm) against oneDNN's bf16 matmul primitive.");
  FlagsOptions flags;
  flags.checks = {InRange(FLAGS_threads, 0, ThreadPool::kMaxThreads)};
  ParseFlags(argc, argv, flags);
  const int threads = absl::GetFlag(FLAGS_threads) > 0 ? static_cast<int>(absl::GetFlag(FLAGS_threads))
                                                       : ThreadPool::Default().num_threads();
  ThreadPool pool(threads);
  const Context ctx = Context::Cpu(&pool);
  std::printf("threads %d; bf16 units: %s\n", threads, Bf16Units());
  const Shape shapes[] = {
      {"T64 qkv fwd", 256, 2304, 768, true},       {"T64 mlp up fwd", 256, 3072, 768, true},
      {"T64 mlp down fwd", 256, 768, 3072, true},  {"T64 mlp up dX", 256, 768, 3072, false},
      {"T256 qkv fwd", 1024, 2304, 768, true},     {"T256 mlp up fwd", 1024, 3072, 768, true},
  };
  std::printf("%-18s %6s %6s %6s  %10s %10s %12s  %-14s %s\n", "shape", "M", "N", "K", "ours fp32", "ours bf16",
              "oneDNN bf16", "oneDNN impl", "max |ours - oneDNN| / max |C|");
  for (const Shape& s : shapes) {
    const std::vector<uint16_t> a = testing::ToBF16(testing::RandomNormal(s.M * s.K, 1));
    const std::vector<uint16_t> b = testing::ToBF16(testing::RandomNormal(s.K * s.N, 2, 0.05f));
    const std::vector<float> af = testing::FromBF16(a), bf = testing::FromBF16(b);
    std::vector<uint16_t> c_ours(s.M * s.N), c_dnnl(s.M * s.N);
    std::vector<float> c_f32(s.M * s.N);
    MatmulParams p;
    p.M = s.M, p.N = s.N, p.K = s.K, p.lda = s.K, p.trans_b = s.trans_b, p.ldb = s.trans_b ? s.K : s.N, p.ldc = s.N;
    p.a = af.data(), p.b = bf.data(), p.c = c_f32.data();
    const double flops = 2.0 * s.M * s.N * s.K;
    const int reps = std::max(3, static_cast<int>(1e10 / flops));
    const double fp32 = Time([&] { Matmul(ctx, p); }, reps);
    MatmulParams q = p;
    q.dtype = DType::kBF16, q.a = a.data(), q.b = b.data(), q.c = c_ours.data();
    const double ours = Time([&] { Matmul(ctx, q); }, reps);
    std::printf("%-18s %6ld %6ld %6ld  %10.1f %10.1f", s.name, static_cast<long>(s.M), static_cast<long>(s.N),
                static_cast<long>(s.K), flops / fp32 * 1e-9, flops / ours * 1e-9);
    omp_set_num_threads(threads);
    try {
      OneDnnBf16 dnnl(s, const_cast<uint16_t*>(a.data()), const_cast<uint16_t*>(b.data()), c_dnnl.data());
      const double theirs = Time([&] { dnnl.Run(); }, std::max(1, reps / 4));
      const std::vector<float> x = testing::FromBF16(c_ours), y = testing::FromBF16(c_dnnl);
      double scale = 0;
      for (float v : x) scale = std::max(scale, static_cast<double>(std::fabs(v)));
      std::printf(" %12.1f  %-14s %.2e\n", flops / theirs * 1e-9, dnnl.pd.impl_info_str(),
                  testing::MaxAbsDiff(x, y) / scale);
    } catch (const dnnl::error& e) {  // oneDNN 2.6 has no bf16 matmul for a CPU without avx512_core
      std::printf(" %12s  unavailable on this CPU (oneDNN: %s)\n", "-", e.what());
    }
    omp_set_num_threads(1);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace lmf::kernels

int main(int argc, char** argv) { return lmf::kernels::Main(argc, argv); }
