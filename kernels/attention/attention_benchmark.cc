// Attention benchmark: the tiled (online-softmax) forward against the plain reference forward, and the
// backward, at GPT-2-small head shapes (NH=12, HS=64, causal) for B=4, T=64/256/1024, same run, same
// threads. Prints ms per call, achieved GFLOP/s (causal FLOPs: 2 * B*NH*T*T*HS per forward) and the ratio.
// Then the two backward schedules (AttentionBackwardSchedule) for batch 1 with one kv head.
//
//   ./bazelw run //kernels/attention:attention_benchmark -- [threads]
#include <chrono>
#include <cstdio>
#include <cstdlib>
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
  std::printf("threads %d; causal, NH=12, NKV=12, HS=64\n", threads);
  std::printf("%5s %5s  %12s %12s %8s  %12s %10s\n", "B", "T", "tiled fwd ms", "plain fwd ms", "plain/tiled", "backward ms",
              "fwd GF/s");
  const int64_t NH = 12, HS = 64;
  for (int64_t T : {64, 256, 1024}) {
    const int64_t B = 4;
    auto q = testing::RandomNormal(B * T * NH * HS, 1), k = testing::RandomNormal(B * T * NH * HS, 2);
    auto v = testing::RandomNormal(B * T * NH * HS, 3), dout = testing::RandomNormal(B * T * NH * HS, 4);
    std::vector<float> out(q.size()), lse(B * NH * T), dq(q.size()), dk(q.size()), dv(q.size());
    AttentionParams p = ContiguousAttentionParams(B, T, T, NH, NH, HS, true, q.data(), k.data(), v.data(), out.data(), lse.data());
    const double flops = 2.0 * B * NH * T * T * HS;  // QK^T and PV, half of each under the causal mask
    const int reps = std::max(3, static_cast<int>(2e9 / flops));
    p.algorithm = AttentionAlgorithm::kTiled;
    const double tiled = Time([&] { AttentionForward(ctx, p); }, reps);
    const double backward = Time([&] { AttentionBackward(ctx, {p, dout.data(), dq.data(), dk.data(), dv.data()}); }, reps);
    p.algorithm = AttentionAlgorithm::kPlain;
    const double plain = Time([&] { AttentionForward(ctx, p); }, reps);
    std::printf("%5ld %5ld  %12.2f %12.2f %8.2fx  %12.2f %10.1f\n", static_cast<long>(B), static_cast<long>(T), tiled * 1e3,
                plain * 1e3, plain / tiled, backward * 1e3, flops / tiled * 1e-9);
  }
  // Few (batch, kv head) pairs: batch 1, MQA. The two backward schedules, same run.
  std::printf("\nbackward schedules, B=1, NH=12, NKV=1 (MQA), HS=64, causal\n%5s  %14s %18s  %s\n", "T", "per-kv-head ms",
              "keys-then-queries", "ratio");
  for (int64_t T : {256, 1024}) {
    const int64_t B = 1, NKV = 1;
    auto q = testing::RandomNormal(B * T * NH * HS, 1), k = testing::RandomNormal(B * T * NKV * HS, 2);
    auto v = testing::RandomNormal(B * T * NKV * HS, 3), dout = testing::RandomNormal(B * T * NH * HS, 4);
    std::vector<float> out(q.size()), lse(B * NH * T), dq(q.size()), dk(k.size()), dv(v.size());
    AttentionParams p = ContiguousAttentionParams(B, T, T, NH, NKV, HS, true, q.data(), k.data(), v.data(), out.data(), lse.data());
    AttentionForward(ctx, p);
    auto run = [&](AttentionBackwardSchedule schedule) {
      return Time([&] { AttentionBackward(ctx, {p, dout.data(), dq.data(), dk.data(), dv.data(), schedule}); }, 3);
    };
    const double per_kv = run(AttentionBackwardSchedule::kPerKvHead);
    const double split = run(AttentionBackwardSchedule::kKeysThenQueries);
    std::printf("%5ld  %14.2f %18.2f  %.2fx\n", static_cast<long>(T), per_kv * 1e3, split * 1e3, per_kv / split);
  }
  return 0;
}

}  // namespace
}  // namespace lmf::kernels

int main(int argc, char** argv) { return lmf::kernels::Main(argc, argv); }
