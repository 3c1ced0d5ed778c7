// Data parallelism on the CPU (data_parallel.h): the test process is rank 0 and starts the other ranks as
// the train binary. A run on 2 or 4 processes is the single-process run up to the order of its gradient
// sums; a killed data-parallel run resumed on the same processes is bit-identical to an uninterrupted one.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/thread_pool.h"
#include "config/loader.h"
#include "experiments/checkpoint/checkpoint.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/trainer/trainer.h"
#include "experiments/trainer/trainer_testing.h"
#include "gtest/gtest.h"

namespace lmf::experiments {
namespace {

using testing::TempPath;

const std::string& TrainTokens() {
  static const std::string path = testing::WriteRandomTokens("dp_train.tok", 5);
  return path;
}

config::Experiment Tiny(const std::string& run, int data, int accum, std::vector<std::string> more = {}) {
  std::vector<std::string> o = {"data.train_tokens=" + TrainTokens(),
                                "run.output_dir=" + TempPath(run),
                                absl::StrCat("run.parallel.data=", data),
                                absl::StrCat("run.grad_accum_steps=", accum),
                                "run.max_steps=12",
                                "run.checkpoint_interval=4",
                                "run.keep_checkpoints=5"};
  o.insert(o.end(), more.begin(), more.end());
  auto loaded = config::LoadExperiment("experiments/configs/tiny.textproto", o);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return *loaded;
}

TrainOptions Options() {
  TrainOptions options;
  options.console = std::fopen("/dev/null", "w");
  options.data_parallel_command = {std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/train"};
  return options;
}

std::vector<StepMetrics> Metrics(const std::string& run) {
  auto metrics = ReadMetricsLog(TempPath(run) + "/metrics.jsonl");
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  return metrics.ok() ? *metrics : std::vector<StepMetrics>{};
}

std::vector<float> Weights(const std::string& run) {
  return testing::CheckpointWeights(TempPath(run) + "/checkpoints/step_00000012");
}

// The ranks' gradients are summed in another order than one process accumulates them (the GEMMs add each
// micro-batch into the gradient as they go), so the runs agree to fp32 rounding, amplified over 12 AdamW
// steps (whose update divides by sqrt(v) + 1e-8): measured 2e-9 relative in the loss and ~1e-7 in the
// weights; the bounds leave two orders of magnitude.
TEST(DataParallel, TwoAndFourProcessesTrainTheSingleProcessRun) {
  ASSERT_TRUE(Train(Tiny("dp_single", 1, 4), Options()).ok());
  for (const int data : {2, 4}) {
    const std::string run = absl::StrCat("dp_", data);
    auto trained = Train(Tiny(run, data, 4), Options());
    ASSERT_TRUE(trained.ok()) << trained.status();
    const std::vector<StepMetrics> one = Metrics("dp_single"), many = Metrics(run);
    ASSERT_EQ(many.size(), 12u) << "one metrics log, written by rank 0";
    for (size_t i = 0; i < one.size(); ++i) {
      EXPECT_EQ(many[i].tokens, one[i].tokens);
      EXPECT_EQ(many[i].lr, one[i].lr);
      EXPECT_NEAR(many[i].loss, one[i].loss, 1e-6 * one[i].loss) << "step " << i + 1;
    }
    const std::vector<float> a = Weights("dp_single"), b = Weights(run);
    ASSERT_EQ(a.size(), b.size());
    double max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[i] - b[i])));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(a[i])));
    }
    EXPECT_LT(max_diff, 1e-5 * max_abs) << data << " processes";
    for (int rank = 1; rank < data; ++rank) {
      auto log = ReadFile(TempPath(run) + absl::StrCat("/rank_", rank, ".log"));
      ASSERT_TRUE(log.ok()) << log.status();
      EXPECT_NE(log->find(absl::StrCat("data parallel rank ", rank, ": 12 steps")), std::string::npos)
          << *log;
    }
  }
}

TEST(DataParallel, AResumedRunIsBitIdentical) {
  ASSERT_TRUE(Train(Tiny("dp_straight", 2, 2), Options()).ok());
  TrainOptions killed = Options();
  killed.stop_after_step = 10;  // every rank ends after step 10, as a kill would; the last checkpoint is at 8
  ASSERT_TRUE(Train(Tiny("dp_resumed", 2, 2), killed).ok());
  TrainOptions resume = Options();
  resume.resume = true;
  ASSERT_TRUE(Train(Tiny("dp_resumed", 2, 2), resume).ok());
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    auto x = ReadFile(TempPath("dp_straight/checkpoints/step_00000012/") + file);
    auto y = ReadFile(TempPath("dp_resumed/checkpoints/step_00000012/") + file);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_TRUE(*x == *y) << file << " differs";
  }
  // rank_1.log is appended to: the killed attempt's lines stay, and each start begins with a dated line.
  auto log = ReadFile(TempPath("dp_resumed/rank_1.log"));
  ASSERT_TRUE(log.ok()) << log.status();
  const std::regex start_line(R"(==== \d{4}-\d\d-\d\d \d\d:\d\d:\d\d: data parallel rank 1 of 2 starts)");
  const auto starts = std::distance(std::sregex_iterator(log->begin(), log->end(), start_line),
                                    std::sregex_iterator());
  EXPECT_EQ(starts, 2) << *log;
  EXPECT_NE(log->find("(--resume)"), std::string::npos) << *log;
}

