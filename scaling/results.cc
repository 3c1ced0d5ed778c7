// Reading and writing the results table and training-curve files (see results.h).
#include "scaling/results.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "scaling/csv.h"

namespace lmf::scaling {
namespace {

constexpr const char* kColumns[] = {"run",     "budget_flops", "params",     "non_embedding_params",
                                    "tokens",  "flops",        "final_loss", "best_val_loss",
                                    "d_model", "n_layers",     "n_heads",    "batch_size",
                                    "lr",      "status",       "curve_file", "active_params",
                                    "active_non_embedding_params"};
constexpr int kColumnCount = sizeof(kColumns) / sizeof(kColumns[0]);

std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// Shortest text that reads back as the same double.
std::string Number(double v) {
  if (std::isnan(v)) return "";
  return absl::StrFormat("%.17g", v);
}

// Half a unit in the last digit `text` shows ("3.25" -> 0.005, "2.1e-3" -> 5e-5, "3" -> 0.5): how far the
// value it was printed from may lie from the value it reads as.
double HalfUnitOfLastDigit(std::string_view text) {
  int exponent = 0;
  const size_t e = text.find_first_of("eE");
  if (e != std::string_view::npos) {
    const std::string tail(text.substr(e + 1));
    exponent = std::atoi(tail.c_str());
    text = text.substr(0, e);
  }
  const size_t dot = text.find('.');
  int decimals = 0;
  if (dot != std::string_view::npos) {
    for (size_t i = dot + 1; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i)
      ++decimals;
  }
  return 0.5 * std::pow(10.0, exponent - decimals);
}

}  // namespace

const char* RunStatusName(RunStatus status) {
  switch (status) {
    case RunStatus::kFinished:
      return "finished";
    case RunStatus::kFailed:
      return "failed";
    case RunStatus::kDiverged:
      return "diverged";
  }
  return "finished";
}

namespace {

// Where each of kColumns is in the file (-1: absent), checked for the columns no table can do without.
absl::StatusOr<std::vector<int>> LocateColumns(const CsvTable& csv) {
  std::vector<int> col(kColumnCount);
  for (int c = 0; c < kColumnCount; ++c) col[c] = csv.Column(kColumns[c]);
  auto need_one_of = [&](int a, int b) -> absl::Status {
    if (col[a] >= 0 || col[b] >= 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(csv.path, ": missing column '", kColumns[a], "' or '", kColumns[b],
                                                   "' (a results table needs N, D or C, and the loss)"));
  };
  if (absl::Status s = need_one_of(2, 3); !s.ok()) return s;  // params, non_embedding_params
  if (absl::Status s = need_one_of(4, 5); !s.ok()) return s;  // tokens, flops
  if (col[6] < 0) {
    absl::StatusOr<int> missing = csv.RequireColumn(kColumns[6]);  // final_loss: its error lists the columns
    return missing.status();
  }
  return col;
}

// The status cell, "finished" when the column is absent.
absl::StatusOr<RunStatus> ParseStatus(const CsvTable& csv, const CsvRow& row, int column) {
  if (column < 0) return RunStatus::kFinished;
  const std::string& status = row.fields[column];
  if (status == "finished") return RunStatus::kFinished;
  if (status == "failed") return RunStatus::kFailed;
  if (status == "diverged") return RunStatus::kDiverged;
  return absl::InvalidArgumentError(
      absl::StrCat(csv.Where(row, column), ": expected finished, failed or diverged, got '", status, "'"));
}

// budget_flops, params, non_embedding_params, tokens, flops, final_loss, best_val_loss: the cells that are
// there, each checked; the absent ones keep their defaults.
absl::Status ParseSizesAndLosses(const CsvTable& csv, const CsvRow& row, const std::vector<int>& col, RunResult* r) {
  const bool finished = r->status == RunStatus::kFinished;
  double* doubles[] = {&r->budget_flops, &r->params,     &r->non_embedding_params, &r->tokens,
                       &r->flops,        &r->final_loss, &r->best_val_loss};
  for (int k = 0; k < 7; ++k) {
    const int c = col[1 + k];
    if (c < 0) continue;
    const bool is_loss = k >= 5;
    absl::StatusOr<double> v = csv.Double(row, c, /*allow_empty=*/is_loss && !finished);
    if (!v.ok()) return v.status();
    // Sizes are known from the config, so always positive; a run that did not finish may have spent
    // no tokens or compute yet, and has no loss.
    const bool is_size = k == 1 || k == 2;
    const bool positive_required = is_size || (k != 0 && finished);
    if (positive_required && !(*v > 0 && std::isfinite(*v))) {
      return absl::InvalidArgumentError(
          absl::StrCat(csv.Where(row, c), ": expected a positive finite number, got '", row.fields[c], "'"));
    }
    if (!positive_required && !is_loss && !(*v >= 0 && std::isfinite(*v))) {
      return absl::InvalidArgumentError(
          absl::StrCat(csv.Where(row, c), ": expected a finite number >= 0, got '", row.fields[c], "'"));
    }
    if (k == 0 && !(*v >= 0 && std::isfinite(*v))) {
      return absl::InvalidArgumentError(
          absl::StrCat(csv.Where(row, c), ": expected a budget >= 0 (0: no IsoFLOP group), got '", row.fields[c], "'"));
    }
    *doubles[k] = *v;
  }
  // D or C from the other, with N as Epoch takes it (the count with embeddings where the table has it).
  const double n = col[2] >= 0 ? r->params : r->non_embedding_params;
  if (col[4] < 0) r->tokens = r->flops / (6 * n);
  if (col[5] < 0) r->flops = 6 * n * r->tokens;
  return absl::OkStatus();
}

// active_params and active_non_embedding_params where the table has them and the cell is not empty: positive
// and at most their totals.
absl::Status ParseActiveCounts(const CsvTable& csv, const CsvRow& row, const std::vector<int>& col, RunResult* r) {
  double* actives[] = {&r->active_params, &r->active_non_embedding_params};
  const double totals[] = {r->params, r->non_embedding_params};
  for (int k = 0; k < 2; ++k) {
    const int c = col[15 + k];
    if (c < 0 || row.fields[c].empty()) continue;
    absl::StatusOr<double> v = csv.Double(row, c);
    if (!v.ok()) return v.status();
    if (!(*v > 0 && std::isfinite(*v))) {
      return absl::InvalidArgumentError(
          absl::StrCat(csv.Where(row, c), ": expected a positive finite number, got '", row.fields[c], "'"));
    }
    if (col[2 + k] >= 0 && *v > totals[k]) {
      return absl::InvalidArgumentError(absl::StrCat(csv.Where(row, c), ": ", kColumns[15 + k], " ", row.fields[c],
                                                     " is more than ", kColumns[2 + k], " ", row.fields[col[2 + k]],
                                                     " (a token uses some of the parameters, never more)"));
    }
    *actives[k] = *v;
  }
  return absl::OkStatus();
}

// What every row must satisfy whatever produced it. flops is not checked against 6 N D or budget_flops:
// attention and embeddings, mixture-of-experts models (N counts experts a token does not use), SIX_N
// designs and runs that stopped early put legitimate rows far from both. Only flops < tokens is certain
// to be wrong (every trained token costs at least one FLOP): a swapped column or another unit.
absl::Status CheckConsistent(const CsvTable& csv, const CsvRow& row, const std::vector<int>& col, const RunResult& r) {
  if (col[2] >= 0 && col[3] >= 0 && r.non_embedding_params > r.params) {
    return absl::InvalidArgumentError(absl::StrCat(
        csv.Where(row, col[3]), ": non_embedding_params ", row.fields[col[3]], " is more than params ",
        row.fields[col[2]], " (params counts every parameter, embeddings included)"));
  }
  if (col[4] >= 0 && col[5] >= 0 && r.tokens > 0 && r.flops < r.tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        csv.Where(row, col[5]), ": flops ", row.fields[col[5]], " is less than tokens ", row.fields[col[4]],
        ": every trained token costs at least one FLOP (a column in another unit, or swapped?)"));
  }
  // The best validation loss is the lowest of the evaluations, the final one included; the cells may be
  // rounded, each to its own last digit.
  if (col[7] >= 0 && r.status == RunStatus::kFinished &&
      r.best_val_loss > r.final_loss + HalfUnitOfLastDigit(row.fields[col[6]]) +
                            HalfUnitOfLastDigit(row.fields[col[7]])) {
    return absl::InvalidArgumentError(absl::StrCat(
        csv.Where(row, col[7]), ": best_val_loss ", row.fields[col[7]], " is more than final_loss ",
        row.fields[col[6]], " (the best is the lowest of the evaluations, the final one included)"));
  }
  return absl::OkStatus();
}

