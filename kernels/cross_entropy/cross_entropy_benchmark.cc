// Cross-entropy benchmark at GPT-2's LM-head shape (V = 50257 padded to 50304, N = B*T = 256 and 1024 rows):
// the fused forward that also writes the gradient in place (one read of the logits) against the forward
// followed by CrossEntropyBackward (two reads), same run, same threads. Prints ms and the ratio.
//
//   ./bazelw run //kernels/cross_entropy:cross_entropy_benchmark -- [--threads=N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "base/flags.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/timing.h"

ABSL_FLAG(int64_t, threads, 0, "threads; 0: LMF_NUM_THREADS, else all cores");

namespace lmf::kernels {
namespace {

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "The fused cross-entropy forward (gradient in place) against forward + backward at GPT-2's LM head.");
  FlagsOptions flags;
  flags.checks = {InRange(FLAGS_threads, 0, ThreadPool::kMaxThreads)};
  ParseFlags(argc, argv, flags);
  const int threads = absl::GetFlag(FLAGS_threads) > 0 ? static_cast<int>(absl::GetFlag(FLAGS_threads))
                                                       : ThreadPool::Default().num_threads();
  ThreadPool pool(threads);
  Context ctx = Context::Cpu(&pool);
  const int64_t V = 50257, stride = 50304;
  std::printf("threads %d, V=%ld (row stride %ld)\n", threads, static_cast<long>(V), static_cast<long>(stride));
  std::printf("%6s  %14s %16s  %s  %s\n", "rows", "fused ms", "fwd+bwd ms", "ratio", "fused GB/s read");
  for (int64_t N : {256, 1024}) {
    const auto logits = testing::RandomNormal(N * stride, 1, 2.0f);
    const auto targets = testing::RandomInts(N, static_cast<int32_t>(V), 2);
    std::vector<float> work(logits.size()), grad(logits.size()), losses(N), lse(N);
    CrossEntropyParams p;
    p.N = N, p.V = V, p.row_stride = stride, p.targets = targets.data(), p.losses = losses.data(), p.lse = lse.data();
    p.dloss = 1.0f / static_cast<float>(N);
    // The fused pass overwrites its input, so each timed call first restores the logits (timed separately
    // and subtracted).
    const double copy = Time([&] { std::copy(logits.begin(), logits.end(), work.begin()); }, 5);
    const double fused = Time([&] {
      std::copy(logits.begin(), logits.end(), work.begin());
      CrossEntropyParams q = p;
      q.logits = work.data(), q.dlogits = work.data();
      CrossEntropyForward(ctx, q);
    }, 5) - copy;
    const double separate = Time([&] {
      CrossEntropyParams q = p;
      q.logits = logits.data();
      CrossEntropyForward(ctx, q);
      q.dlogits = grad.data();
      CrossEntropyBackward(ctx, q);
    }, 5);
    std::printf("%6ld  %14.2f %16.2f  %.2fx  %.1f\n", static_cast<long>(N), fused * 1e3, separate * 1e3, separate / fused,
                N * stride * 4.0 / fused * 1e-9);
  }
  return 0;
}

}  // namespace
}  // namespace lmf::kernels

int main(int argc, char** argv) { return lmf::kernels::Main(argc, argv); }
