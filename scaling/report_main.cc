// `bazel run //scaling:report -- --results=<csv> --target_flops=<C> --out=<folder>`: fits a sweep's results
// table (scaling/results.h) with Chinchilla Approaches 1-3 and the Kaplan laws, bootstraps intervals, and
// writes report.md with SVG figures into --out. Prints where the report is and the recommendation.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "base/flags.h"
#include "scaling/reporting/report.h"

ABSL_FLAG(std::string, results, "", "results table (CSV, columns in scaling/results.h)");
ABSL_FLAG(double, target_flops, 0, "compute budget to recommend a model for (FLOP), e.g. 1e21");
ABSL_FLAG(std::string, out, "", "output folder for report.md and the SVG figures (default: <results folder>/report)");
ABSL_FLAG(int, bootstrap, 1000, "bootstrap resamples for the confidence intervals (0: none; at most 100000)");
ABSL_FLAG(double, confidence, 0.95, "two-sided level of the intervals");
ABSL_FLAG(uint64_t, seed, 42, "seed of the bootstrap resampling");
ABSL_FLAG(std::string, params, "non_embedding", "which parameter count the fits use: non_embedding or total");
ABSL_FLAG(std::string, moe_params, "total",
          "mixture-of-experts runs: N counts every expert (total) or only the experts a token uses (active: the "
          "table's active_params columns); dense runs have one N either way. The report names the basis it used");
ABSL_FLAG(std::string, loss, "final", "which loss the fits use: final or best (best validation loss)");
ABSL_FLAG(double, huber_delta, 1e-3, "Huber delta of the Approach 3 fit (on ln loss)");
ABSL_FLAG(std::string, parametric_objective, "huber_sum",
          "what the Approach 3 fit minimises: huber_sum (the summed Huber loss, as Hoffmann et al. and "
          "Besiroglu et al. describe) or huber_likelihood (the Huber likelihood with a fitted scale, which gives "
          "Besiroglu et al.'s published estimates)");
ABSL_FLAG(std::string, data_note, "", "one line about the data, printed at the top of the report");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Fits scaling laws to a results table and writes a Markdown report with SVG plots.\n"
                               "  report --results=sweep/results.csv --target_flops=1e21 --out=sweep/report");
  lmf::ParseFlags(argc, argv);
  lmf::RemoveTempFilesOnSignals();  // a Ctrl-C while the report is written leaves no temp file behind
  const std::string results = lmf::UserPath(absl::GetFlag(FLAGS_results));
  // Each flag's own message, naming the value given.
  std::vector<std::string> errors;
  if (results.empty()) errors.push_back("--results=<csv> is required");
  const double target = absl::GetFlag(FLAGS_target_flops);
  if (target == 0) {
    errors.push_back("--target_flops=<positive FLOP> is required");
  } else if (!(target > 0) || !std::isfinite(target)) {
    errors.push_back(absl::StrCat("--target_flops=", target, ": expected a positive, finite FLOP count"));
  }
  const double confidence = absl::GetFlag(FLAGS_confidence);
  if (!(confidence > 0 && confidence < 1)) {
    errors.push_back(absl::StrCat("--confidence=", confidence, ": expected a level in (0, 1)"));
  }
  if (absl::GetFlag(FLAGS_bootstrap) < 0 ||
      absl::GetFlag(FLAGS_bootstrap) > lmf::scaling::kMaxBootstrapResamples) {
    errors.push_back(absl::StrCat("--bootstrap=", absl::GetFlag(FLAGS_bootstrap), ": expected 0 to ",
                                  lmf::scaling::kMaxBootstrapResamples, " resamples"));
  }
  const double delta = absl::GetFlag(FLAGS_huber_delta);
  if (!(delta > 0) || !std::isfinite(delta)) {
    errors.push_back(absl::StrCat("--huber_delta=", delta, ": expected a positive, finite number"));
  }
  const absl::StatusOr<lmf::scaling::ParametricObjective> objective =
      lmf::scaling::ParseParametricObjective(absl::GetFlag(FLAGS_parametric_objective));
  if (!objective.ok()) errors.push_back(absl::StrCat("--parametric_objective: ", objective.status().message()));
  const std::string params = absl::GetFlag(FLAGS_params), loss = absl::GetFlag(FLAGS_loss);
  const std::string moe_params = absl::GetFlag(FLAGS_moe_params);
  if (params != "non_embedding" && params != "total") {
    errors.push_back(absl::StrCat("--params=", params, ": expected non_embedding or total"));
  }
  if (moe_params != "total" && moe_params != "active") {
    errors.push_back(absl::StrCat("--moe_params=", moe_params, ": expected total or active"));
  }
  if (loss != "final" && loss != "best") {
    errors.push_back(absl::StrCat("--loss=", loss, ": expected final or best"));
  }
  if (!errors.empty()) {
    for (const std::string& e : errors) std::fprintf(stderr, "report: %s\n", e.c_str());
    return 2;
  }
  lmf::scaling::ReportOptions options;
  options.target_flops = absl::GetFlag(FLAGS_target_flops);
  options.bootstrap.resamples = absl::GetFlag(FLAGS_bootstrap);
  options.bootstrap.confidence = absl::GetFlag(FLAGS_confidence);
  options.bootstrap.seed = absl::GetFlag(FLAGS_seed);
  options.parametric.huber_delta = absl::GetFlag(FLAGS_huber_delta);
  options.parametric.objective = *objective;
  options.data_note = absl::GetFlag(FLAGS_data_note);
  options.choice.non_embedding = params == "non_embedding";
  options.choice.best_loss = loss == "best";
  options.choice.active = moe_params == "active";
  std::string out = lmf::UserPath(absl::GetFlag(FLAGS_out));
  if (out.empty()) {
    const size_t slash = results.rfind('/');
    out = (slash == std::string::npos ? std::string(".") : results.substr(0, slash)) + "/report";
  }
  absl::StatusOr<lmf::scaling::ScalingAnalysis> a = lmf::scaling::MakeReport(results, options, out);
  if (!a.ok()) {
    std::fprintf(stderr, "report: %s\n", std::string(a.status().message()).c_str());
    return 1;
  }
  const std::vector<std::string> fitted = lmf::scaling::FittedApproaches(*a);
  std::printf(
      "report: wrote %s/report.md and its figures from %d run%s (%d finished, %d failed, %d diverged)\n",
      out.c_str(), a->runs, a->runs == 1 ? "" : "s", a->finished, a->failed, a->diverged);
  std::printf("report: fitted: %s\n", fitted.empty() ? "nothing (report.md says why for each approach)"
                                                     : absl::StrJoin(fitted, ", ").c_str());
  if (a->parametric) {
    const lmf::scaling::Allocation at = lmf::scaling::OptimalAllocation(a->parametric->law, options.target_flops);
    std::printf("report: at %.3g FLOP, Approach 3 recommends N = %.4g parameters, D = %.4g tokens (loss %.4g)\n",
                options.target_flops, at.params, at.tokens, at.loss);
  } else {
    std::printf("report: Approach 3 could not be fitted: %s\n", a->parametric_error.c_str());
  }
  if (a->isoflop) {
    std::printf(
        "report: Approach 2 gives N = %.4g, D = %.4g%s\n", a->isoflop->params_law.At(options.target_flops),
        a->isoflop->tokens_law.At(options.target_flops),
        a->recommended_by == "Approach 2" ? " (the recommendation: Approach 3 could not be used)" : "");
  } else if (!a->parametric) {
    std::printf("report: no recommendation: neither Approach 3 nor Approach 2 could be fitted (%s)\n",
                a->isoflop_error.c_str());
  }
  return 0;
}