// d_model, n_layers, n_heads, batch_size and lr, where the table has them.
absl::Status ParseRecipeColumns(const CsvTable& csv, const CsvRow& row, const std::vector<int>& col, RunResult* r) {
  int64_t* ints[] = {&r->d_model, &r->n_layers, &r->n_heads, &r->batch_size};
  for (int k = 0; k < 4; ++k) {
    const int c = col[8 + k];
    if (c < 0) continue;
    absl::StatusOr<int64_t> v = csv.Integer(row, c);
    if (!v.ok()) return v.status();
    if (*v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(csv.Where(row, c), ": expected a positive whole number, got '", row.fields[c], "'"));
    }
    *ints[k] = *v;
  }
  if (col[12] < 0) return absl::OkStatus();
  absl::StatusOr<double> lr = csv.Double(row, col[12]);
  if (!lr.ok()) return lr.status();
  if (!(*lr > 0) || !std::isfinite(*lr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(csv.Where(row, col[12]), ": expected a positive learning rate, got '", row.fields[col[12]], "'"));
  }
  r->lr = *lr;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResultsTable> ParseResults(std::string_view text, const std::string& path) {
  absl::StatusOr<CsvTable> csv = ParseCsv(text, path);
  if (!csv.ok()) return csv.status();
  absl::StatusOr<std::vector<int>> columns = LocateColumns(*csv);
  if (!columns.ok()) return columns.status();
  const std::vector<int>& col = *columns;
  ResultsTable table;
  table.path = path;
  for (int c = 0; c < kColumnCount; ++c) {
    if (col[c] < 0) table.absent.insert(kColumns[c]);
  }
  std::set<std::string> names;
  for (const CsvRow& row : csv->rows) {
    RunResult r;
    r.run = col[0] >= 0 ? row.fields[col[0]] : absl::StrCat("line", row.line);
    if (r.run.empty()) return absl::InvalidArgumentError(absl::StrCat(csv->Where(row, col[0]), ": empty run name"));
    if (!names.insert(r.run).second) {
      return absl::InvalidArgumentError(absl::StrCat(csv->Where(row, col[0]), ": run '", r.run, "' appears twice"));
    }
    absl::StatusOr<RunStatus> status = ParseStatus(*csv, row, col[13]);
    if (!status.ok()) return status.status();
    r.status = *status;
    if (absl::Status s = ParseSizesAndLosses(*csv, row, col, &r); !s.ok()) return s;
    if (absl::Status s = CheckConsistent(*csv, row, col, r); !s.ok()) return s;
    if (absl::Status s = ParseActiveCounts(*csv, row, col, &r); !s.ok()) return s;
    if (absl::Status s = ParseRecipeColumns(*csv, row, col, &r); !s.ok()) return s;
    if (col[14] >= 0) r.curve_file = row.fields[col[14]];
    table.runs.push_back(std::move(r));
  }
  return table;
}

