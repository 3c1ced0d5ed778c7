// `./bazelw run //experiments:quickstart`: lmforge's main job on its built-in default. Generates a
// synthetic story corpus (or reads --data), trains a BPE tokenizer, tokenizes, runs a small IsoFLOP sweep
// on the CPU (about 3 minutes on 2 cores), fits scaling laws and writes a Markdown report, printing
// where each piece is. Started again, it skips what is already done.
//
//   --out=DIR            where everything goes (default: ./lmforge_quickstart in the folder you ran from)
//   --data=a.txt,b.txt   real text instead of the synthetic corpus
//   --data=debian-docs   real English from the documentation Debian installed under /usr/share/doc
//   --budgets=1e11,2.5e11,6e11,1.5e12  --models_per_budget=5  --vocab_size=512  --corpus_mb=12
//   --parallel_runs=2    --target_flops=1e15
//   --schedule=wsd       warmup-stable-decay runs, each model size's stable phase trained once for all its
//                        budgets (default: cosine; use another --out to keep both sweeps)
//   --recipe             batch size x learning rate grids at each budget and the gradient noise scale: the
//                        report's B_opt(C), lr_opt(C) and noise-scale figure (experiments/sweeps/)
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/flags.h"
#include "experiments/quickstart/debian_docs.h"
#include "experiments/quickstart/quickstart.h"
#include "experiments/sweep/train_run.h"
#include "experiments/trainer/data_parallel.h"

ABSL_FLAG(std::string, out, "lmforge_quickstart", "output folder (relative to where you ran the command)");
ABSL_FLAG(std::vector<std::string>, data, {},
          "text files to use instead of the synthetic corpus, or debian-docs: the plain-text documentation "
          "under /usr/share/doc (real English, at most --corpus_mb of it)");
ABSL_FLAG(double, corpus_mb, 12, "size of the synthetic corpus in MB");
ABSL_FLAG(uint64_t, seed, 1, "seed of the synthetic corpus and of every run");
ABSL_FLAG(int, vocab_size, 512, "BPE vocabulary size (256 bytes + <|endoftext|> + merges)");
ABSL_FLAG(std::vector<std::string>, budgets, std::vector<std::string>({"1e11", "2.5e11", "6e11", "1.5e12"}),
          "training FLOP budgets of the IsoFLOP curves");
ABSL_FLAG(int, models_per_budget, 5, "model sizes per budget (at least 3)");
ABSL_FLAG(int, parallel_runs, 2,
          "training processes at once (small models train faster side by side than on several threads each)");
ABSL_FLAG(double, target_flops, 1e15, "the budget the report extrapolates to");
ABSL_FLAG(std::string, schedule, "cosine",
          "the runs' learning-rate schedule: cosine, or wsd (warmup-stable-decay with shared stable phases)");
ABSL_FLAG(bool, recipe, false,
          "each budget's model nearest 20 tokens per parameter also trains a batch size x learning rate grid, "
          "and every run logs the gradient noise scale: the report fits B_opt(C) and lr_opt(C) (use another "
          "--out to keep both sweeps)");
ABSL_FLAG(bool, train_one, false, "internal: train the single sweep run given by --config");
ABSL_FLAG(std::string, config, "", "internal: the run config for --train_one");

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "quickstart: %s\n", message.c_str());
  return 1;
}


}  // namespace

int main(int argc, char** argv) {
  // A data-parallel run's other ranks are this binary again (experiments/trainer/data_parallel.h).
  if (lmf::experiments::IsDataParallelWorker()) return lmf::experiments::DataParallelWorkerMain();
  absl::SetProgramUsageMessage(
      "Text -> tokenizer -> IsoFLOP sweep -> fitted scaling law -> report, on the built-in synthetic corpus "
      "or --data.");
  lmf::ParseFlags(argc, argv);
  if (absl::GetFlag(FLAGS_train_one)) {
    const absl::Status s = lmf::sweep::TrainSweepRun(absl::GetFlag(FLAGS_config));
    return s.ok() ? 0 : Fail(std::string(s.message()));
  }
  lmf::quickstart::QuickstartOptions o;
  o.out_dir = lmf::UserPath(absl::GetFlag(FLAGS_out));
  for (const std::string& f : absl::GetFlag(FLAGS_data)) {
    o.data.push_back(f == lmf::quickstart::kDebianDocsData ? f : lmf::UserPath(f));
  }
  if (!(absl::GetFlag(FLAGS_corpus_mb) > 0) || !(absl::GetFlag(FLAGS_corpus_mb) < 1e6)) {
    return Fail(
        absl::StrCat("--corpus_mb=", absl::GetFlag(FLAGS_corpus_mb), ": expected a size in (0, 1e6) MB"));
  }
  o.corpus_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_corpus_mb) * 1e6);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  o.budgets.clear();
  for (const std::string& b : absl::GetFlag(FLAGS_budgets)) {
    double v = 0;
    if (!absl::SimpleAtod(b, &v) || !(v > 0) || !std::isfinite(v))
      return Fail(absl::StrCat("--budgets: '", b, "' is not a positive number"));
    o.budgets.push_back(v);
  }
  o.models_per_budget = absl::GetFlag(FLAGS_models_per_budget);
  o.parallel_runs = absl::GetFlag(FLAGS_parallel_runs);
  o.target_flops = absl::GetFlag(FLAGS_target_flops);
  o.recipe = absl::GetFlag(FLAGS_recipe);
  if (const std::string schedule = absl::GetFlag(FLAGS_schedule); schedule == "wsd") {
    o.wsd = true;
  } else if (schedule != "cosine") {
    return Fail(absl::StrCat("--schedule=", schedule, ": expected cosine or wsd"));
  }
  // Checked before the corpus, tokenizer and token files are made (the sweep checks them again).
  if (o.models_per_budget < 3) {
    return Fail(absl::StrCat("--models_per_budget=", o.models_per_budget, ": a parabola needs at least 3"));
  }
  if (o.parallel_runs < 1)
    return Fail(absl::StrCat("--parallel_runs=", o.parallel_runs, ": expected 1 or more"));
  if (!(o.target_flops > 0) || !std::isfinite(o.target_flops)) {
    return Fail(absl::StrCat("--target_flops=", o.target_flops, ": expected a positive FLOP count"));
  }
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return Fail("cannot find its own executable (/proc/self/exe)");
  o.train_command = {std::string(self, static_cast<size_t>(n)), "--train_one"};
  o.progress = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  std::printf("lmforge quickstart -> %s\n", o.out_dir.c_str());
  auto result = lmf::quickstart::RunQuickstart(o);
  if (!result.ok()) return Fail(std::string(result.status().message()));
  std::printf("\ndone: %d runs finished, %d failed\n  results: %s\n  report:  %s\n", result->finished_runs,
              result->failed_runs, result->results_csv.c_str(), result->report.c_str());
  return 0;
}
