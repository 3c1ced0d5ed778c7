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
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/flags.h"
#include "config/loader.h"
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
  absl::StatusOr<TrainResult> result = Train(*experiment, options);
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