absl::StatusOr<ResultsTable> ReadResults(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseResults(*text, path);
}

bool ResultsTable::HasMixtureOfExperts() const {
  return std::any_of(runs.begin(), runs.end(), [](const RunResult& r) { return r.mixture_of_experts(); });
}

double ParamCount(const RunResult& r, const ObservationChoice& choice) {
  const double total = choice.non_embedding ? r.non_embedding_params : r.params;
  const double active = choice.non_embedding ? r.active_non_embedding_params : r.active_params;
  return choice.active && !std::isnan(active) ? active : total;
}

std::string FormatResults(const ResultsTable& table) {
  // tokens and flops are written even when derived; the other absent columns are left out, and the active
  // counts unless some run is a mixture of experts (a dense table reads the same as before they existed).
  const bool moe = table.HasMixtureOfExperts();
  auto written = [&](int c) { return c == 4 || c == 5 || (table.Has(kColumns[c]) && (c < 15 || moe)); };
  std::string out;
  for (int c = 0; c < kColumnCount; ++c) {
    if (written(c)) absl::StrAppend(&out, out.empty() ? "" : ",", kColumns[c]);
  }
  out += "\n";
  for (const RunResult& r : table.runs) {
    const std::string cells[kColumnCount] = {
        CsvField(r.run),          Number(r.budget_flops),   Number(r.params),          Number(r.non_embedding_params),
        Number(r.tokens),         Number(r.flops),          Number(r.final_loss),      Number(r.best_val_loss),
        absl::StrCat(r.d_model),  absl::StrCat(r.n_layers), absl::StrCat(r.n_heads),   absl::StrCat(r.batch_size),
        Number(r.lr),             RunStatusName(r.status),  CsvField(r.curve_file),    Number(r.active_params),
        Number(r.active_non_embedding_params)};
    bool first = true;
    for (int c = 0; c < kColumnCount; ++c) {
      if (!written(c)) continue;
      absl::StrAppend(&out, first ? "" : ",", cells[c]);
      first = false;
    }
    out += "\n";
  }
  return out;
}

