// The quickstart, lmforge's main job end to end on one machine: text -> BPE tokenizer -> token files ->
// IsoFLOP sweep of small models -> fitted scaling laws -> report. With no data it uses the built-in
// SYNTHETIC story corpus (experiments/synthetic_corpus), and the report says so; with `data` it runs the
// same on real text files. Every stage writes into `out_dir` and is skipped when its output is already
// there, so a killed quickstart started again continues where it stopped; a changed corpus redoes everything
// after it (PrepareCorpus).
#ifndef LMFORGE_EXPERIMENTS_QUICKSTART_QUICKSTART_H_
#define LMFORGE_EXPERIMENTS_QUICKSTART_QUICKSTART_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "experiments/sweep/sweep.pb.h"

namespace lmf::quickstart {

struct QuickstartOptions {
  std::string out_dir;              // absolute
  // Text files; empty: the synthetic corpus; {"debian-docs"}: the Debian documentation corpus
  // (debian_docs.h) built from docs_root into out_dir/data/debian-docs.txt, at most corpus_bytes of it.
  std::vector<std::string> data;
  std::string docs_root = "/usr/share/doc";
  uint64_t corpus_bytes = 12 << 20; // size of the synthetic corpus
  uint64_t seed = 1;
  int vocab_size = 512;
  std::vector<double> budgets = {1e11, 2.5e11, 6e11, 1.5e12};  // training FLOP per IsoFLOP curve
  int models_per_budget = 5;
  int parallel_runs = 2;
  double target_flops = 1e15;       // the report's extrapolation target
  // The runs' schedule: cosine to 10% (false), or WSD with a 20% 1-sqrt cooldown, each model size's
  // stable phase shared by its budgets (sweep.wsd_branches and isoflop.shared_sizes).
  bool wsd = false;
  // The recipe design (experiments/sweeps/recipe_quickstart.textproto): each budget's model nearest 20
  // tokens per parameter trains a 5 x 5 grid of batch size (2 to 32 sequences) x peak learning rate (1/4 to
  // 4 times a prior lr_opt(C) in steps of 2, isoflop.grid_lr_prior) instead of once, and every run takes its
  // batch in 2 micro-batches so that it logs the gradient noise scale; the report then fits B_opt(C) and
  // lr_opt(C) and plots the noise scale.
  bool recipe = false;
  std::vector<std::string> train_command;  // how the sweep starts a run (the quickstart binary itself)
  std::function<void(const std::string&)> progress;
};

struct QuickstartResult {
  std::string results_csv;
  std::string report;  // report.md
  int finished_runs = 0, failed_runs = 0;
};

// The sweep the quickstart runs (written to out_dir/sweep.textproto too, so it can be rerun or edited
// and run with //experiments:sweep). `train_tokens` etc. are absolute paths.
config::Sweep QuickstartSweep(const QuickstartOptions& options, const std::string& train_tokens,
                              const std::string& val_tokens, const std::string& tokenizer);

absl::StatusOr<QuickstartResult> RunQuickstart(const QuickstartOptions& options);

// The first stage: writes out_dir/data/train.txt and val.txt unless the stamp beside them says they were made
// from the same source (the synthetic corpus's seed and size, or each --data file's path, size and
// modification time in nanoseconds). When it (re)writes them, everything made from an earlier corpus goes
// first: out_dir/sweep moves to out_dir/sweep.superseded-<n> (its runs train again) and the tokenizer and
// token files are deleted (made again). Returns whether it wrote the corpus.
absl::StatusOr<bool> PrepareCorpus(const QuickstartOptions& options,
                                   const std::function<void(const std::string&)>& say);

}  // namespace lmf::quickstart

#endif  // LMFORGE_EXPERIMENTS_QUICKSTART_QUICKSTART_H_
