// Readers for the published scaling tables (see published.h).
#include "scaling/published.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/json.h"
#include "scaling/csv.h"

namespace lmf::scaling {
namespace {

// Reads the named columns of every row as positive numbers.
absl::StatusOr<std::vector<std::vector<double>>> PositiveColumns(const CsvTable& csv,
                                                                 const std::vector<std::string_view>& names) {
  absl::StatusOr<std::vector<int>> cols = csv.RequireColumns(names);
  if (!cols.ok()) return cols.status();
  std::vector<std::vector<double>> rows;
  for (const CsvRow& row : csv.rows) {
    std::vector<double> values;
    for (int c : *cols) {
      absl::StatusOr<double> v = csv.PositiveDouble(row, c);
      if (!v.ok()) return v.status();
      values.push_back(*v);
    }
    rows.push_back(values);
  }
  return rows;
}

}  // namespace

absl::StatusOr<Observations> ReadEpochChinchilla(const std::string& path) {
  absl::StatusOr<CsvTable> csv = ReadCsv(path);
  if (!csv.ok()) return csv.status();
  absl::StatusOr<std::vector<std::vector<double>>> rows = PositiveColumns(*csv, {"Model Size", "Training FLOP", "loss"});
  if (!rows.ok()) return rows.status();
  Observations out;
  for (const std::vector<double>& r : *rows) {
    Observation o;
    o.params = r[0];
    o.flops = r[1];
    o.tokens = r[1] / (6 * r[0]);
    o.loss = r[2];
    out.push_back(o);
  }
  return out;
}

Observations DropHighestLoss(const Observations& observations, int count) {
  if (count <= 0 || observations.empty()) return observations;
  std::vector<double> losses;
  for (const Observation& o : observations) losses.push_back(o.loss);
  std::sort(losses.begin(), losses.end());
  const double cut = losses[losses.size() - std::min<size_t>(count, losses.size())];
  Observations out;
  for (const Observation& o : observations)
    if (o.loss < cut) out.push_back(o);
  return out;
}

absl::StatusOr<Observations> ReadLlama3IsoFlops(const std::string& path) {
  absl::StatusOr<CsvTable> csv = ReadCsv(path);
  if (!csv.ok()) return csv.status();
  absl::StatusOr<std::vector<std::vector<double>>> rows =
      PositiveColumns(*csv, {"compute_budget", "training_tokens", "validation_loss"});
  if (!rows.ok()) return rows.status();
  Observations out;
  for (const std::vector<double>& r : *rows) {
    Observation o;
    o.budget = o.flops = r[0];
    o.tokens = r[1];
    o.params = r[0] / (6 * r[1]);
    o.loss = r[2];
    out.push_back(o);
  }
  return out;
}

absl::StatusOr<Observations> ReadMisfitting(const std::string& path, bool non_embedding) {
  absl::StatusOr<CsvTable> csv = ReadCsv(path);
  if (!csv.ok()) return csv.status();
  absl::StatusOr<std::vector<std::vector<double>>> rows =
      PositiveColumns(*csv, {non_embedding ? "N_no_emb" : "N", "D", "C", "loss"});
  if (!rows.ok()) return rows.status();
  Observations out;
  for (const std::vector<double>& r : *rows) {
    Observation o;
    o.params = r[0];
    o.tokens = r[1];
    o.flops = r[2];
    o.loss = r[3];
    out.push_back(o);
  }
  return out;
}

absl::StatusOr<Observations> ReadMarinIsoFlops(const std::string& path) {
  absl::StatusOr<CsvTable> csv = ReadCsv(path);
  if (!csv.ok()) return csv.status();
  absl::StatusOr<int> name_col = csv->RequireColumn("Name");
  if (!name_col.ok()) return name_col.status();
  Observations out;
  absl::StatusOr<std::vector<int>> cols = csv->RequireColumns(
      {"parameter_count", "throughput/total_tokens", "eval/paloma/macro_loss", "throughput/total_gflops"});
  if (!cols.ok()) return cols.status();
  for (const CsvRow& row : csv->rows) {
    const std::string& name = row.fields[*name_col];
    if (!absl::StartsWith(name, "isoflop-")) continue;  // validation-optimal runs
    const char* start = name.c_str() + 8;
    char* end = nullptr;
    const double forward_budget = std::strtod(start, &end);
    if (end == start || *end != '-' || !(forward_budget > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(csv->Where(row, *name_col), ": expected 'isoflop-<budget>-...', got '",
                                                     name, "'"));
    }
    double v[4];
    for (int k = 0; k < 4; ++k) {
      absl::StatusOr<double> x = csv->PositiveDouble(row, (*cols)[k]);
      if (!x.ok()) return x.status();
      v[k] = *x;
    }
    Observation o;
    o.budget = 3 * forward_budget;
    o.params = v[0];
    o.tokens = v[1];
    o.flops = v[3] * 1e9;  // logged training compute: 3x the forward budget in the name
    o.loss = v[2];
    out.push_back(o);
  }
  return out;
}

absl::StatusOr<Observations> ReadOpenAthenaIsoFlops(const std::string& path, const std::string& experiment,
                                                    bool keep_outliers) {
  absl::StatusOr<CsvTable> csv = ReadCsv(path);
  if (!csv.ok()) return csv.status();
  absl::StatusOr<int> exp_col = csv->RequireColumn("experiment");
  absl::StatusOr<int> outlier_col = csv->RequireColumn("outlier");
  if (!exp_col.ok()) return exp_col.status();
  if (!outlier_col.ok()) return outlier_col.status();
  absl::StatusOr<std::vector<int>> cols = csv->RequireColumns({"params", "tokens", "budget", "loss"});
  if (!cols.ok()) return cols.status();
  Observations out;
  for (const CsvRow& row : csv->rows) {
    if (row.fields[*exp_col] != experiment) continue;
    const std::string& flag = row.fields[*outlier_col];
    if (flag != "True" && flag != "False") {
      return absl::InvalidArgumentError(absl::StrCat(csv->Where(row, *outlier_col), ": expected True or False, got '",
                                                     flag, "'"));
    }
    if (flag == "True" && !keep_outliers) continue;
    double v[4];
    for (int k = 0; k < 4; ++k) {
      absl::StatusOr<double> x = csv->PositiveDouble(row, (*cols)[k]);
      if (!x.ok()) return x.status();
      v[k] = *x;
    }
    Observation o;
    o.params = v[0];
    o.tokens = v[1];
    o.budget = o.flops = v[2];
    o.loss = v[3];
    out.push_back(o);
  }
  if (out.empty()) {
    return absl::NotFoundError(absl::StrCat(path, ": no row has experiment '", experiment, "'"));
  }
  return out;
}

absl::StatusOr<Observations> ReadCs336IsoFlops(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<JsonValue> json = ParseJson(*text);
  if (!json.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", json.status().message()));
  if (json->kind != JsonValue::Kind::kArray) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected a JSON array of {parameters, compute_budget, final_loss}"));
  }
  Observations out;
  for (size_t i = 0; i < json->array.size(); ++i) {
    const JsonValue& run = json->array[i];
    auto fail = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": run ", i, " (0-based) of the array: ", what));
    };
    if (run.kind != JsonValue::Kind::kObject) {
      return fail("expected an object {parameters, compute_budget, final_loss}");
    }
    double params = NAN, budget = NAN, loss = NAN;
    const std::map<std::string, double*> fields = {
        {"parameters", &params}, {"compute_budget", &budget}, {"final_loss", &loss}};
    for (const auto& [key, value] : run.object) {
      const auto field = fields.find(key);
      if (field == fields.end()) return fail("unknown key '" + key + "'");
      if (!value.AsDouble(field->second)) return fail("expected a number for key '" + key + "'");
    }
    if (!(params > 0) || !(budget > 0) || !std::isfinite(loss)) {
      return fail("a run lacks a positive parameters, compute_budget or a final_loss");
    }
    Observation o;
    o.params = params;
    o.budget = o.flops = budget;
    o.tokens = budget / (6 * params);
    o.loss = loss;
    out.push_back(o);
  }
  return out;
}

}  // namespace lmf::scaling
