// The pipeline schedule's dry run, in one process: builds the schedule a run would use, checks it, and
// prints each rank's timeline with unit costs and the bubble next to its closed form.
//   bazel run //distributed/pipeline:dry_run -- --schedule=1f1b --ranks=4 --micro_batches=8
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "distributed/pipeline/schedule.h"

ABSL_FLAG(std::string, schedule, "1f1b", "gpipe, 1f1b, interleaved_1f1b or zb_h1");
ABSL_FLAG(int, ranks, 4, "pipeline ranks (run.parallel.pipeline)");
ABSL_FLAG(int, virtual_stages, 1, "chunks per rank (interleaved_1f1b only)");
ABSL_FLAG(int, micro_batches, 8, "micro-batches per optimizer step (run.grad_accum_steps)");
ABSL_FLAG(double, forward, 1, "time of one stage's forward");
ABSL_FLAG(double, backward, 2, "time of one stage's backward (1F1B, GPipe, interleaved)");
ABSL_FLAG(double, backward_input, 1, "time of one stage's input gradient (zb_h1)");
ABSL_FLAG(double, backward_weight, 1, "time of one stage's weight gradient (zb_h1)");
ABSL_FLAG(bool, timeline, true, "print each rank's compute actions with their start times");

int main(int argc, char** argv) {
  namespace pp = lmf::distributed::pipeline;
  absl::SetProgramUsageMessage(
      "Builds a pipeline schedule, checks it (sends and receives matched, no deadlock) and prints its dry run.");
  lmf::FlagsOptions options;
  options.checks = {lmf::AtLeast(FLAGS_ranks, 1), lmf::AtLeast(FLAGS_virtual_stages, 1),
                    lmf::AtLeast(FLAGS_micro_batches, 1)};
  lmf::ParseFlags(argc, argv, options);
  absl::StatusOr<pp::ScheduleKind> kind = pp::ParseScheduleKind(absl::GetFlag(FLAGS_schedule));
  if (!kind.ok()) {
    std::fprintf(stderr, "dry_run: --schedule: %s\n", std::string(kind.status().message()).c_str());
    return 2;
  }
  const int p = absl::GetFlag(FLAGS_ranks), v = absl::GetFlag(FLAGS_virtual_stages);
  const int m = absl::GetFlag(FLAGS_micro_batches);
  absl::StatusOr<pp::Schedule> schedule = pp::MakeSchedule(*kind, p, v, m);
  if (!schedule.ok()) {
    std::fprintf(stderr, "dry_run: %s\n", std::string(schedule.status().message()).c_str());
    return 2;
  }
  pp::Costs costs;
  costs.forward = absl::GetFlag(FLAGS_forward);
  costs.backward = absl::GetFlag(FLAGS_backward);
  costs.backward_input = absl::GetFlag(FLAGS_backward_input);
  costs.backward_weight = absl::GetFlag(FLAGS_backward_weight);
  absl::StatusOr<pp::Simulation> sim = pp::Simulate(*schedule, costs);
  if (!sim.ok()) {
    std::fprintf(stderr, "dry_run: %s\n", std::string(sim.status().message()).c_str());
    return 1;
  }
  if (absl::GetFlag(FLAGS_timeline)) std::printf("%s", pp::Timeline(*schedule, *sim).c_str());
  std::printf("%s: %d ranks x %d chunks, %d micro-batches: makespan %g, bubble %.4f of the compute",
              pp::ScheduleKindName(*kind).c_str(), p, v, m, sim->makespan, sim->bubble_ratio());
  if (*kind != pp::ScheduleKind::kZeroBubbleH1) {
    std::printf(" (closed form (p-1)/(v m) = %.4f)", static_cast<double>(p - 1) / (v * m));
  }
  std::printf("\n");
  return 0;
}
