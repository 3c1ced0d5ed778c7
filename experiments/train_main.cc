// `train`: trains a model from an experiment config.
//
//   ./bazelw run //experiments:train -- --config=experiments/configs/tiny.textproto
//       [--set=optimizer.lr=3e-4 ...] [--resume] [--stop_after=STEP]
//
// Relative paths (the config, data files, run.output_dir) are taken from the folder the command was
// started in. --resume continues from the newest good checkpoint of run.output_dir; --stop_after ends the
// process right after that step, as a kill would (to try resuming). Ctrl-C or SIGTERM finish the current
// step and write a checkpoint first. Exit status: 0 done, 1 error, 2 usage, 3 stopped on a NaN/Inf, 4
// stopped by a signal (checkpoint written; continue with --resume).
//
// Under Slurm, `srun --ntasks=P train ... --set=run.parallel.data=P` trains data-parallel with no launcher:
// each task is rank SLURM_PROCID of the group the step's tasks form (distributed/slurm_task.h), on
// SLURM_CPUS_PER_TASK threads (LMF_NUM_THREADS, if set, wins). Likewise the processes that a launcher
// starts with torchrun's variables (`bazel run //distributed:launch -- --nproc_per_node=P -- train ...`, or
// torchrun itself) or that `mpirun -np P -x MASTER_ADDR -x MASTER_PORT train ...` starts are the ranks of one
// group, meeting through a TCP store at MASTER_ADDR:MASTER_PORT (distributed/launched_rank.h). With
// run.device=CUDA each rank trains on GPU LOCAL_RANK (SLURM_LOCALID) modulo the GPUs it sees, its NCCL group
// meeting through the same store (experiments/trainer/device_group.h).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/flags.h"
#include "config/loader.h"
#include "config/parallel_layout.h"
#include "distributed/launched_rank.h"
#include "distributed/launcher.h"
#include "distributed/slurm_task.h"
#include "experiments/trainer/data_parallel.h"
#include "experiments/trainer/trainer.h"

ABSL_FLAG(std::string, config, "",
          "an experiment textproto (experiments/configs/; fields in config/)");
ABSL_FLAG(lmf::RepeatedString, set, {},
          "overrides a field, e.g. --set=optimizer.lr=3e-4; one field per --set, repeatable");
ABSL_FLAG(bool, resume, false,
          "continue run.output_dir from its newest good checkpoint (bit-identical); without it a folder that "
          "holds a run is refused");
ABSL_FLAG(int64_t, stop_after, 0,
          "end right after this step, as a kill would (to try --resume); 0: run to the end");

namespace lmf::experiments {
namespace {

constexpr char kUsage[] =
    "Trains a model from an experiment config.\n"
    "usage: train --config=FILE [--set=field.path=value ...] [--resume] [--stop_after=STEP]\n"

