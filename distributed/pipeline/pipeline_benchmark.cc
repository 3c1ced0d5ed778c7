// The bubble of each pipeline schedule measured on CPU processes over Gloo, against its closed form:
// bubble = (wall time - compute time) / compute time per rank and step, averaged over ranks and steps
// (transfers count as bubble). One thread per rank by default, so 2 ranks fit a 2-core machine.
// Closed forms (free transfers): GPipe and 1F1B (p-1)/m, interleaved (p-1)/(v m) (Megatron); ZB-H1
// (p-1)(F+BI-BW) / (m (F+BI+BW)) (Qi et al., "Zero Bubble Pipeline Parallelism": a bubble of
// (p-1)(T_F + T_B - T_W) per rank), (p-1)/(3m) where F = BI = BW, a third of 1F1B's. The columns: that
// closed form at unit costs (F = BI = BW, B = 2F), the dry run at unit costs, and the closed form and the dry
// run at this run's measured F, B, BI and BW (averaged over ranks).
//   bazel run -c opt //distributed/pipeline:pipeline_benchmark -- --ranks=2 --micro_batches=8
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "base/flags.h"
#include "base/thread_pool.h"
#include "distributed/pipeline/pipeline_stage.h"
#include "distributed/test_ranks.h"
#include "kernels/core/context.h"

ABSL_FLAG(int, ranks, 2, "pipeline ranks (processes)");
ABSL_FLAG(int, threads, 1, "threads per rank");
ABSL_FLAG(int, micro_batches, 8, "micro-batches per step");
ABSL_FLAG(int, virtual_stages, 2, "chunks per rank for interleaved_1f1b");
ABSL_FLAG(int, steps, 4, "timed steps per schedule (after one untimed)");
ABSL_FLAG(int, layers, 8, "model layers");
ABSL_FLAG(int, d_model, 128, "model width");
ABSL_FLAG(int, batch, 4, "sequences per micro-batch");
ABSL_FLAG(int, context, 64, "tokens per sequence");