absl::Status WriteResults(const std::string& path, const ResultsTable& table) {
  return WriteFileAtomically(path, FormatResults(table));
}

absl::StatusOr<Observations> ToObservations(const ResultsTable& table, const ObservationChoice& choice) {
  const char* n_column = choice.non_embedding ? "non_embedding_params" : "params";
  if (!table.Has(n_column)) {
    return absl::InvalidArgumentError(absl::StrCat(
        table.path, ": no ", n_column, " column to take N from; use the ",
        choice.non_embedding ? "params column (--params=total)" : "non_embedding_params column (--params=non_embedding)"));
  }
  const char* active_column = choice.non_embedding ? "active_non_embedding_params" : "active_params";
  if (choice.active && table.HasMixtureOfExperts() && !table.Has(active_column)) {
    return absl::InvalidArgumentError(absl::StrCat(table.path, ": no ", active_column,
                                                   " column to take the mixture-of-experts runs' active N from; "
                                                   "use their total N (--moe_params=total)"));
  }
  if (choice.best_loss && !table.Has("best_val_loss")) {
    return absl::InvalidArgumentError(
        absl::StrCat(table.path, ": no best_val_loss column; use the final loss (--loss=final)"));
  }
  Observations out;
  for (const RunResult& r : table.runs) {
    if (r.status != RunStatus::kFinished) continue;
    Observation o;
    o.params = ParamCount(r, choice);
    o.tokens = r.tokens;
    o.flops = r.flops;
    o.budget = r.budget_flops;
    o.loss = choice.best_loss ? r.best_val_loss : r.final_loss;
    out.push_back(o);
  }
  return out;
}

absl::StatusOr<TrainingCurve> ReadTrainingCurve(const std::string& path, double params) {
  absl::StatusOr<CsvTable> csv = ReadCsv(path);
  if (!csv.ok()) return csv.status();
  absl::StatusOr<std::vector<int>> columns = csv->RequireColumns({"step", "tokens", "flops", "loss"});
  if (!columns.ok()) return columns.status();
  const std::vector<int>& col = *columns;
  TrainingCurve curve;
  curve.params = params;
  double last_step = -1;
  for (const CsvRow& row : csv->rows) {
    double v[4];
    for (int c = 0; c < 4; ++c) {
      absl::StatusOr<double> x = csv->Double(row, col[c]);
      if (!x.ok()) return x.status();
      v[c] = *x;
    }
    if (!(v[0] > last_step)) {
      return absl::InvalidArgumentError(absl::StrCat(csv->Where(row, col[0]), ": steps must increase"));
    }
    last_step = v[0];
    if (v[0] == 0) continue;  // the untrained model has spent no compute: not a point on the curve
    if (!(v[1] > 0) || !(v[2] > 0) || !std::isfinite(v[3])) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", row.line,
                                                     ": tokens and flops must be positive and loss finite"));
    }
    // Tokens and FLOPs grow with every step: a curve where they do not was damaged or edited by hand, and
    // its points would land at the wrong compute in the envelope (Approach 1).
    if (!curve.points.empty()) {
      const CurvePoint& previous = curve.points.back();
      if (!(v[1] > previous.tokens)) {
        return absl::InvalidArgumentError(absl::StrCat(csv->Where(row, col[1]),
                                                       ": tokens must increase with step (", v[1], " after ",
                                                       previous.tokens, ")"));
      }
      if (!(v[2] > previous.flops)) {
        return absl::InvalidArgumentError(absl::StrCat(csv->Where(row, col[2]),
                                                       ": flops must increase with step (", v[2], " after ",
                                                       previous.flops, ")"));
      }
    }
    curve.points.push_back({v[1], v[2], v[3]});
  }
  return curve;
}

absl::StatusOr<std::vector<TrainingCurve>> ReadTrainingCurves(const ResultsTable& table,
                                                              const ObservationChoice& choice) {
  std::vector<TrainingCurve> curves;
  for (const RunResult& r : table.runs) {
    if (r.status != RunStatus::kFinished || r.curve_file.empty()) continue;
    const std::string path = r.curve_file[0] == '/' ? r.curve_file : FolderOf(table.path) + "/" + r.curve_file;
    absl::StatusOr<TrainingCurve> curve =
        ReadTrainingCurve(path, ParamCount(r, choice));
    if (!curve.ok()) {
      return absl::Status(curve.status().code(),
                          absl::StrCat("curve of run '", r.run, "' (", table.path, "): ", curve.status().message()));
    }
    curve->run = r.run;
    curves.push_back(std::move(*curve));
  }
  return curves;
}

}  // namespace lmf::scaling