    "Ctrl-C or SIGTERM finish the current step and write a checkpoint. Exit status: 0 done, 1 error,\n"
    "2 usage, 3 stopped on a NaN/Inf loss, 4 stopped by a signal (continue with --resume).";

// A process's place in a group that a launcher started: each process is one rank of the run's layout, so
// their count must be run.parallel's data x pipeline x expert. Sets every rank's thread count (the
// optimizer splits its work by it) before any pool is made: LMF_NUM_THREADS if set, else `threads`.
absl::Status PrepareRank(const config::Experiment& experiment, int world_size, const std::string& started,
                         int threads) {
  const config::RunConfig& run = experiment.run();
  if (const int ranks = config::ProcessCount(run.parallel()); ranks != world_size) {
    if (ranks == run.parallel().data()) {
      return absl::InvalidArgumentError(absl::StrCat(
          started, " but run.parallel.data=", run.parallel().data(),
          ": each is one data-parallel rank; set --set=run.parallel.data=", world_size));
    }
    return absl::InvalidArgumentError(absl::StrCat(started, " but ", config::LayoutFields(run.parallel()), " is ",
                                                   ranks, " ranks: each process is one rank"));
  }
  if (std::getenv("LMF_NUM_THREADS") == nullptr) ::setenv("LMF_NUM_THREADS", std::to_string(threads).c_str(), 1);
  return MakeDirs(run.output_dir());
}

constexpr std::chrono::seconds kConnectTimeout{120};  // a launcher starts the ranks together

// Joins the group of the srun step this process is a task of, as rank SLURM_PROCID of the run's layout.
absl::StatusOr<std::unique_ptr<distributed::GlooGroup>> JoinSrunStep(const distributed::SlurmTask& task,
                                                                     const config::Experiment& experiment) {
  const int threads = task.cpus_per_task > 0
                          ? task.cpus_per_task
                          : distributed::ThreadsPerRank((task.world_size + task.nodes - 1) / task.nodes);
  if (absl::Status s = PrepareRank(experiment, task.world_size, absl::StrCat("srun started ", task.world_size, " tasks"),
                                   threads);
      !s.ok()) {
    return s;
  }
  const config::RunConfig& run = experiment.run();
  return distributed::JoinSlurmStep(task, run.output_dir(), std::chrono::seconds(run.parallel().timeout_seconds()),
                                    kConnectTimeout);
}

// Joins the group of the ranks that //distributed:launch (or torchrun, or mpirun) started, as rank RANK of
// the run's layout; null for a world of one.
absl::StatusOr<std::unique_ptr<distributed::GlooGroup>> JoinLaunchedRanks(const distributed::LaunchedRank& rank,
                                                                          const config::Experiment& experiment) {
  const std::string started =
      rank.launcher == "mpirun"
          ? absl::StrCat("mpirun started ", rank.world_size, " processes (OMPI_COMM_WORLD_SIZE=", rank.world_size, ")")
          : absl::StrCat("the launcher started ", rank.world_size, " processes (WORLD_SIZE=", rank.world_size, ")");
  if (absl::Status s = PrepareRank(experiment, rank.world_size, started,
                                   distributed::ThreadsPerRank(rank.local_world_size));
      !s.ok()) {
    return s;
  }
  if (rank.world_size == 1) return std::unique_ptr<distributed::GlooGroup>();
  return distributed::JoinLaunchedGroup(rank, std::chrono::seconds(experiment.run().parallel().timeout_seconds()),
                                        kConnectTimeout);
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  FlagsOptions flags;
  flags.usage_exit_code = 2;
  flags.checks = {AtLeast(FLAGS_stop_after, 0)};
  ParseFlags(argc, argv, flags);
  if (!FlagGiven(FLAGS_config)) {
    PrintUsageError("--config=FILE (the experiment to train) is required");
    return 2;
  }
  const std::string config_arg = absl::GetFlag(FLAGS_config);
  absl::StatusOr<std::string> text = ReadFile(UserPath(config_arg));
  if (!text.ok()) {
    std::fprintf(stderr, "train: %s\n", std::string(text.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<config::Experiment> experiment =
      config::LoadExperimentText(*text, config_arg, absl::GetFlag(FLAGS_set).values);
  if (!experiment.ok()) {
    std::fprintf(stderr, "%s\n", std::string(experiment.status().message()).c_str());
    return 1;
  }
  config::MakePathsAbsolute(UserWorkingDirectory(), &*experiment);
  TrainOptions options;
  options.resume = absl::GetFlag(FLAGS_resume);
  options.checkpoint_on_signal = true;
  options.stop_after_step = absl::GetFlag(FLAGS_stop_after);
  // A launcher's variables (RANK and WORLD_SIZE, or mpirun's) win over Slurm's: a launcher under srun.
  absl::StatusOr<std::optional<distributed::LaunchedRank>> launched = distributed::LaunchedRankFromEnvironment();
  absl::StatusOr<std::optional<distributed::SlurmTask>> slurm = distributed::SlurmTaskFromEnvironment();
  if (!launched.ok() || !slurm.ok()) {
    std::fprintf(stderr, "train: %s\n", std::string((!launched.ok() ? launched.status() : slurm.status()).message()).c_str());
    return 1;
  }
  if (launched->has_value()) *slurm = std::nullopt;
  std::unique_ptr<distributed::GlooGroup> group;
  if (launched->has_value() || slurm->has_value()) {
    absl::StatusOr<std::unique_ptr<distributed::GlooGroup>> joined =
        launched->has_value() ? JoinLaunchedRanks(**launched, *experiment) : JoinSrunStep(**slurm, *experiment);
    if (!joined.ok()) {
      std::fprintf(stderr, "train: %s\n", std::string(joined.status().message()).c_str());
      return 1;
    }
    group = *std::move(joined);
    options.collectives = group.get();
    // A CUDA run's NCCL group meets where this group met; each rank's GPU is its local rank's.
    if (launched->has_value()) {
      options.store = {"", launched->value().master_addr, launched->value().master_port};
      options.local_rank = launched->value().local_rank;
    } else {
      options.store = {distributed::SlurmStepRendezvous(**slurm, experiment->run().output_dir()), "", 0};
      options.local_rank = slurm->value().local_rank;
    }
  }
  absl::StatusOr<TrainResult> result = Train(*experiment, options);
  if (group != nullptr && slurm->has_value()) {
    group.reset();
    // The step's rendezvous folder, which no rank reads once the group is up.
    if (slurm->value().rank == 0) {
      std::error_code ignored;
      std::filesystem::remove_all(distributed::SlurmStepRendezvous(**slurm, experiment->run().output_dir()), ignored);
    }
  }
  if (!result.ok()) {
    std::fprintf(stderr, "train: %s\n", std::string(result.status().message()).c_str());
    if (result.status().code() == absl::StatusCode::kAborted) return 3;
    return result.status().code() == absl::StatusCode::kCancelled ? 4 : 1;
  }
  std::fprintf(stderr, "train: %lld steps, last loss %.4f%s; run folder %s\n",
               static_cast<long long>(result->steps), result->last_loss,
               result->last_val_loss.has_value() ? absl::StrCat(", val loss ", *result->last_val_loss).c_str() : "",
               experiment->run().output_dir().c_str());
  return 0;
}

}  // namespace
}  // namespace lmf::experiments

int main(int argc, char** argv) {
  // A data-parallel run's other ranks are this binary again (experiments/trainer/data_parallel.h).
  if (lmf::experiments::IsDataParallelWorker()) return lmf::experiments::DataParallelWorkerMain();
  return lmf::experiments::Main(argc, argv);
}
