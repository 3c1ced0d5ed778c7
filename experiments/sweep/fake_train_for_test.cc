// A stand-in for the training binary in the sweep runner's tests: reads the run's config, "trains" by
// evaluating a known scaling law L(N, D) = 1.8 + 300/N^0.33 + 500/D^0.29 (N from the model's shape, D
// from the run length), and writes result.textproto. Environment knobs make it fail, sleep, or record
// each invocation, so the tests can check failures (FAKE_TRAIN_FAIL: a crash after 6 steps logged in
// metrics.jsonl; FAKE_TRAIN_DIVERGE), resumption and parallelism. A WSD branch (run.init_from) fails
// without its trunk's checkpoint; a run writes its run.checkpoint_steps folders after its newest existing
// checkpoint, and its last step's, when it ends.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "base/file.h"
#include "base/flags.h"
#include "config/loader.h"
#include "config/run_length.h"
#include "experiments/checkpoint/checkpoint.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/sweep/runner.h"

ABSL_FLAG(std::string, config, "", "the run's config, as the sweep runner passes it");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("A stand-in trainer for the sweep runner's tests (see the file's banner).");
  lmf::ParseFlags(argc, argv);
  const std::string config_path = absl::GetFlag(FLAGS_config);
  auto text = lmf::ReadFile(config_path);
  if (!text.ok()) return 3;
  auto e = lmf::config::ParseExperimentText(*text, config_path);
  if (!e.ok()) return 4;
  const std::string name = e->name();
  if (const char* log = std::getenv("FAKE_TRAIN_LOG")) {
    FILE* f = std::fopen(log, "a");
    const char* threads = std::getenv("LMF_NUM_THREADS");
    std::fprintf(f, "%s threads=%s\n", name.c_str(), threads ? threads : "unset");
    std::fclose(f);
  }
  const auto sleep = [] {
    if (const char* ms = std::getenv("FAKE_TRAIN_SLEEP_MS")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(ms)));
    }
  };
  // FAKE_TRAIN_PINNED_FIRST: the run writes its pinned checkpoints, then sleeps (a trunk passing its branch
  // points early); else it sleeps first.
  const bool pinned_first = std::getenv("FAKE_TRAIN_PINNED_FIRST") != nullptr;
  if (!pinned_first) sleep();
  // metrics.jsonl of a trainer that completed its first six steps.
  auto write_six_steps = [&] {
    std::string metrics;
    for (int64_t step = 1; step <= 6; ++step) {
      lmf::experiments::StepMetrics m;
      m.step = step;
      m.tokens = step * lmf::config::TokensPerStep(*e);
      m.loss = 5;
      metrics += lmf::experiments::MetricsJsonLine(m);
    }
    return lmf::WriteFileAtomically("metrics.jsonl", metrics).ok();
  };
  if (const char* diverge = std::getenv("FAKE_TRAIN_DIVERGE");
      diverge && name.find(diverge) != std::string::npos) {
    // Diverged at step 7, its result written as an older build did: without the tokens it trained.
    if (!write_six_steps()) return 8;
    lmf::config::SweepRunResult result;
    result.set_status(lmf::config::SweepRunResult::DIVERGED);
    result.set_message("step 7: loss is nan");
    char cwd[4096];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) return 5;
    return lmf::sweep::WriteRunResult(cwd, result).ok() ? 3 : 6;
  }
  if (const char* fail = std::getenv("FAKE_TRAIN_FAIL"); fail && name.find(fail) != std::string::npos) {
    // Like a trainer that crashes after its sixth step: metrics.jsonl holds the steps it completed.
    if (!write_six_steps()) return 8;
    std::fprintf(stderr, "fake trainer: failing %s on purpose\n", name.c_str());
    return 1;
  }
  // Like the trainer: resume after the newest checkpoint; write the pinned steps after it and the last one.
  const std::vector<int64_t> saved = lmf::experiments::ListCheckpointSteps("checkpoints");
  const int64_t resumed = saved.empty() ? 0 : saved.back();
  // A branch with no checkpoint of its own starts from its trunk's (run.init_from), which must be there.
  if (const std::string& from = e->run().init_from(); !from.empty() && resumed == 0) {
    if (!lmf::FileExists(from + "/trainer_state.textproto")) {
      std::fprintf(stderr, "fake trainer: run.init_from=%s: no checkpoint there\n", from.c_str());
      return 7;
    }
  }
  std::vector<int64_t> writes(e->run().checkpoint_steps().begin(), e->run().checkpoint_steps().end());
  writes.push_back(lmf::config::TotalSteps(*e));
  for (const int64_t step : writes) {
    if (step <= resumed) continue;
    // A real checkpoint folder (state file with its digests) holding no tensors: it verifies as the
    // trainer's do, and a test can damage it.
    lmf::experiments::CheckpointContents contents;
    contents.state.set_step(step);
    if (!lmf::experiments::SaveCheckpoint("checkpoints", contents, /*keep=*/1000).ok()) return 8;
  }
  if (pinned_first) sleep();
  const auto& m = e->model();
  const double n = 12.0 * m.n_layers() * m.d_model() * m.d_model();
  const double d =
      static_cast<double>(lmf::config::TotalSteps(*e)) * lmf::config::TokensPerStep(*e);
  const double loss = 1.8 + 300.0 / std::pow(n, 0.33) + 500.0 / std::pow(d, 0.29);
  lmf::config::SweepRunResult result;
  result.set_status(lmf::config::SweepRunResult::FINISHED);
  result.set_final_loss(loss);
  result.set_best_val_loss(loss);
  result.set_tokens(d);
  char cwd[4096];
  if (::getcwd(cwd, sizeof(cwd)) == nullptr) return 5;
  return lmf::sweep::WriteRunResult(cwd, result).ok() ? 0 : 6;
}
