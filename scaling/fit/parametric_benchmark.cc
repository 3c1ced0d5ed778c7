// Benchmark: Chinchilla Approach 3 on Epoch AI's data, done as Besiroglu et al. do it (240 points, the
// 4,500-start grid, 4,000 bootstrap refits), timed here (Ceres L-BFGS, analytic gradient, spread over the
// thread pool) and in the SciPy reference tools/scaling/fit_reference.py, run by this binary in the same
// session. Prints both wall times, the ratio, and the fitted parameters of each side.
//
//   ./bazelw run //scaling/fit:parametric_benchmark
//   ./bazelw run //scaling/fit:parametric_benchmark -- --bootstraps=400   (a quicker look)
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/thread_pool.h"
#include "scaling/fit/parametric.h"
#include "scaling/fit/uncertainty.h"
#include "scaling/published.h"

ABSL_FLAG(std::string, data, "", "epoch_chinchilla_svg_extracted_data.csv (default: $LMF_SHARED_DATA/scaling/...)");
ABSL_FLAG(int, bootstraps, 4000, "bootstrap refits");
ABSL_FLAG(std::string, python, "/usr/bin/python3", "Python with NumPy and SciPy");
ABSL_FLAG(std::string, reference, "", "fit_reference.py (default: found in the runfiles or the workspace)");
ABSL_FLAG(bool, skip_reference, false, "time only the C++ fit");

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// CPU time of this process, all threads (user + system).
double CpuSeconds() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// What fit_reference.py prints: one JSON object, the fitted law under "params".
struct ReferenceResult {
  double grid_seconds, bootstrap_seconds, grid_cpu_seconds, bootstrap_cpu_seconds, objective;
  double E, A, B, alpha, beta;
};

