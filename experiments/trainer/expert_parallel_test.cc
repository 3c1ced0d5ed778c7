// Expert parallelism through the trainer (expert_parallel.h): tiny_moe (8 experts, top-2, shared experts,
// balancing and router z-losses, gradient clipping) trained 8 steps with run.parallel.expert=2 (the test
// process is rank 0 and starts rank 1 as the train binary) is the single-process run: the same losses and
// aux losses to 1e-5 relative, and a final checkpoint holding every expert under its global name with the
// single-process run's weights to 1e-4 of the largest (measured: 2e-5 absolute against a largest near 3). The
// ranks sum the gradients in another order than one process accumulates them, and the tokens of an expert
// run in another order, so the runs agree to fp32 rounding amplified over 8 AdamW steps (whose first updates
// divide tiny gradients by their own size); a real mistake (a rank's tokens lost, a block's gradient summed
// over the wrong ranks) moves the loss in the second decimal. A run stopped after step 6 and resumed from
// its step-4 checkpoint (each rank taking its own experts from the gathered checkpoint) ends bit-identical to
// the uninterrupted one. ZeRO-1 with data=2 x expert=2 is that run without ZeRO bit for bit, and its
// checkpoint resumes in one process and at (data=1, expert=2) with the same next loss.
// With noisy top-k gating (its noise keyed by run.seed, the step and each token's index in the step) the
// two runs agree to the same tolerances.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file.h"
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
  static const std::string path = testing::WriteRandomTokens("ep_train.tok", 7);
  return path;
}

// tiny_moe on data x expert processes, `accum` micro-batches a step.
config::Experiment TinyMoe(const std::string& run, int expert, int data = 1, int accum = 2,
                           std::vector<std::string> more = {}) {
  std::vector<std::string> o = {"data.train_tokens=" + TrainTokens(), "run.output_dir=" + TempPath(run),
                                absl::StrCat("run.parallel.expert=", expert), absl::StrCat("run.parallel.data=", data),
                                absl::StrCat("run.grad_accum_steps=", accum),
                                "run.batch_size=4", "run.max_steps=8", "run.checkpoint_interval=4",
                                "run.keep_checkpoints=3", "schedule.warmup=2"};
  o.insert(o.end(), more.begin(), more.end());
  auto loaded = config::LoadExperiment("experiments/configs/tiny_moe.textproto", o);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return *loaded;
}

TrainOptions Options(int64_t stop_after_step = 0, bool resume = false) {
  TrainOptions options;
  options.console = std::fopen("/dev/null", "w");
  options.stop_after_step = stop_after_step;
  options.resume = resume;
  options.data_parallel_command = {std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/train"};
  return options;
}

std::vector<StepMetrics> Metrics(const std::string& run) {
  auto metrics = ReadMetricsLog(TempPath(run) + "/metrics.jsonl");
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  return metrics.ok() ? *metrics : std::vector<StepMetrics>{};
}

// Name -> values of the final checkpoint's model tensors.
std::map<std::string, std::vector<float>> FinalWeights(const std::string& run) {
  std::map<std::string, std::vector<float>> out;
  auto loaded = LoadCheckpoint(TempPath(run) + "/checkpoints/step_00000008");
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  if (!loaded.ok()) return out;
  for (const auto& [name, tensor] : loaded->model.tensors()) {
    auto values = loaded->model.ReadFloat(name);
    EXPECT_TRUE(values.ok()) << values.status();
    if (values.ok()) out[name] = *values;
  }
  return out;
}

// Trains `single` in one process and `parallel` on two expert ranks and compares them.
void ExpectTwoExpertRanksTrainTheSingleProcessRun(const std::string& single, const std::string& parallel,
                                                  bool noisy_gating) {
  const std::string noise = noisy_gating ? "model.moe.noisy_gating=true" : "model.moe.noisy_gating=false";
  ASSERT_TRUE(Train(TinyMoe(single, 1, 1, 2, {noise}), Options()).ok());
  auto trained = Train(TinyMoe(parallel, 2, 1, 2, {noise}), Options());
  ASSERT_TRUE(trained.ok()) << trained.status();
  const std::vector<StepMetrics> one = Metrics(single), two = Metrics(parallel);
  ASSERT_EQ(one.size(), 8u);
  ASSERT_EQ(two.size(), 8u) << "one metrics log, written by rank 0";
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(two[i].loss, one[i].loss, 1e-5 * one[i].loss) << "step " << i + 1;
    ASSERT_TRUE(one[i].aux_loss.has_value() && two[i].aux_loss.has_value());
    EXPECT_NEAR(*two[i].aux_loss, *one[i].aux_loss, 1e-5 * *one[i].aux_loss) << "step " << i + 1;
    EXPECT_NEAR(two[i].grad_norm, one[i].grad_norm, 1e-5 * one[i].grad_norm) << "step " << i + 1;
  }
  const auto a = FinalWeights(single), b = FinalWeights(parallel);
  ASSERT_EQ(a.size(), b.size()) << "the checkpoint holds every expert";
  ASSERT_TRUE(a.count("layers.1.ffn.experts.7.w2.weight") == 1 && b.count("layers.1.ffn.experts.7.w2.weight") == 1);
  double max_diff = 0, max_abs = 0;
  for (const auto& [name, values] : a) {
    ASSERT_EQ(b.count(name), 1u) << name;
    ASSERT_EQ(b.at(name).size(), values.size()) << name;
    for (size_t i = 0; i < values.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(values[i] - b.at(name)[i])));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(values[i])));
    }
  }
  EXPECT_LT(max_diff, 1e-4 * max_abs);
  std::printf("expert parallel (2 ranks) vs one process over 8 steps%s: last loss %.6f vs %.6f, weights within %.3g of %.3g\n",
              noisy_gating ? " (noisy gating)" : "", two.back().loss, one.back().loss, max_diff, max_abs);
}

