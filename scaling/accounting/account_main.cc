// `./bazelw run //scaling:account -- --config=FILE [--set=path=value ...] [--tokens_per_second=X]
// [--peak_flops=Y]` prints the parameter, FLOP, memory and arithmetic-intensity table of an experiment.
#include <cstdio>
#include <string>
#include <thread>
#include <utility>

#include "base/file.h"
#include "config/loader.h"
#include "experiments/cli_args.h"
#include "kernels/cpu/peak_flops.h"
#include "scaling/accounting/account.h"

constexpr char kUsage[] =
    "usage: account --config=EXPERIMENT.textproto [--set=path=value ...] [--tokens_per_second=X]"
    " [--peak_flops=Y]\n";

int main(int argc, char** argv) {
  auto args = lmf::experiments::CliArgs::Parse(argc, argv, {"config", "set", "tokens_per_second", "peak_flops", "help"});
  if (lmf::experiments::PrintHelpIfAsked(args, kUsage)) return 0;
  if (!args.ok()) {
    std::fprintf(stderr, "account: %s\n", std::string(args.status().message()).c_str());
    return 2;
  }
  if (!args->Has("config")) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  auto experiment =
      lmf::config::LoadExperiment(lmf::UserPath(args->Get("config")), args->GetAll("set"));
  if (!experiment.ok()) {
    std::fprintf(stderr, "account: %s\n", std::string(experiment.status().message()).c_str());
    return 1;
  }
  auto tps = args->GetDouble("tokens_per_second", 0);
  auto peak = args->GetDouble("peak_flops", 0);
  if (!tps.ok() || !peak.ok()) {
    std::fprintf(stderr, "account: %s\n", std::string((!tps.ok() ? tps : peak).status().message()).c_str());
    return 2;
  }
  for (const auto& [name, value] :
       {std::pair<const char*, double>{"tokens_per_second", *tps}, {"peak_flops", *peak}}) {
    if (args->Has(name) && !(value > 0)) {  // 0 or negative would be ignored (0 means "not given")
      std::fprintf(stderr, "account: --%s=%s: expected a positive number\n", name, args->Get(name).c_str());
      return 2;
    }
  }
  auto account = lmf::scaling::AccountExperiment(*experiment);
  if (!account.ok()) {
    std::fprintf(stderr, "account: %s\n", std::string(account.status().message()).c_str());
    return 1;
  }
  // Without --peak_flops: run.peak_flops, else, for a CPU run, the measured FMA peak of this machine's
  // threads (the trainer's too). A GPU run's peak depends on the GPU, which this command does not open.
  const bool gpu = experiment->run().device() == lmf::config::RunConfig::CUDA;
  if (*tps > 0 && !(*peak > 0) && !(experiment->run().peak_flops() > 0) && gpu) {
    std::fprintf(
        stderr,
        "account: --tokens_per_second of a run.device=CUDA config needs --peak_flops (or run.peak_flops): "
        "the GPU's dense peak, e.g. 989.4e12 for an H100/H200 SXM in bf16\n");
    return 2;
  }
  double peak_flops = *peak > 0 ? *peak : experiment->run().peak_flops();
  if (!(peak_flops > 0)) {
    const int threads = static_cast<int>(std::thread::hardware_concurrency());
    peak_flops = lmf::kernels::CpuFmaPeak(threads).flops_per_second;  // kernels/cpu/peak_flops.h
  }
  std::fputs(lmf::scaling::FormatAccount(*account, *tps, peak_flops).c_str(), stdout);
  return 0;
}
