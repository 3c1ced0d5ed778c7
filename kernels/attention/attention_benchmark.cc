// Attention benchmark: the tiled (online-softmax) forward against the plain reference forward, and the
// backward, at GPT-2-small head shapes (NH=12, HS=64, causal) for B=4, T=64/256/1024, same run, same
// threads. Prints ms per call, achieved GFLOP/s (causal FLOPs: 2 * B*NH*T*T*HS per forward) and the ratio.
// Then small heads, the shapes of the quickstart's models (HS=8) and of small CPU sweeps (HS=16, 32): forward
// and backward ms and GFLOP/s. Then PyTorch's attention on the same shapes, threads and run
// (tools/kernels/attention_cpu_peer.py, forward and autograd backward) in each peer of
// kernels/testing/torch_peers.h (the current PyTorch eager fp32, torch.compile and bf16 autocast; Debian's
// 1.13), each peer's time and its time over ours. Then the two backward schedules (AttentionBackwardSchedule)
// for batch 1 with one kv head.
//
//   ./bazelw run //kernels/attention:attention_benchmark -- [--threads=N] [--section=gpt2|small|schedules]
//       [--no_torch] [--torch_python=PY] [--torch_modes=eager,compile,bf16] [--debian_python=PY]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/flags.h"
#include "kernels/attention/attention.h"
#include "kernels/cpu/isa.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/torch_peers.h"
#include "kernels/testing/timing.h"

ABSL_FLAG(int64_t, threads, 0, "threads for ours and PyTorch's; 0: LMF_NUM_THREADS, else all cores");
ABSL_FLAG(std::string, section, "", "one table only: gpt2, small or schedules; none: all");
ABSL_FLAG(bool, no_torch, false, "skip PyTorch's timings");

namespace lmf::kernels {
namespace {

struct Shape {
  std::string label;
  int64_t B, T, NH, NKV, HS;
  // The peer script's argument: causal self-attention of this shape (the script runs NKV = NH only).
  std::string PeerArg() const { return absl::StrCat(label, ":", B, ",", T, ",", NH, ",", HS, ",1"); }
};

// Random causal self-attention inputs of one shape, with its outputs and gradients.
struct Problem {
  explicit Problem(const Shape& s)
      : q(testing::RandomNormal(s.B * s.T * s.NH * s.HS, 1)),
        k(testing::RandomNormal(s.B * s.T * s.NKV * s.HS, 2)),
        v(testing::RandomNormal(k.size(), 3)),
        dout(testing::RandomNormal(q.size(), 4)),
        out(q.size()),
        lse(s.B * s.NH * s.T),
        dq(q.size()),
        dk(k.size()),
        dv(k.size()),
        p(ContiguousAttentionParams(s.B, s.T, s.T, s.NH, s.NKV, s.HS, true, q.data(), k.data(), v.data(),
                                    out.data(), lse.data())) {}
  // Needs out and lse: a forward first.
  void Backward(const Context& ctx,
                AttentionBackwardSchedule schedule = AttentionBackwardSchedule::kAuto) const {
    AttentionBackward(ctx, {p, dout.data(), dq.data(), dk.data(), dv.data(), schedule});
  }
  std::vector<float> q, k, v, dout;
  mutable std::vector<float> out, lse, dq, dk, dv;
  AttentionParams p;
};

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "CPU attention, tiled against the reference forward and the backward, beside PyTorch's, at GPT-2 and "
      "small "
      "head shapes; then the two backward schedules.");
  FlagsOptions flags;
  flags.usage_exit_code = 2;
  flags.checks = {InRange(FLAGS_threads, 0, ThreadPool::kMaxThreads),
                  {"section", "gpt2, small or schedules", [] {
                     const std::string s = absl::GetFlag(FLAGS_section);
                     return s.empty() || s == "gpt2" || s == "small" || s == "schedules";
                   }}};
  ParseFlags(argc, argv, flags);
  const bool torch = !absl::GetFlag(FLAGS_no_torch);
  const int threads = absl::GetFlag(FLAGS_threads) > 0 ? static_cast<int>(absl::GetFlag(FLAGS_threads))
                                                       : ThreadPool::Default().num_threads();
  ThreadPool pool(threads);
  Context ctx = Context::Cpu(&pool);
  const std::string only = absl::GetFlag(FLAGS_section);
  auto want = [&](const char* section) { return only.empty() || only == section; };
  const int64_t NH = 12, HS = 64;
  const std::vector<Shape> gpt2 = {{"gpt2_t64", 4, 64, NH, NH, HS},
                                   {"gpt2_t256", 4, 256, NH, NH, HS},
                                   {"gpt2_t1024", 4, 1024, NH, NH, HS}};
  // The quickstart's models (d_model 16..72 in heads of 8, 64 tokens, 16 sequences) and small CPU models.
  const std::vector<Shape> small = {{"s16_64_9_8", 16, 64, 9, 9, 8},
                                    {"s16_64_4_16", 16, 64, 4, 4, 16},
                                    {"s16_128_8_16", 16, 128, 8, 8, 16},
                                    {"s16_128_8_32", 16, 128, 8, 8, 32},
                                    {"s8_256_6_32", 8, 256, 6, 6, 32}};

