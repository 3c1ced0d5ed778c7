// Expert parallelism's exchange on Gloo over loopback: all-to-all bus bandwidth against message size (the
// NCCL-tests convention: busbw = bytes sent per rank / time * (p - 1) / p), and the time of one MoE layer's
// Dispatch + Combine for a routed batch. Ranks are forked processes on this machine.
//   bazel run -c opt //distributed/expert:all_to_all_benchmark -- --ranks=2
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "base/flags.h"
#include "distributed/expert/token_dispatch.h"
#include "distributed/test_ranks.h"

ABSL_FLAG(int, ranks, 2, "processes in the expert-parallel group");
ABSL_FLAG(int, iters, 20, "timed all-to-alls per size (after 3 untimed)");
ABSL_FLAG(int64_t, max_bytes, 4 << 20, "largest message per pair of ranks, in bytes");
ABSL_FLAG(int64_t, tokens, 4096, "tokens per rank for Dispatch + Combine");
ABSL_FLAG(int64_t, d_model, 256, "row width for Dispatch + Combine");
ABSL_FLAG(int, experts, 8, "experts (a multiple of --ranks)");
ABSL_FLAG(int, top_k, 2, "experts per token");

namespace lmf::distributed::expert {
namespace {

using Clock = std::chrono::steady_clock;

// The slowest rank's seconds per call of `op`.
double Time(Collectives& group, int iters, const std::function<absl::Status()>& op) {
  for (int i = 0; i < 3; ++i) op().IgnoreError();
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < iters; ++i) {
    if (absl::Status s = op(); !s.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", group.rank(), std::string(s.message()).c_str());
      return -1;
    }
  }
  double seconds = std::chrono::duration<double>(Clock::now() - start).count() / iters;
  group.AllReduce(Buffer::Host(&seconds, 1), ReduceOp::kMax).IgnoreError();
  return seconds;
}

int Benchmark(Collectives& group) {
  const int p = group.world_size(), iters = absl::GetFlag(FLAGS_iters);
  const bool lead = group.rank() == 0;
  if (lead) std::printf("all-to-all on %d Gloo processes (loopback)\n%12s %12s %12s\n", p, "bytes/pair", "us", "busbw GB/s");
  for (int64_t bytes = 1024; bytes <= absl::GetFlag(FLAGS_max_bytes); bytes *= 4) {
    const size_t floats = static_cast<size_t>(bytes / 4);
    std::vector<float> in(floats * p, 1.0f), out(floats * p);
    const std::vector<size_t> counts(p, floats);
    const double t = Time(group, iters, [&] {
      return group.AllToAll(Buffer::Host(in.data(), in.size()), counts, Buffer::Host(out.data(), out.size()), counts);
    });
    if (t < 0) return 1;
    const double busbw = static_cast<double>(bytes) * p / t * (p - 1) / p / 1e9;
    if (lead) std::printf("%12lld %12.1f %12.3f\n", static_cast<long long>(bytes), t * 1e6, busbw);
  }
  const int64_t n = absl::GetFlag(FLAGS_tokens), d = absl::GetFlag(FLAGS_d_model);
  const int experts = absl::GetFlag(FLAGS_experts), k = absl::GetFlag(FLAGS_top_k);
  std::mt19937_64 engine(group.rank());
  std::vector<int32_t> picks(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < k; ++j) picks[i * k + j] = static_cast<int32_t>((engine() % (experts / k)) * k + j);
  }
  std::vector<float> x(static_cast<size_t>(n * d), 0.5f), rows, combined(static_cast<size_t>(n * k * d));
  TokenDispatcher dispatcher(group, experts);
  const double t = Time(group, iters, [&]() -> absl::Status {
    absl::StatusOr<DispatchPlan> plan = dispatcher.Plan(picks.data(), n, k);
    if (!plan.ok()) return plan.status();
    if (absl::Status s = dispatcher.Dispatch(*plan, x.data(), d, &rows); !s.ok()) return s;
    return dispatcher.Combine(*plan, rows.data(), d, combined.data());
  });
  if (t < 0) return 1;
  if (lead) {
    std::printf("Plan + Dispatch + Combine, %lld tokens x %lld fp32 per rank, top-%d of %d experts: %.2f ms "
                "(%.0f tokens/s per rank)\n",
                static_cast<long long>(n), static_cast<long long>(d), k, experts, t * 1e3, n / t);
  }
  std::fflush(stdout);  // the harness ends each rank with _exit
  return 0;
}

}  // namespace
}  // namespace lmf::distributed::expert

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("All-to-all bandwidth and MoE token dispatch time on Gloo processes.");
  lmf::FlagsOptions options;
  options.checks = {lmf::AtLeast(FLAGS_ranks, 1), lmf::AtLeast(FLAGS_iters, 1), lmf::AtLeast(FLAGS_top_k, 1)};
  lmf::ParseFlags(argc, argv, options);
  if (absl::GetFlag(FLAGS_experts) % absl::GetFlag(FLAGS_ranks) != 0 ||
      absl::GetFlag(FLAGS_experts) % absl::GetFlag(FLAGS_top_k) != 0) {
    std::fprintf(stderr, "all_to_all_benchmark: --experts must be a multiple of --ranks and of --top_k\n");
    return 2;
  }
  lmf::distributed::testing::RankOptions rank_options;
  rank_options.deadline = std::chrono::seconds(600);
  const std::vector<lmf::distributed::testing::RankOutcome> outcomes =
      lmf::distributed::testing::RunRanks(absl::GetFlag(FLAGS_ranks), lmf::distributed::expert::Benchmark, rank_options);
  return lmf::distributed::testing::ExitCodeOf(outcomes);
}
