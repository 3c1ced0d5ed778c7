// Lab (nothing depends on it): the GEMMs of one mixtral_like expert (512 rows, C 512, F 1792) on the CPU, each
// run (a) as the layer runs it, one GEMM at a time panelled over 2 threads, and (b) as two experts at once,
// one whole GEMM per thread, to see which is faster on small row counts. GF/s are the pair's FLOPs over the
// best wall time, and (robust to other load on the machine) 2 x the FLOPs per CPU-second of the process: what
// two idle cores would give if no thread ever waited.
//   ./bazelw run //lab/moe_cpu:expert_gemm_lab
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/matmul/matmul.h"
#include "kernels/testing/timing.h"

namespace lmf::kernels {
namespace {

struct Gemm {
  const char* name;
  bool ta, tb;
  int64_t M, N, K;
};

std::vector<float> Random(int64_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Best CPU seconds of the process over `reps` calls of f after a warm-up.
template <typename F>
double CpuTime(F&& f, int reps) {
  f();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = ProcessCpuSeconds();
    f();
    best = std::min(best, ProcessCpuSeconds() - t0);
  }
  return best;
}

MatmulParams Params(const Gemm& g, const float* a, const float* b, float* c) {
  MatmulParams p;
  p.M = g.M, p.N = g.N, p.K = g.K, p.trans_a = g.ta, p.trans_b = g.tb;
  p.a = a, p.lda = g.ta ? g.M : g.K, p.b = b, p.ldb = g.tb ? g.K : g.N, p.c = c, p.ldc = g.N;
  return p;
}

int Main() {
  const int64_t m = 512, c = 512, f = 1792;
  const std::vector<Gemm> gemms = {
      {"fwd w13: x (m,C) w13^T (C,2F)", false, true, m, 2 * f, c},
      {"fwd w2: act (m,F) w2^T (F,C)", false, true, m, c, f},
      {"bwd w2 dX: dy (m,C) w2 (C,F)", false, false, m, f, c},
      {"bwd w2 dW: dy^T (C,m) act (m,F)", true, false, c, f, m},
      {"bwd w13 dX: dpre (m,2F) w13 (2F,C)", false, false, m, c, 2 * f},
      {"bwd w13 dW: dpre^T (2F,m) x (m,C)", true, false, 2 * f, c, m},
  };
  ThreadPool pool2(2), pool1a(1), pool1b(1);
  const Context two = Context::Cpu(&pool2), one_a = Context::Cpu(&pool1a), one_b = Context::Cpu(&pool1b);
  std::printf("%-38s %22s %22s\n", "GEMM (x2 experts), GF/s", "panelled wall / CPU", "1/thread wall / CPU");
  for (const Gemm& g : gemms) {
    std::vector<float> a0 = Random(g.M * g.K), b0 = Random(g.K * g.N), c0(g.M * g.N);
    std::vector<float> a1 = Random(g.M * g.K), b1 = Random(g.K * g.N), c1(g.M * g.N);
    const double flops = 2 * 2.0 * g.M * g.N * g.K;
    const auto panelled = [&] {
      Matmul(two, Params(g, a0.data(), b0.data(), c0.data()));
      Matmul(two, Params(g, a1.data(), b1.data(), c1.data()));
    };
    const auto concurrent = [&] {
      std::thread other([&] { Matmul(one_b, Params(g, a1.data(), b1.data(), c1.data())); });
      Matmul(one_a, Params(g, a0.data(), b0.data(), c0.data()));
      other.join();
    };
    std::printf("%-38s %10.1f / %9.1f %10.1f / %9.1f\n", g.name, flops / Time(panelled, 7) / 1e9,
                2 * flops / CpuTime(panelled, 7) / 1e9, flops / Time(concurrent, 7) / 1e9,
                2 * flops / CpuTime(concurrent, 7) / 1e9);
  }
  return 0;
}

}  // namespace
}  // namespace lmf::kernels

int main() { return lmf::kernels::Main(); }
