// `./bazelw run //scaling:account -- --config=FILE [--set=path=value ...] [--tokens_per_second=X]
// [--peak_flops=Y]` prints the parameter, FLOP, memory and arithmetic-intensity table of an experiment.
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "base/file.h"
#include "base/flags.h"
#include "config/loader.h"
#include "kernels/cpu/peak_flops.h"
#include "scaling/accounting/account.h"

ABSL_FLAG(std::string, config, "", "the experiment textproto");
ABSL_FLAG(lmf::RepeatedString, set, {}, "overrides a field, e.g. --set=model.n_layers=4; repeatable");
ABSL_FLAG(double, tokens_per_second, 0, "a measured throughput, for the time and MFU columns; 0: none");
ABSL_FLAG(double, peak_flops, 0,
          "the device's peak FLOP/s for MFU; 0: run.peak_flops, else this CPU's measured FMA peak");

namespace {

// A given --tokens_per_second or --peak_flops must be a positive number (0 or less would be ignored: 0 means
// "not given").
lmf::FlagCheck Positive(const absl::Flag<double>& flag) {
  return {std::string(absl::GetFlagReflectionHandle(flag).Name()), "a positive number", [&flag] {
            const double value = absl::GetFlag(flag);
            return std::isfinite(value) && value > 0;
          }};
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Prints the parameter, FLOP, memory and arithmetic-intensity table of an experiment.\n"
      "usage: account --config=EXPERIMENT.textproto [--set=path=value ...] [--tokens_per_second=X] "
      "[--peak_flops=Y]");
  lmf::FlagsOptions flags;
  flags.usage_exit_code = 2;
  flags.checks = {Positive(FLAGS_tokens_per_second), Positive(FLAGS_peak_flops)};
  lmf::ParseFlags(argc, argv, flags);
  if (!lmf::FlagGiven(FLAGS_config)) {
    lmf::PrintUsageError("--config=EXPERIMENT.textproto is required");
    return 2;
  }
  auto experiment = lmf::config::LoadExperiment(lmf::UserPath(absl::GetFlag(FLAGS_config)),
                                                     absl::GetFlag(FLAGS_set).values);
  if (!experiment.ok()) {
    std::fprintf(stderr, "account: %s\n", std::string(experiment.status().message()).c_str());
    return 1;
  }
  const double tps = absl::GetFlag(FLAGS_tokens_per_second), peak = absl::GetFlag(FLAGS_peak_flops);
  auto account = lmf::scaling::AccountExperiment(*experiment);
  if (!account.ok()) {
    std::fprintf(stderr, "account: %s\n", std::string(account.status().message()).c_str());
    return 1;
  }
  // Without --peak_flops: run.peak_flops, else, for a CPU run, the measured FMA peak of this machine's
  // threads (the trainer's too). A GPU run's peak depends on the GPU, which this command does not open.
  const bool gpu = experiment->run().device() == lmf::config::RunConfig::CUDA;
  if (tps > 0 && !(peak > 0) && !(experiment->run().peak_flops() > 0) && gpu) {
    std::fprintf(
        stderr,
        "account: --tokens_per_second of a run.device=CUDA config needs --peak_flops (or run.peak_flops): "
        "the GPU's dense peak, e.g. 989.4e12 for an H100/H200 SXM in bf16\n");
    return 2;
  }
  double peak_flops = peak > 0 ? peak : experiment->run().peak_flops();
  if (!(peak_flops > 0)) {
    const int threads = static_cast<int>(std::thread::hardware_concurrency());
    peak_flops = lmf::kernels::CpuFmaPeak(threads).flops_per_second;  // kernels/cpu/peak_flops.h
  }
  std::fputs(lmf::scaling::FormatAccount(*account, tps, peak_flops).c_str(), stdout);
  return 0;
}