TEST(ExpertParallelTraining, TwoExpertRanksTrainTheSingleProcessRun) {
  ExpectTwoExpertRanksTrainTheSingleProcessRun("ep_single", "ep_2", false);
}

TEST(ExpertParallelTraining, TwoExpertRanksTrainTheSingleProcessRunWithNoisyGating) {
  ExpectTwoExpertRanksTrainTheSingleProcessRun("ep_single_noisy", "ep_2_noisy", true);
  ASSERT_TRUE(FinalWeights("ep_single_noisy").count("layers.1.ffn.router.noise.weight") == 1);
}

TEST(ExpertParallelTraining, AResumedRunIsBitIdentical) {
  ASSERT_TRUE(Train(TinyMoe("ep_straight", 2), Options()).ok());
  TrainOptions killed = Options();
  killed.stop_after_step = 6;  // every rank ends after step 6; the last checkpoint is at 4
  ASSERT_TRUE(Train(TinyMoe("ep_resumed", 2), killed).ok());
  TrainOptions resume = Options();
  resume.resume = true;
  auto resumed = Train(TinyMoe("ep_resumed", 2), resume);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    auto x = ReadFile(TempPath("ep_straight/checkpoints/step_00000008/") + file);
    auto y = ReadFile(TempPath("ep_resumed/checkpoints/step_00000008/") + file);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_TRUE(*x == *y) << file << " differs";
  }
}

