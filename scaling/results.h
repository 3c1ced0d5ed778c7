// The results table: one row per training run of a sweep, written by the sweep runner and read by the
// fits and the report (//scaling:report, scaling/reporting). CSV with a header row; the columns, in the order written:
//
//   run                   unique run name
//   budget_flops          nominal IsoFLOP budget the run belongs to (FLOP); 0 for runs outside a design
//   params                parameters including embeddings
//   non_embedding_params  parameters without the token embedding (and an untied output layer)
//   tokens                training tokens seen (may be 0 for a run that failed before its first step)
//   flops                 training FLOP actually spent
//   final_loss            validation loss at the end of training (empty if the run failed)
//   best_val_loss         lowest validation loss seen (empty if the run failed)
//   d_model, n_layers, n_heads, batch_size (sequences), lr (peak learning rate)
//   status                finished | failed | diverged
//   curve_file            optional column: a CSV of the run's training curve (see TrainingCurve), relative
//                         to the results file's folder; empty for none. Approach 1 reads these.
//   active_params, active_non_embedding_params
//                         optional columns for mixture-of-experts runs: params and non_embedding_params with
//                         only the experts a token uses (the top_k routed and the shared ones; model/accounting's
//                         active counts). Absent or empty, they equal params and non_embedding_params (a dense
//                         model). Written only for a table where some run's differ from its totals.
//
// Columns may come in any order; extra columns are ignored (sweeps may record more). Every error names
// the file, line and column.
//
// A published sweep has only N, D or C, and the loss: final_loss is required, and params or
// non_embedding_params, and tokens or flops; every other column may be absent (ResultsTable::absent). A
// missing run name is "line<N>", status "finished", budget_flops 0, the shape, batch size and lr 0 and
// best_val_loss NaN (unknown); a missing tokens is flops / (6 N) and a missing flops 6 N tokens, with N the
// params column where there is one (as Epoch derives D), else non_embedding_params. A column that is there
// is held to the rules above in every row.
#ifndef LMFORGE_SCALING_RESULTS_H_
#define LMFORGE_SCALING_RESULTS_H_

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "scaling/fit/envelope.h"
#include "scaling/fit/observation.h"

namespace lmf::scaling {

enum class RunStatus { kFinished, kFailed, kDiverged };
const char* RunStatusName(RunStatus status);

struct RunResult {
  std::string run;
  double budget_flops = 0;
  double params = 0;
  double non_embedding_params = 0;
  double tokens = 0;
  double flops = 0;
  double final_loss = NAN;
  double best_val_loss = NAN;
  int64_t d_model = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t batch_size = 0;
  double lr = 0;
  RunStatus status = RunStatus::kFinished;
  std::string curve_file;  // as written in the table (relative to the table's folder), or ""
  double active_params = NAN;                // NaN: a dense model's, params
  double active_non_embedding_params = NAN;  // NaN: non_embedding_params

  // A mixture of experts: some active count differs from its total.
  bool mixture_of_experts() const {
    return (!std::isnan(active_params) && active_params != params) ||
           (!std::isnan(active_non_embedding_params) && active_non_embedding_params != non_embedding_params);
  }
};

struct ResultsTable {
  std::string path;  // where it was read from ("" for a table built in memory)
  std::vector<RunResult> runs;
  // The columns the file did not have (a table built in memory has them all). tokens or flops, when
  // absent, were derived from the other (see above).
  std::set<std::string> absent;
  bool Has(const std::string& column) const { return absent.count(column) == 0; }
  // Some run is a mixture of experts (its N depends on ObservationChoice::active).
  bool HasMixtureOfExperts() const;
};

// Parses a results table; `path` names the file in messages and anchors relative curve files. A finished
// run must have a positive finite final_loss and best_val_loss; run names must be unique.
absl::StatusOr<ResultsTable> ParseResults(std::string_view text, const std::string& path);
absl::StatusOr<ResultsTable> ReadResults(const std::string& path);

// The table as CSV (the columns above, curve_file included, but those absent from it; tokens and flops
// always, derived or not), and written atomically.
std::string FormatResults(const ResultsTable& table);
absl::Status WriteResults(const std::string& path, const ResultsTable& table);

// Which numbers of a run the fits see.
struct ObservationChoice {
  bool non_embedding = true;  // N = non_embedding_params (Kaplan) or params (Chinchilla)
  bool best_loss = false;     // L = best_val_loss, else final_loss
  // Mixture-of-experts runs: N counts only the experts a token uses (active_params or
  // active_non_embedding_params), else every expert. The same N for a dense run either way.
  bool active = false;
};
// The N `choice` reads from a run.
double ParamCount(const RunResult& r, const ObservationChoice& choice);
// The finished runs as observations (failed and diverged runs are left out). Fails, naming the column and
// the choice to make instead, when the table lacks the column `choice` reads (non_embedding_params or
// params, best_val_loss).
absl::StatusOr<Observations> ToObservations(const ResultsTable& table, const ObservationChoice& choice);

// A training curve file: CSV with columns step, tokens, flops, loss (validation loss at that point), one
// row per evaluation, in increasing step order; tokens and flops increase with the step (checked).
absl::StatusOr<TrainingCurve> ReadTrainingCurve(const std::string& path, double params);

// The training curves of the finished runs that name one (paths resolved against the table's folder).
absl::StatusOr<std::vector<TrainingCurve>> ReadTrainingCurves(const ResultsTable& table,
                                                              const ObservationChoice& choice);

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_RESULTS_H_