  // The peer runs first, on its own, over every shape of the tables asked for.
  std::vector<std::string> peer_args = {std::to_string(threads)};
  for (const auto* shapes : {want("gpt2") ? &gpt2 : nullptr, want("small") ? &small : nullptr}) {
    if (shapes == nullptr) continue;
    for (const Shape& s : *shapes) peer_args.push_back(s.PeerArg());
  }
  std::vector<testing::TorchPeerRun> peers;
  if (torch && peer_args.size() > 1) {
    absl::StatusOr<std::vector<testing::TorchPeerSpec>> specs = testing::TorchPeerSpecsFromFlags();
    if (!specs.ok()) {
      std::fprintf(stderr, "attention_benchmark: %s\n", std::string(specs.status().message()).c_str());
      return 2;
    }
    peers = testing::RunTorchPeers(*specs, "attention_cpu_peer.py", absl::StrJoin(peer_args, " "), threads);
  }
  std::printf("threads %d; small GEMM tiles: %s (LMF_CPU_ISA, kernels/cpu/isa.h)\n", threads, vec::IsaName());
  std::vector<std::pair<std::string, double>> ours_ms;  // for the peer table

  if (want("gpt2")) {
    std::printf("\ncausal, NH=12, NKV=12, HS=64\n%5s %5s  %12s %12s %8s  %12s %10s\n", "B", "T",
                "tiled fwd ms", "plain fwd ms", "plain/tiled", "backward ms", "fwd GF/s");
    for (const Shape& s : gpt2) {
      Problem pr(s);
      const double flops = 2.0 * s.B * s.NH * s.T * s.T * s.HS;  // QK^T and PV, half of each under the mask
      const int reps = std::max(3, static_cast<int>(2e9 / flops));
      pr.p.algorithm = AttentionAlgorithm::kTiled;
      const double tiled = Time([&] { AttentionForward(ctx, pr.p); }, reps);
      const double backward = Time([&] { pr.Backward(ctx); }, reps);
      pr.p.algorithm = AttentionAlgorithm::kPlain;
      const double plain = Time([&] { AttentionForward(ctx, pr.p); }, reps);
      std::printf("%5ld %5ld  %12.2f %12.2f %8.2fx  %12.2f %10.1f\n", static_cast<long>(s.B),
                  static_cast<long>(s.T), tiled * 1e3, plain * 1e3, plain / tiled, backward * 1e3,
                  flops / tiled * 1e-9);
      ours_ms.emplace_back(s.label + "_fwd", tiled * 1e3);
      ours_ms.emplace_back(s.label + "_bwd", backward * 1e3);
    }
  }
  if (want("small")) {
    std::printf("\nsmall heads, causal\n%5s %5s %4s %4s  %10s %10s  %12s %10s\n", "B", "T", "NH", "HS",
                "fwd ms", "fwd GF/s", "backward ms", "bwd GF/s");
    for (const Shape& s : small) {
      Problem pr(s);
      const double flops = 2.0 * s.B * s.NH * s.T * s.T * s.HS;  // causal: half of QK^T and PV
      const int reps = std::max(5, static_cast<int>(5e8 / flops));
      const double fwd = Time([&] { AttentionForward(ctx, pr.p); }, reps);
      const double bwd = Time([&] { pr.Backward(ctx); }, reps);
      std::printf("%5ld %5ld %4ld %4ld  %10.3f %10.1f  %12.3f %10.1f\n", static_cast<long>(s.B),
                  static_cast<long>(s.T), static_cast<long>(s.NH), static_cast<long>(s.HS), fwd * 1e3,
                  flops / fwd * 1e-9, bwd * 1e3, 2.5 * flops / bwd * 1e-9);
      ours_ms.emplace_back(s.label + "_fwd", fwd * 1e3);
      ours_ms.emplace_back(s.label + "_bwd", bwd * 1e3);
    }
  }
  if (!peers.empty()) {
    std::printf("\nPyTorch, same shapes, threads and run (ours: tiled forward; vs: the peer's time over ours)\n%s",
                testing::FormatPeerTable(peers, ours_ms).c_str());
  }
  // Few (batch, kv head) pairs: batch 1, MQA. The two backward schedules, same run.
  if (want("schedules")) {
    std::printf("\nbackward schedules, B=1, NH=12, NKV=1 (MQA), HS=64, causal\n%5s  %14s %18s  %s\n", "T",
                "per-kv-head ms", "keys-then-queries", "ratio");
    for (int64_t T : {256, 1024}) {
      Problem pr(Shape{"mqa", 1, T, NH, 1, HS});
      AttentionForward(ctx, pr.p);
      auto run = [&](AttentionBackwardSchedule schedule) {
        return Time([&] { pr.Backward(ctx, schedule); }, 3);
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
