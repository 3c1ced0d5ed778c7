// Attention benchmark: the tiled (online-softmax) forward against the plain reference forward, and the
// backward, at GPT-2-small head shapes (NH=12, HS=64, causal) for B=4, T=64/256/1024, same run, same
// threads. Prints ms per call, achieved GFLOP/s (causal FLOPs: 2 * B*NH*T*T*HS per forward) and the ratio.
// Then small heads, the shapes of the quickstart's models (HS=8) and of small CPU sweeps (HS=16, 32): forward
// and backward ms and GFLOP/s. Then the two backward schedules (AttentionBackwardSchedule) for batch 1 with
// one kv head.
//
//   ./bazelw run //kernels/attention:attention_benchmark -- [threads] [gpt2|small|schedules (default: all)]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/timing.h"

namespace lmf::kernels {
namespace {

int Main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : ThreadPool::Default().num_threads();
  ThreadPool pool(threads);
  Context ctx = Context::Cpu(&pool);
  const std::string only = argc > 2 ? argv[2] : "";
  auto want = [&](const char* section) { return only.empty() || only == section; };
  const int64_t NH = 12, HS = 64;
  if (want("gpt2")) {
    std::printf("threads %d; causal, NH=12, NKV=12, HS=64\n", threads);
    std::printf("%5s %5s  %12s %12s %8s  %12s %10s\n", "B", "T", "tiled fwd ms", "plain fwd ms",
                "plain/tiled", "backward ms", "fwd GF/s");
    for (int64_t T : {64, 256, 1024}) {
      const int64_t B = 4;
      auto q = testing::RandomNormal(B * T * NH * HS, 1), k = testing::RandomNormal(B * T * NH * HS, 2);
      auto v = testing::RandomNormal(B * T * NH * HS, 3), dout = testing::RandomNormal(B * T * NH * HS, 4);
      std::vector<float> out(q.size()), lse(B * NH * T), dq(q.size()), dk(q.size()), dv(q.size());
      AttentionParams p = ContiguousAttentionParams(B, T, T, NH, NH, HS, true, q.data(), k.data(), v.data(),
                                                    out.data(), lse.data());
      const double flops = 2.0 * B * NH * T * T * HS;  // QK^T and PV, half of each under the causal mask
      const int reps = std::max(3, static_cast<int>(2e9 / flops));
      p.algorithm = AttentionAlgorithm::kTiled;
      const double tiled = Time([&] { AttentionForward(ctx, p); }, reps);
      const double backward = Time(
          [&] {
            AttentionBackward(ctx, {p, dout.data(), dq.data(), dk.data(), dv.data()});
          },
          reps);
      p.algorithm = AttentionAlgorithm::kPlain;
      const double plain = Time([&] { AttentionForward(ctx, p); }, reps);
      std::printf("%5ld %5ld  %12.2f %12.2f %8.2fx  %12.2f %10.1f\n", static_cast<long>(B),
                  static_cast<long>(T), tiled * 1e3, plain * 1e3, plain / tiled, backward * 1e3,
                  flops / tiled * 1e-9);
    }
  }
  // Small heads: the quickstart's models (d_model 16..72 in heads of 8, 64 tokens, 16 sequences) and small
  // CPU models.
  if (want("small")) {
    std::printf("\nsmall heads, causal\n%5s %5s %4s %4s  %10s %10s  %12s %10s\n", "B", "T", "NH", "HS",
                "fwd ms", "fwd GF/s", "backward ms", "bwd GF/s");
    struct SmallShape {
      int64_t B, T, NH, HS;
    };
    for (const SmallShape& sh :
         {SmallShape{16, 64, 9, 8}, SmallShape{16, 64, 4, 16}, SmallShape{16, 128, 8, 16},
          SmallShape{16, 128, 8, 32}, SmallShape{8, 256, 6, 32}}) {
      const int64_t n = sh.B * sh.T * sh.NH * sh.HS;
      auto q = testing::RandomNormal(n, 1), k = testing::RandomNormal(n, 2), v = testing::RandomNormal(n, 3);
      auto dout = testing::RandomNormal(n, 4);
      std::vector<float> out(n), lse(sh.B * sh.NH * sh.T), dq(n), dk(n), dv(n);
      AttentionParams p = ContiguousAttentionParams(sh.B, sh.T, sh.T, sh.NH, sh.NH, sh.HS, true, q.data(),
                                                    k.data(), v.data(), out.data(), lse.data());
      const double flops = 2.0 * sh.B * sh.NH * sh.T * sh.T * sh.HS;  // causal: half of QK^T and PV
      const int reps = std::max(5, static_cast<int>(5e8 / flops));
      const double fwd = Time([&] { AttentionForward(ctx, p); }, reps);
      const double bwd = Time(
          [&] {
            AttentionBackward(ctx, {p, dout.data(), dq.data(), dk.data(), dv.data()});
          },
          reps);
      std::printf("%5ld %5ld %4ld %4ld  %10.3f %10.1f  %12.3f %10.1f\n", static_cast<long>(sh.B),
                  static_cast<long>(sh.T), static_cast<long>(sh.NH), static_cast<long>(sh.HS), fwd * 1e3,
                  flops / fwd * 1e-9, bwd * 1e3, 2.5 * flops / bwd * 1e-9);
    }
  }
  // Few (batch, kv head) pairs: batch 1, MQA. The two backward schedules, same run.
  if (want("schedules")) {
    std::printf("\nbackward schedules, B=1, NH=12, NKV=1 (MQA), HS=64, causal\n%5s  %14s %18s  %s\n", "T",
                "per-kv-head ms", "keys-then-queries", "ratio");
    for (int64_t T : {256, 1024}) {
      const int64_t B = 1, NKV = 1;
      auto q = testing::RandomNormal(B * T * NH * HS, 1), k = testing::RandomNormal(B * T * NKV * HS, 2);
      auto v = testing::RandomNormal(B * T * NKV * HS, 3), dout = testing::RandomNormal(B * T * NH * HS, 4);
      std::vector<float> out(q.size()), lse(B * NH * T), dq(q.size()), dk(k.size()), dv(v.size());
      AttentionParams p = ContiguousAttentionParams(B, T, T, NH, NKV, HS, true, q.data(), k.data(), v.data(),
                                                    out.data(), lse.data());
      AttentionForward(ctx, p);
      auto run = [&](AttentionBackwardSchedule schedule) {
        return Time(
            [&] {
              AttentionBackward(ctx, {p, dout.data(), dq.data(), dk.data(), dv.data(), schedule});
            },
            3);
      };
      const double per_kv = run(AttentionBackwardSchedule::kPerKvHead);
      const double split = run(AttentionBackwardSchedule::kKeysThenQueries);
      std::printf("%5ld  %14.2f %18.2f  %.2fx\n", static_cast<long>(T), per_kv * 1e3, split * 1e3,
                  per_kv / split);
    }
  }
  return 0;
}

}  // namespace
}  // namespace lmf::kernels

int main(int argc, char** argv) { return lmf::kernels::Main(argc, argv); }