namespace lmf::distributed::pipeline {
namespace {

// The schedule's bubble over its compute with free transfers, per the papers' closed forms.
double ClosedForm(ScheduleKind kind, int p, int v, int m, const Costs& costs) {
  if (kind != ScheduleKind::kZeroBubbleH1) return static_cast<double>(p - 1) / (v * m);
  const double f = costs.forward, b = costs.backward_input, w = costs.backward_weight;
  return (p - 1) * (f + b - w) / (m * (f + b + w));
}

int Benchmark(Collectives& group) {
  const int p = group.world_size(), m = absl::GetFlag(FLAGS_micro_batches);
  const int64_t b = absl::GetFlag(FLAGS_batch), t = absl::GetFlag(FLAGS_context);
  ThreadPool pool(absl::GetFlag(FLAGS_threads));
  const model::ModelConfig config = model::Cs336Config(/*vocab_size=*/512, t, absl::GetFlag(FLAGS_d_model),
                                                       absl::GetFlag(FLAGS_layers), /*n_heads=*/4,
                                                       /*d_ff=*/absl::GetFlag(FLAGS_d_model) * 8 / 3);
  std::mt19937_64 engine(1);
  std::vector<std::vector<int32_t>> tokens(2 * m, std::vector<int32_t>(b * t));
  for (auto& v : tokens) {
    for (int32_t& id : v) id = static_cast<int32_t>(engine() % 512);
  }
  std::vector<MicroBatch> batches;
  for (int i = 0; i < m; ++i) batches.push_back({tokens[2 * i].data(), tokens[2 * i + 1].data()});
  if (group.rank() == 0) {
    std::printf("%d ranks x %d threads, %d micro-batches of %lld x %lld tokens, %d layers of width %d\n", p,
                absl::GetFlag(FLAGS_threads), m, static_cast<long long>(b), static_cast<long long>(t),
                static_cast<int>(config.n_layers), static_cast<int>(config.d_model));
    std::printf("%-22s %9s %8s %12s %8s %16s %16s\n", "schedule", "step ms", "bubble", "closed form", "dry run",
                "form (measured)", "dry (measured)");
  }
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleavedOneFOneB,
                            ScheduleKind::kZeroBubbleH1}) {
    const int v = kind == ScheduleKind::kInterleavedOneFOneB ? absl::GetFlag(FLAGS_virtual_stages) : 1;
    absl::StatusOr<Schedule> schedule = MakeSchedule(kind, p, v, m);
    if (!schedule.ok() || p * v > config.n_layers) {
      if (group.rank() == 0) std::printf("%-22s skipped: %s\n", ScheduleKindName(kind).c_str(),
                                         schedule.ok() ? "more stages than layers" : std::string(schedule.status().message()).c_str());
      continue;
    }
    std::vector<std::unique_ptr<model::LanguageModel>> owned;
    std::vector<model::LanguageModel*> chunks;
    for (int c = 0; c < v; ++c) {
      absl::StatusOr<std::unique_ptr<model::LanguageModel>> slice = model::LanguageModel::Create(
          config, kernels::Context::Cpu(&pool), kernels::DType::kF32,
          StageLayers(config.n_layers, schedule->num_stages(), schedule->stage(group.rank(), c)));
      if (!slice.ok()) return 1;
      (*slice)->InitializeParameters(1);
      chunks.push_back(slice->get());
      owned.push_back(*std::move(slice));
    }
    absl::StatusOr<PipelineStage> stage = PipelineStage::Create(group, *schedule, chunks);
    if (!stage.ok()) return 1;
    double wall = 0, busy = 0;
    for (int step = 0; step <= absl::GetFlag(FLAGS_steps); ++step) {
      if (!group.Barrier().ok()) return 1;
      const auto start = std::chrono::steady_clock::now();
      if (!stage->Run(batches, b, t).ok()) return 1;
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (step > 0) wall += seconds, busy += stage->compute_seconds();
    }
    const Costs last = stage->measured_costs();  // of the last step
    double sums[6] = {wall, busy, last.forward, last.backward, last.backward_input, last.backward_weight};
    if (!group.AllReduceSum(sums, 6).ok()) return 1;  // over ranks
    const double bubble = (sums[0] - sums[1]) / sums[1];
    Costs measured;
    measured.forward = sums[2] / p, measured.backward = sums[3] / p;
    measured.backward_input = sums[4] / p, measured.backward_weight = sums[5] / p;
    const absl::StatusOr<Simulation> dry = Simulate(*schedule);
    const absl::StatusOr<Simulation> dry_measured = Simulate(*schedule, measured);
    if (group.rank() == 0) {
      std::printf("%-22s %9.1f %8.3f %12.3f %8.3f %16.3f %16.3f\n",
                  (ScheduleKindName(kind) + (v > 1 ? " v=" + std::to_string(v) : "")).c_str(),
                  sums[0] / p / absl::GetFlag(FLAGS_steps) * 1e3, bubble, ClosedForm(kind, p, v, m, Costs{}),
                  dry.ok() ? dry->bubble_ratio() : -1.0, ClosedForm(kind, p, v, m, measured),
                  dry_measured.ok() ? dry_measured->bubble_ratio() : -1.0);
    }
  }
  std::fflush(stdout);  // the harness ends each rank with _exit
  return 0;
}

}  // namespace
}  // namespace lmf::distributed::pipeline

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Measured pipeline bubbles of GPipe, 1F1B, interleaved 1F1B and ZB-H1 on Gloo processes.");
  lmf::FlagsOptions options;
  options.checks = {lmf::AtLeast(FLAGS_ranks, 1),   lmf::AtLeast(FLAGS_threads, 1), lmf::AtLeast(FLAGS_micro_batches, 1),
                    lmf::AtLeast(FLAGS_steps, 1),   lmf::AtLeast(FLAGS_layers, 1),  lmf::AtLeast(FLAGS_d_model, 8),
                    lmf::AtLeast(FLAGS_batch, 1),   lmf::AtLeast(FLAGS_context, 1), lmf::AtLeast(FLAGS_virtual_stages, 1)};
  lmf::ParseFlags(argc, argv, options);
  lmf::distributed::testing::RankOptions rank_options;
  rank_options.deadline = std::chrono::seconds(900);
  rank_options.timeout = std::chrono::milliseconds(120000);
  const std::vector<lmf::distributed::testing::RankOutcome> outcomes = lmf::distributed::testing::RunRanks(
      absl::GetFlag(FLAGS_ranks), lmf::distributed::pipeline::Benchmark, rank_options);
  return lmf::distributed::testing::ExitCodeOf(outcomes);
}