// ZeRO-1 with expert parallelism (run.parallel.zero_stage=1): the dense parameters' moments are sharded over
// all data x expert ranks, each expert block's over the data ranks that hold it. Every owner updates from
// the same summed gradient and global norm as without ZeRO and broadcasts, so (data=2, expert=2) with
// ZeRO-1 is the run without it bit for bit (losses, aux losses, norms, both checkpoint files: the shards
// consolidate onto each group's first rank before the experts are gathered under their global names). Each
// part is sharded over two ranks or more, so each rank's console line reports less than its parameters'
// moments: at most half plus one largest parameter's per part.
TEST(ExpertParallelTraining, ZeroOneTrainsTheSameRunBitForBit) {
  ASSERT_TRUE(Train(TinyMoe("ep_2x2_plain", 2, 2, 4), Options()).ok());
  TrainOptions options = Options();
  const std::string console = TempPath("ep_2x2_zero_console.txt");
  options.console = std::fopen(console.c_str(), "w");
  auto zero = Train(TinyMoe("ep_2x2_zero", 2, 2, 4, {"run.parallel.zero_stage=1"}), options);
  std::fclose(options.console);
  ASSERT_TRUE(zero.ok()) << zero.status();
  const std::vector<StepMetrics> plain = Metrics("ep_2x2_plain"), sharded = Metrics("ep_2x2_zero");
  ASSERT_EQ(plain.size(), 8u);
  ASSERT_EQ(sharded.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(sharded[i].loss, plain[i].loss) << "step " << i + 1;
    EXPECT_EQ(sharded[i].aux_loss, plain[i].aux_loss) << "step " << i + 1;
    EXPECT_EQ(sharded[i].grad_norm, plain[i].grad_norm) << "step " << i + 1;
  }
  for (const char* step : {"step_00000004/", "step_00000008/"}) {
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      auto x = ReadFile(TempPath("ep_2x2_plain/checkpoints/") + step + file);
      auto y = ReadFile(TempPath("ep_2x2_zero/checkpoints/") + step + file);
      ASSERT_TRUE(x.ok() && y.ok()) << step << file;
      EXPECT_TRUE(*x == *y) << step << file << " differs";
    }
  }
  int64_t largest = 0;  // bytes of one parameter's two moments
  for (const auto& [name, values] : FinalWeights("ep_2x2_zero")) {
    largest = std::max(largest, static_cast<int64_t>(2 * sizeof(float) * values.size()));
  }
  for (int rank = 0; rank < 4; ++rank) {
    auto log = ReadFile(rank == 0 ? console : TempPath("ep_2x2_zero") + absl::StrCat("/rank_", rank, ".log"));
    ASSERT_TRUE(log.ok()) << log.status();
    std::smatch m;
    const std::regex line(R"(ZeRO-1: this rank holds (\d+) of the (\d+) bytes of AdamW moments)");
    ASSERT_TRUE(std::regex_search(*log, m, line)) << "rank " << rank << ":\n" << *log;
    const int64_t held = std::stoll(m[1].str()), whole = std::stoll(m[2].str());
    EXPECT_LE(held, whole / 2 + 2 * largest) << "rank " << rank;
    EXPECT_LT(held, whole) << "rank " << rank;
    std::printf("ZeRO-1, (data=2, expert=2): rank %d holds %lld of its %lld bytes of moments (%.2f)\n", rank,
                static_cast<long long>(held), static_cast<long long>(whole),
                static_cast<double>(held) / static_cast<double>(whole));
  }
}

// A checkpoint of (data=2, expert=2, ZeRO-1) resumes in one process and at (data=1, expert=2, ZeRO-1),
// where each expert block has one replica and its owner keeps its moments whole (the dense ones still
// sharded over the two ranks), with the same next loss. The forward of step 5 reads the same weights and
// data; its experts' rows are grouped differently over the ranks (GEMMs of other sizes), so the losses
// agree to fp32 rounding, 1e-6 relative (a wrong expert block or moment moves the loss in the third digit).
TEST(ExpertParallelTraining, AZeroOneCheckpointResumesInOtherLayouts) {
  auto first = Train(TinyMoe("ep_zero_reshard", 2, 2, 4, {"run.parallel.zero_stage=1"}), Options(/*stop_after_step=*/5));
  ASSERT_TRUE(first.ok()) << first.status();
  const double want = first->last_loss;
  for (const auto& [expert, data, zero] : {std::make_tuple(1, 1, 0), std::make_tuple(2, 1, 1)}) {
    auto resumed = Train(TinyMoe("ep_zero_reshard", expert, data, 4, {absl::StrCat("run.parallel.zero_stage=", zero)}),
                         Options(/*stop_after_step=*/5, /*resume=*/true));
    ASSERT_TRUE(resumed.ok()) << "expert=" << expert << " data=" << data << ": " << resumed.status();
    EXPECT_NEAR(resumed->last_loss, want, 1e-6 * want) << "expert=" << expert << " data=" << data;
    std::printf("ZeRO-1 (data=2, expert=2) checkpoint resumed at (data=%d, expert=%d, zero=%d): step 5 loss %.9g vs %.9g\n",
                data, expert, zero, resumed->last_loss, want);
  }
}

}  // namespace
}  // namespace lmf::experiments
