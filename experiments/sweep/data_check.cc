// See data_check.h.
#include "experiments/sweep/data_check.h"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "experiments/data/token_batches.h"
#include "experiments/sweep/runner.h"
#include "tokenizer/tokenizer_file.h"

namespace lmf::sweep {
namespace {

// What one run's data must satisfy: the trainer's checks of its training sources and validation file.
absl::Status CheckData(const config::Experiment& e, std::map<std::string, uint64_t>* tokenizer_hashes) {
  experiments::TokenFileExpectations expect;
  expect.model_vocab_size = e.model().vocab_size();
  expect.batch_size = e.run().batch_size();
  expect.context_length = e.model().context_length();
  if (!e.data().tokenizer().empty()) {
    auto it = tokenizer_hashes->find(e.data().tokenizer());
    if (it == tokenizer_hashes->end()) {
      absl::StatusOr<tokenizer::Tokenizer> tok = tokenizer::LoadTokenizer(e.data().tokenizer());
      if (!tok.ok()) return tok.status();
      it = tokenizer_hashes->emplace(e.data().tokenizer(), tok->Hash()).first;
    }
    expect.tokenizer_hash = it->second;
  }
  for (const std::string& path : TrainingTokenFiles(e.data())) {
    absl::StatusOr<tokenizer::TokenFileReader> file = experiments::OpenTokenFile(path, expect);
    if (!file.ok()) return file.status();
  }
  if (e.run().eval_tokens() > 0 && !e.data().val_tokens().empty()) {
    absl::StatusOr<experiments::ValidationBatches> val =
        experiments::ValidationBatches::Open(e.data().val_tokens(), expect, e.run().eval_tokens());
    if (!val.ok()) return val.status();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRunsCanReadTheirData(const SweepPlan& plan) {
  std::map<std::string, uint64_t> tokenizer_hashes;
  std::set<std::string> checked;  // the data fields and the sizes they are checked against, per distinct set
  for (const PlannedRun& run : plan.runs) {
    // A run that finished is not trained again (unless its config changed: then the trainer's own check
    // speaks): its token files may be gone, and the sweep still reports it.
    absl::StatusOr<config::SweepRunResult> result =
        ReadRunResult(absl::StrCat(plan.output_dir, "/runs/", run.name));
    if (result.ok() && result->status() == config::SweepRunResult::FINISHED) continue;
    const config::Experiment& e = run.experiment;
    const std::string key =
        absl::StrCat(e.data().SerializeAsString(), "|", e.model().vocab_size(), "|", e.run().batch_size(),
                     "|", e.model().context_length(), "|", e.run().eval_tokens());
    if (!checked.insert(key).second) continue;
    if (absl::Status s = CheckData(e, &tokenizer_hashes); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(plan.source, " (run ", run.name, "): ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace lmf::sweep