// run.parallel.zero_stage: 1 shards the AdamW moments; each parameter's update is the unsharded one (same
// summed gradient and norm), so the run is data parallelism's bit for bit, and its checkpoints hold every
// moment: resumed without ZeRO, it goes on as the same run.
TEST(DataParallel, ZeroOneTrainsTheSameRunAndResumesWithoutIt) {
  ASSERT_TRUE(Train(Tiny("dp_plain", 2, 2), Options()).ok());
  TrainOptions killed = Options();
  killed.stop_after_step = 10;
  ASSERT_TRUE(Train(Tiny("dp_zero", 2, 2, {"run.parallel.zero_stage=1"}), killed).ok());
  ASSERT_TRUE(Train(Tiny("dp_zero_full", 2, 2, {"run.parallel.zero_stage=1"}), Options()).ok());
  TrainOptions resume = Options();
  resume.resume = true;
  ASSERT_TRUE(Train(Tiny("dp_zero", 2, 2), resume).ok());  // the checkpoint at step 8, without ZeRO
  for (const char* run : {"dp_zero_full", "dp_zero"}) {
    for (const char* step : {"step_00000008/", "step_00000012/"}) {
      for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
        auto x = ReadFile(TempPath("dp_plain/checkpoints/") + step + file);
        auto y = ReadFile(TempPath(run) + "/checkpoints/" + step + file);
        ASSERT_TRUE(x.ok() && y.ok()) << run << " " << step << file;
        EXPECT_TRUE(*x == *y) << run << " " << step << file << " differs";
      }
    }
  }
  const std::vector<StepMetrics> plain = Metrics("dp_plain"), zero = Metrics("dp_zero_full");
  ASSERT_EQ(plain.size(), zero.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(plain[i].loss, zero[i].loss) << "step " << i + 1;
}

// Every rank runs the thread count the run asks for (here LMF_NUM_THREADS), rank 0 included, although this
// process made its default pool earlier with another count: rank 0 does not train on that pool, nor hand its
// count to the workers.
TEST(DataParallel, EveryRankRunsTheRunsThreadCount) {
  const int made = ThreadPool::Default().num_threads();
  const int asked = made == 1 ? 2 : 1;
  ASSERT_EQ(::setenv("LMF_NUM_THREADS", std::to_string(asked).c_str(), /*overwrite=*/1), 0);
  TrainOptions options = Options();
  const std::string console = TempPath("dp_threads_console.log");
  options.console = std::fopen(console.c_str(), "w");
  auto trained = Train(Tiny("dp_threads", 2, 2), options);
  std::fclose(options.console);
  ::unsetenv("LMF_NUM_THREADS");
  ASSERT_TRUE(trained.ok()) << trained.status();
  EXPECT_EQ(ThreadPool::Default().num_threads(), made);
  const std::string device = absl::StrCat("device: CPU (", asked, " threads)");
  for (const std::string& log : {console, TempPath("dp_threads/rank_1.log")}) {
    auto text = ReadFile(log);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_NE(text->find(device), std::string::npos) << log << ":\n" << *text;
  }
}

// A worker that cannot start is named at once (not after the group's connect timeout), with its log.
TEST(DataParallel, AWorkerThatCannotStartIsNamed) {
  TrainOptions options = Options();
  options.data_parallel_command = {"/bin/false"};
  const auto start = std::chrono::steady_clock::now();
  auto trained = Train(Tiny("dp_false", 2, 2), options);
  ASSERT_FALSE(trained.ok());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
  EXPECT_NE(trained.status().message().find("run.parallel.data=2: rank 1 exited with status 1 ("),
            std::string::npos)
      << trained.status();
}

// A worker that says it is up and then dies before joining the group (a Gloo device that fails, say) is
// named as soon as it exits, not after the group's 60 s connect timeout.
TEST(DataParallel, AWorkerThatDiesAfterStartingIsNamed) {
  TrainOptions options = Options();
  options.data_parallel_command = {"/bin/sh", "-c",
                                   "set -- $LMF_DATA_PARALLEL_WORKER; : > \"$6/ready.$1\"; echo gloo device "
                                   "failed >&2; sleep 0.3; exit 3"};
  const auto start = std::chrono::steady_clock::now();
  auto trained = Train(Tiny("dp_dies", 2, 2), options);
  ASSERT_FALSE(trained.ok());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
  EXPECT_NE(trained.status().message().find("rank 1 exited with status 3 ("), std::string::npos)
      << trained.status();
  EXPECT_NE(trained.status().message().find("gloo device failed"), std::string::npos) << trained.status();
  // Named by the connect's abort (the worker is up and waited on at the rendezvous when it dies).
  EXPECT_NE(trained.status().message().find("could not connect via "), std::string::npos) << trained.status();
}

TEST(DataParallel, ConfigErrorsNameTheField) {
  auto loaded = config::LoadExperiment("experiments/configs/tiny.textproto",
                               {"data.train_tokens=x.tok", "run.parallel.data=2", "run.grad_accum_steps=3"});
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(
      loaded.status().message().find("run.grad_accum_steps=3 must be a multiple of run.parallel.data=2"),
      std::string::npos)
      << loaded.status();
  loaded = config::LoadExperiment("experiments/configs/tiny.textproto",
                          {"data.train_tokens=x.tok", "run.parallel.data=0"});
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("run.parallel.data=0 must be 1 to 256 processes"),
            std::string::npos)
      << loaded.status();
  loaded = config::LoadExperiment("experiments/configs/tiny.textproto",
                                  {"data.train_tokens=x.tok", "run.parallel.zero_stage=2"});
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("run.parallel.zero_stage=2 must be 0 (off) or 1"), std::string::npos)
      << loaded.status();
}

}  // namespace
}  // namespace lmf::experiments