// Reads the finite number `key` of the object `json` ("params.E" in messages when `where` is "params.").
absl::Status ReadNumber(const lmf::JsonValue& json, const std::string& where, const char* key, double* out) {
  const lmf::JsonValue* member = json.Find(key);
  if (member == nullptr || !member->AsDouble(out) || !std::isfinite(*out)) {
    return absl::InvalidArgumentError(absl::StrCat("\"", where, key, "\": expected a finite number"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ReferenceResult> ReadReferenceOutput(const std::string& output) {
  absl::StatusOr<lmf::JsonValue> json = lmf::ParseJson(output);
  if (!json.ok()) return json.status();
  const lmf::JsonValue* params = json->kind == lmf::JsonValue::Kind::kObject ? json->Find("params") : nullptr;
  if (params == nullptr || params->kind != lmf::JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError("expected a JSON object with a \"params\" object");
  }
  ReferenceResult r;
  const std::pair<const char*, double*> top[] = {{"grid_seconds", &r.grid_seconds},
                                                 {"bootstrap_seconds", &r.bootstrap_seconds},
                                                 {"grid_cpu_seconds", &r.grid_cpu_seconds},
                                                 {"bootstrap_cpu_seconds", &r.bootstrap_cpu_seconds},
                                                 {"objective", &r.objective}};
  const std::pair<const char*, double*> law[] = {
      {"E", &r.E}, {"A", &r.A}, {"B", &r.B}, {"alpha", &r.alpha}, {"beta", &r.beta}};
  for (const auto& [key, value] : top) {
    if (absl::Status s = ReadNumber(*json, "", key, value); !s.ok()) return s;
  }
  for (const auto& [key, value] : law) {
    if (absl::Status s = ReadNumber(*params, "params.", key, value); !s.ok()) return s;
  }
  return r;
}

std::string Exists(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  std::fclose(f);
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Chinchilla Approach 3 on Epoch AI's data (4,500-start grid, bootstrap refits), timed here "
      "and in the SciPy reference in the same run.");
  lmf::ParseFlags(argc, argv);
  using lmf::scaling::Observations;
  std::string data = absl::GetFlag(FLAGS_data);
  if (data.empty() && std::getenv("LMF_SHARED_DATA") != nullptr) {
    data = std::string(std::getenv("LMF_SHARED_DATA")) + "/scaling/epoch_chinchilla_svg_extracted_data.csv";
  }
  absl::StatusOr<Observations> all = lmf::scaling::ReadEpochChinchilla(data);
  if (!all.ok()) {
    std::fprintf(stderr, "parametric_benchmark: %s (pass --data= or set LMF_SHARED_DATA)\n",
                 std::string(all.status().message()).c_str());
    return 1;
  }
  const Observations points = lmf::scaling::DropHighestLoss(*all, 5);
  lmf::ThreadPool& pool = lmf::ThreadPool::Default();
  const int bootstraps = absl::GetFlag(FLAGS_bootstraps);
  std::printf("Approach 3 on Epoch's Chinchilla data: %zu points, 4500 starts, %d bootstrap refits\n", points.size(),
              bootstraps);

  lmf::scaling::ParametricFitOptions options;
  auto start = std::chrono::steady_clock::now();
  double cpu = CpuSeconds();
  absl::StatusOr<lmf::scaling::ParametricFit> fit = lmf::scaling::FitParametric(points, options, &pool);
  const double grid_s = Seconds(start), grid_cpu = CpuSeconds() - cpu;
  if (!fit.ok()) {
    std::fprintf(stderr, "parametric_benchmark: %s\n", std::string(fit.status().message()).c_str());
    return 1;
  }
  lmf::scaling::BootstrapOptions boot;
  boot.resamples = bootstraps;
  start = std::chrono::steady_clock::now();
  cpu = CpuSeconds();
  absl::StatusOr<lmf::scaling::ParametricUncertainty> ci =
      lmf::scaling::BootstrapParametric(points, *fit, 1e24, boot, options, 0, &pool);
  const double boot_s = Seconds(start), boot_cpu = CpuSeconds() - cpu;
  if (!ci.ok()) {
    std::fprintf(stderr, "parametric_benchmark: %s\n", std::string(ci.status().message()).c_str());
    return 1;
  }
  const lmf::scaling::ParametricLaw& law = fit->law;
  std::printf("lmforge (Ceres L-BFGS, %d threads): grid %.2f s + bootstrap %.2f s = %.2f s wall; %.2f s CPU\n",
              pool.num_threads(), grid_s, boot_s, grid_s + boot_s, grid_cpu + boot_cpu);
  std::printf("  E=%.4f A=%.2f B=%.2f alpha=%.4f beta=%.4f objective=%.9g; bootstrap s.e. alpha=%.4f beta=%.4f\n",
              law.E, law.A, law.B, law.alpha, law.beta, fit->objective, ci->alpha.std_error, ci->beta.std_error);
  if (absl::GetFlag(FLAGS_skip_reference)) return 0;

  std::string reference = absl::GetFlag(FLAGS_reference);
  if (reference.empty()) reference = Exists("tools/scaling/fit_reference.py");
  if (reference.empty() && std::getenv("BUILD_WORKSPACE_DIRECTORY") != nullptr) {
    reference = Exists(std::string(std::getenv("BUILD_WORKSPACE_DIRECTORY")) + "/tools/scaling/fit_reference.py");
  }
  if (reference.empty()) {
    std::fprintf(stderr, "parametric_benchmark: cannot find fit_reference.py; pass --reference=\n");
    return 1;
  }
  const std::string command = absl::GetFlag(FLAGS_python) + " " + reference + " --data=" + data +
                              " --bootstraps=" + std::to_string(bootstraps);
  std::printf("running the SciPy reference: %s\n", command.c_str());
  std::fflush(stdout);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    std::fprintf(stderr, "parametric_benchmark: could not run %s\n", command.c_str());
    return 1;
  }
  std::string json;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), pipe) != nullptr) json += buf;
  const int rc = pclose(pipe);
  if (rc != 0) {
    std::fprintf(stderr, "parametric_benchmark: the reference failed (exit %d): %s\n", rc, json.c_str());
    return 1;
  }
  const absl::StatusOr<ReferenceResult> ref = ReadReferenceOutput(json);
  if (!ref.ok()) {
    std::fprintf(stderr, "parametric_benchmark: the output of %s: %s; it printed: %s\n", command.c_str(),
                 std::string(ref.status().message()).c_str(), json.c_str());
    return 1;
  }
  const double ref_grid = ref->grid_seconds, ref_boot = ref->bootstrap_seconds;
  const double ref_cpu = ref->grid_cpu_seconds + ref->bootstrap_cpu_seconds;
  std::printf("SciPy L-BFGS-B (1 thread): grid %.2f s + bootstrap %.2f s = %.2f s wall; %.2f s CPU\n", ref_grid,
              ref_boot, ref_grid + ref_boot, ref_cpu);
  std::printf("  E=%.4f A=%.2f B=%.2f alpha=%.4f beta=%.4f objective=%.9g\n", ref->E, ref->A, ref->B,
              ref->alpha, ref->beta, ref->objective);
  std::printf("speedup (SciPy time / lmforge time): wall: grid %.1fx, bootstrap %.1fx, total %.1fx; CPU total %.1fx\n",
              ref_grid / grid_s, ref_boot / boot_s, (ref_grid + ref_boot) / (grid_s + boot_s),
              ref_cpu / (grid_cpu + boot_cpu));
  return 0;
}
