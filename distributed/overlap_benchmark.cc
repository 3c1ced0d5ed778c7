// How much of the data-parallel gradient sum the bucketed overlap hides behind the backward, on Gloo
// processes of this machine: the step time and the time each step still waits for the sums after its last
// backward, with one all-reduce after the backward and with the overlap, and the share hidden
// (1 - exposed with overlap / exposed without); first, the Gloo all-reduce's bus bandwidth against message
// size (the NCCL-tests convention: busbw = bytes / time * 2 (p - 1) / p). One thread per rank by default.
//   bazel run -c opt //distributed:overlap_benchmark -- --ranks=2
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "base/flags.h"
#include "base/thread_pool.h"
#include "distributed/data_parallel_step.h"
#include "distributed/step_testing.h"
#include "distributed/test_ranks.h"
#include "kernels/core/context.h"
#include "model/optimizer/adamw.h"

ABSL_FLAG(int, ranks, 2, "data-parallel processes");
ABSL_FLAG(int, threads, 1, "threads per rank");
ABSL_FLAG(int, steps, 5, "timed steps per mode (after one untimed)");
ABSL_FLAG(int, layers, 6, "model layers");
ABSL_FLAG(int, d_model, 256, "model width");
ABSL_FLAG(int, batch, 4, "sequences per micro-batch");
ABSL_FLAG(int, context, 64, "tokens per sequence");
ABSL_FLAG(int, iters, 20, "timed all-reduces per size (after 3 untimed)");
ABSL_FLAG(int64_t, max_bytes, 16 << 20, "largest all-reduce, in bytes");

namespace lmf::distributed {
namespace {

// The Gloo all-reduce (sum of fp32) from 1 KiB to --max_bytes: the slowest rank's time per call and the bus
// bandwidth. False when an all-reduce fails.
bool AllReduceBandwidth(Collectives& group) {
  const int p = group.world_size(), iters = absl::GetFlag(FLAGS_iters);
  if (group.rank() == 0) {
    std::printf("all-reduce (sum, fp32) on %d Gloo processes (loopback)\n%12s %12s %12s\n", p, "bytes", "us",
                "busbw GB/s");
  }
  for (int64_t bytes = 1024; bytes <= absl::GetFlag(FLAGS_max_bytes); bytes *= 4) {
    std::vector<float> data(static_cast<size_t>(bytes / 4), 1.0f);
    const auto sum = [&] { return group.AllReduce(Buffer::Host(data.data(), data.size()), ReduceOp::kSum); };
    for (int i = 0; i < 3; ++i) {
      if (!sum().ok()) return false;
    }
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      if (!sum().ok()) return false;
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
    if (!group.AllReduce(Buffer::Host(&seconds, 1), ReduceOp::kMax).ok()) return false;
    const double busbw = static_cast<double>(bytes) / seconds * 2 * (p - 1) / p / 1e9;
    if (group.rank() == 0) std::printf("%12lld %12.1f %12.3f\n", static_cast<long long>(bytes), seconds * 1e6, busbw);
  }
  return true;
}

int Benchmark(Collectives& group) {
  if (!AllReduceBandwidth(group)) return 1;
  ThreadPool pool(absl::GetFlag(FLAGS_threads));
  const int64_t b = absl::GetFlag(FLAGS_batch), t = absl::GetFlag(FLAGS_context);
  const model::ModelConfig c = model::Cs336Config(1024, t, absl::GetFlag(FLAGS_d_model), absl::GetFlag(FLAGS_layers), 4,
                                                  absl::GetFlag(FLAGS_d_model) * 8 / 3);
  absl::StatusOr<std::unique_ptr<model::LanguageModel>> m = model::LanguageModel::Create(c, kernels::Context::Cpu(&pool));
  if (!m.ok()) return 1;
  (*m)->InitializeParameters(1);
  model::AdamW adamw(model::AdamWConfig{}, **m);
  model::StepInput input;
  input.micro_batches = group.world_size();  // one per rank: the sums overlap its only backward
  input.b = b;
  input.t = t;
  input.lr = 1e-4;
  double results[2][2] = {};  // [overlap][step seconds, exposed seconds]
  for (int overlap = 0; overlap < 2; ++overlap) {
    DataParallelStep step(group, overlap == 1);
    testing::RandomBatches data(1024, b * t, 3);
    for (int i = 0; i <= absl::GetFlag(FLAGS_steps); ++i) {
      const auto start = std::chrono::steady_clock::now();
      if (!step.Step(**m, adamw, data, input).ok()) return 1;
      if (i == 0) continue;
      results[overlap][0] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      results[overlap][1] += step.exposed_reduce_seconds();
    }
  }
  if (!group.AllReduce(Buffer::Host(&results[0][0], 4), ReduceOp::kMax).ok()) return 1;
  if (group.rank() == 0) {
    const int steps = absl::GetFlag(FLAGS_steps);
    std::printf("%d ranks x %d threads, %lld parameters, %lld x %lld tokens per rank and step\n", group.world_size(),
                absl::GetFlag(FLAGS_threads), static_cast<long long>((*m)->parameter_count()),
                static_cast<long long>(b), static_cast<long long>(t));
    std::printf("%-28s %10s %12s\n", "gradient sums", "step ms", "exposed ms");
    std::printf("%-28s %10.1f %12.1f\n", "one all-reduce after", results[0][0] / steps * 1e3, results[0][1] / steps * 1e3);
    std::printf("%-28s %10.1f %12.1f\n", "buckets during the backward", results[1][0] / steps * 1e3,
                results[1][1] / steps * 1e3);
    std::printf("hidden behind the backward: %.0f%% of the sums' time\n", 100 * (1 - results[1][1] / results[0][1]));
  }
  std::fflush(stdout);  // the harness ends each rank with _exit
  return 0;
}

}  // namespace
}  // namespace lmf::distributed

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Gloo all-reduce bandwidth, and the share of the data-parallel gradient sum hidden behind the backward.");
  lmf::FlagsOptions options;
  options.checks = {lmf::AtLeast(FLAGS_ranks, 2), lmf::AtLeast(FLAGS_threads, 1), lmf::AtLeast(FLAGS_steps, 1),
                    lmf::AtLeast(FLAGS_layers, 1), lmf::AtLeast(FLAGS_d_model, 8), lmf::AtLeast(FLAGS_batch, 1),
                    lmf::AtLeast(FLAGS_context, 1), lmf::AtLeast(FLAGS_iters, 1),
                    lmf::AtLeast(FLAGS_max_bytes, int64_t{1024})};
  lmf::ParseFlags(argc, argv, options);
  lmf::distributed::testing::RankOptions rank_options;
  rank_options.deadline = std::chrono::seconds(900);
  const std::vector<lmf::distributed::testing::RankOutcome> outcomes =
      lmf::distributed::testing::RunRanks(absl::GetFlag(FLAGS_ranks), lmf::distributed::Benchmark, rank_options);
  return lmf::distributed::testing::ExitCodeOf(outcomes);
}
