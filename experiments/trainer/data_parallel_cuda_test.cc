// Data parallelism on GPUs (tag "gpu"; skips without enough devices; in CI on the CUDA emulation with its
// fake NCCL: //experiments/trainer:data_parallel_cuda_test_emulated). Each rank is a forked process that
// joins a Gloo group (the trainer's host group, distributed/test_ranks.h) and trains through Train on its own
// device, its NCCL group meeting through a rendezvous folder (TrainOptions::store), as the train binary's
// ranks do under any launcher. A tiny model (1 layer, d_model 32, one head, T 16) keeps the emulated runs
// short.
// Checks:
//   - 2 and 3 ranks train the single-device run on the same global batch (6 micro-batches a step): the loss
//     of every step, and the weights of the checkpoints;
//   - a checkpoint written at data=2 resumes on one device and gives the same next loss;
//   - a mixture of experts (4 experts, top-2) at data=1 x expert=2 and data=2 x expert=2 trains the
//     single-device run (same loss bounds and final weights);
//   - ZeRO-1 (run.parallel.zero_stage: 1) at data=2, and at data=2 x expert=2 with the mixture of experts,
//     is the same layout's run without it bit for bit (losses, and the checkpoints' weights and AdamW
//     moments, byte for byte: the same summed gradients and norm, each update on its owner, broadcast), and
//     each rank holds a part of the moments that add up to the whole (its log's "ZeRO-1: this rank holds");
//   - pipelines (data=1 and data=2 x pipeline=2, 1F1B; ZeRO-1; bf16 with tied embeddings), their messages
//     over NCCL with sends that wait for their receives, train the single-device run (and
//     evaluate it; a checkpoint resumes on one device), and so do interleaved 1F1B and ZB-H1 at
//     pipeline=2, and a mixture of experts at pipeline=2 x expert=2 (with ZeRO-1 that run bit for bit);
//   - the gradient sums overlapped with the backward are the run with them after it, bit for bit;
//   - a rank that dies makes the other fail within the group's timeout, naming it.
//
// Tolerances: the ranks' partial gradients are summed in another order than one device accumulates them
// (the backward's GEMMs add each micro-batch into the gradient; the ranks add two or three partial sums), so
// the runs differ by fp32 rounding, amplified by AdamW (it divides by sqrt(v) + eps): the bounds of the CPU's
// data_parallel_test, 1e-6 relative in the loss and 1e-5 of the largest weight.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "config/loader.h"
#include "distributed/test_ranks.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/trainer/trainer.h"
#include "experiments/trainer/trainer_testing.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_context.h"

namespace lmf::experiments {
namespace {

using testing::TempPath;

constexpr int kMicroBatches = 6;  // per step: 3 a rank at data=2, 2 at data=3
constexpr int kMoeMicroBatches = 4;  // per step: 2 a rank at expert=2, 1 at data=2 x expert=2
constexpr int kSteps = 3;
constexpr double kLossTolerance = 1e-6;    // relative (see the top of the file)
constexpr double kWeightTolerance = 1e-5;  // of the largest weight
// bf16 runs: the compute copies of weights that differ by fp32 rounding can round to neighbouring bf16
// values (2^-8 relative), so the losses may differ by more than fp32 rounding; far less than one step's change.
constexpr double kBf16LossTolerance = 1e-4;  // relative

const std::string& TrainTokens() {
  static const std::string path = testing::WriteRandomTokens("dp_cuda_train.tok", 7);
  return path;
}

// `config_file` cut to the tiny size by `model` (its own fields) on `data` ranks, `more` last.
config::Experiment Load(const std::string& config_file, const std::string& run, int data,
                        std::vector<std::string> model, std::vector<std::string> more) {
  std::vector<std::string> o = {"data.train_tokens=" + TrainTokens(),
                                "run.output_dir=" + TempPath(run),
                                "model.d_model=32",
                                "model.n_layers=1",
                                "model.n_heads=1",
                                "model.context_length=16",
                                "run.batch_size=2",
                                "run.device=CUDA",
                                "run.precision=FP32",
                                absl::StrCat("run.parallel.data=", data),
                                absl::StrCat("run.grad_accum_steps=", kMicroBatches),
                                absl::StrCat("run.max_steps=", kSteps),
                                "run.parallel.timeout_seconds=20",
                                "run.checkpoint_interval=2",
                                "run.keep_checkpoints=5",
                                "schedule.warmup=1",
                                "logging.log_interval=1"};
  o.insert(o.end(), model.begin(), model.end());
  o.insert(o.end(), more.begin(), more.end());
  auto loaded = config::LoadExperiment(config_file, o);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return *loaded;
}

config::Experiment Tiny(const std::string& run, int data, std::vector<std::string> more = {}) {
  return Load("experiments/configs/tiny.textproto", run, data, {"model.ffn.d_ff=64"}, std::move(more));
}

// tiny_moe at Tiny's size, its one layer a mixture of 4 experts (top-2, one shared) on data x `expert`
// ranks, kMoeMicroBatches a step.
config::Experiment TinyMoe(const std::string& run, int data, int expert, std::vector<std::string> more = {}) {
  more.push_back(absl::StrCat("run.parallel.expert=", expert));
  more.push_back(absl::StrCat("run.grad_accum_steps=", kMoeMicroBatches));
  return Load("experiments/configs/tiny_moe.textproto", run, data,
              {"model.moe.n_experts=4", "model.moe.d_expert=32", "model.moe.shared_d_ff=32",
               "model.moe.first_k_dense=0"},
              std::move(more));
}

// Trains `experiment` on `world` forked ranks (one device each; a single-device run for 1) with
// `stop_after_step` and `resume`; true when every rank's Train returned OK. `logs`: each rank's output.
bool TrainOnRanks(const config::Experiment& experiment, int world, int64_t stop_after_step = 0,
                  bool resume = false, std::vector<std::string>* logs = nullptr) {
  const std::string store = experiment.run().output_dir() + "_store";
  EXPECT_TRUE(MakeDirs(store).ok());
  distributed::testing::RankOptions rank_options;
  rank_options.timeout = std::chrono::seconds(20);
  rank_options.deadline = std::chrono::seconds(900);  // emulated kernels are slow
  const auto outcomes = distributed::testing::RunRanks(
      world,
      [&](distributed::Collectives& group) {
        TrainOptions options;
        options.console = stderr;
        options.stop_after_step = stop_after_step;
        options.resume = resume;
        if (world > 1) {
          options.collectives = &group;
          options.store.dir = store;
          options.local_rank = group.rank();
        }
        absl::StatusOr<TrainResult> result = Train(experiment, options);
        if (!result.ok()) std::fprintf(stderr, "rank %d: %s\n", group.rank(), std::string(result.status().message()).c_str());
        return result.ok() ? 0 : 1;
      },
      rank_options);
  if (distributed::testing::ExitCodeOf(outcomes) != 0) return false;
  for (int rank = 0; rank < world && logs != nullptr; ++rank) logs->push_back(outcomes[rank].log);
  for (int rank = 0; rank < world && world > 1; ++rank) {  // each rank says which GPU it took
    const std::string said = absl::StrCat("data parallel rank ", rank, " trains on cuda:", rank, " (local rank ", rank);
    EXPECT_TRUE(absl::StrContains(outcomes[rank].log, said)) << "rank " << rank << "'s log:\n" << outcomes[rank].log;
  }
  return true;
}

std::vector<StepMetrics> Metrics(const std::string& run) {
  auto metrics = ReadMetricsLog(TempPath(run) + "/metrics.jsonl");
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  return metrics.ok() ? *metrics : std::vector<StepMetrics>{};
}

std::vector<float> Weights(const std::string& run, int step) {
  return testing::CheckpointWeights(TempPath(run) + absl::StrFormat("/checkpoints/step_%08d", step));
}

void ExpectWeightsAgree(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[i] - b[i])));
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(a[i])));
  }
  EXPECT_LT(max_diff, kWeightTolerance * max_abs) << what;
}

// Run `run` against `reference` (the same training in another layout): the same tokens and, to the
// tolerances above, the loss of every step and the last checkpoint's weights.
void ExpectTheReferenceRun(const std::string& reference, const std::string& run, const std::string& layout) {
  const std::vector<StepMetrics> want = Metrics(reference), got = Metrics(run);
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps)) << reference;
  ASSERT_EQ(got.size(), want.size()) << layout;
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << layout;
    EXPECT_NEAR(got[i].loss, want[i].loss, kLossTolerance * want[i].loss) << layout << ", step " << i + 1;
  }
  ExpectWeightsAgree(Weights(reference, kSteps), Weights(run, kSteps), layout + ", last step");
}

// The last checkpoint's model.safetensors and optimizer.safetensors of runs `a` and `b`, byte for byte.
void ExpectSameCheckpointFiles(const std::string& a, const std::string& b, const std::string& what) {
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string step = absl::StrFormat("/checkpoints/step_%08d/", kSteps);
    absl::StatusOr<std::string> x = ReadFile(TempPath(a) + step + file), y = ReadFile(TempPath(b) + step + file);
    ASSERT_TRUE(x.ok() && y.ok()) << what << ": " << file;
    EXPECT_TRUE(*x == *y) << what << ": " << file << " differs";
  }
}

// `run` (trained with ZeRO-1) against `plain` (the same layout without it): the same losses and the same
// checkpoint files of the last step, byte for byte; and the moments each rank's log says it holds (some,
// not all, of its parameters') add up to the whole over `expert` = 1 ranks. With expert ranks, a rank's whole
// is the dense parameters' moments D (sharded over every rank) and its position's expert blocks' E (over
// their replicas): the ranks together hold D + expert * E, more than one whole, less than `expert` wholes.
// With `stages` pipeline stages (each a block of consecutive ranks), each stage's ranks hold its own whole.
void ExpectZeroIsThePlainRun(const std::string& plain, const std::string& run, const std::vector<std::string>& logs,
                             int expert, const std::string& layout, int stages = 1) {
  const std::vector<StepMetrics> want = Metrics(plain), got = Metrics(run);
  ASSERT_EQ(got.size(), want.size()) << layout;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i].loss, want[i].loss) << layout << ", step " << i + 1;
  ExpectSameCheckpointFiles(plain, run, layout + " against the run without ZeRO-1");
  const std::string kSays = "ZeRO-1: this rank holds ";
  const size_t stage_ranks = logs.size() / static_cast<size_t>(stages);
  for (size_t first = 0; first < logs.size(); first += stage_ranks) {  // each stage's ranks
    const std::string where = stages == 1 ? layout : absl::StrCat(layout, ", the stage of ranks ", first, "-",
                                                                  first + stage_ranks - 1);
    int64_t held_sum = 0, whole = -1;
    for (size_t rank = first; rank < first + stage_ranks; ++rank) {
      const size_t at = logs[rank].find(kSays);
      ASSERT_NE(at, std::string::npos) << where << ", rank " << rank << "'s log:\n" << logs[rank];
      // "<held> of the <whole> bytes of AdamW moments ..."
      const std::vector<std::string> words = absl::StrSplit(logs[rank].substr(at + kSays.size(), 64), ' ');
      int64_t held = 0, all = 0;
      ASSERT_TRUE(words.size() > 3 && absl::SimpleAtoi(words[0], &held) && absl::SimpleAtoi(words[3], &all))
          << logs[rank].substr(at, 120);
      EXPECT_GT(held, 0) << where << ", rank " << rank;
      EXPECT_LT(held, all) << where << ", rank " << rank;
      if (whole >= 0) {
        EXPECT_EQ(all, whole) << where << ": every rank's whole is the same";
      }
      whole = all;
      held_sum += held;
    }
    if (expert == 1) {
      EXPECT_EQ(held_sum, whole) << where;
    } else {
      EXPECT_GT(held_sum, whole) << where;
      EXPECT_LT(held_sum, expert * whole) << where;
    }
  }
}

class DataParallelCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kernels::cuda::CudaDeviceCount() < 3) GTEST_SKIP() << "needs 3 CUDA devices (one per rank)";
  }
};

TEST_F(DataParallelCudaTest, TwoAndThreeRanksTrainTheSingleDeviceRunAndResumeOnOne) {
  ASSERT_TRUE(TrainOnRanks(Tiny("one", 1), 1));
  const std::vector<StepMetrics> one = Metrics("one");
  ASSERT_EQ(one.size(), static_cast<size_t>(kSteps));

  // data=2, ended after step 3 as a kill would (its newest checkpoint is step 2's), then resumed on one device.
  ASSERT_TRUE(TrainOnRanks(Tiny("dp2", 2), 2, /*stop_after_step=*/kSteps));
  const std::vector<StepMetrics> two = Metrics("dp2");
  ASSERT_EQ(two.size(), static_cast<size_t>(kSteps)) << "one metrics log, written by rank 0";
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_EQ(two[i].tokens, one[i].tokens);
    EXPECT_NEAR(two[i].loss, one[i].loss, kLossTolerance * one[i].loss) << "data=2, step " << i + 1;
  }
  ExpectWeightsAgree(Weights("one", 2), Weights("dp2", 2), "data=2, step 2's checkpoint");
  ASSERT_TRUE(TrainOnRanks(Tiny("dp2", 1), 1, 0, /*resume=*/true));
  const std::vector<StepMetrics> resumed = Metrics("dp2");
  ASSERT_EQ(resumed.size(), static_cast<size_t>(kSteps));
  EXPECT_NEAR(resumed[kSteps - 1].loss, two[kSteps - 1].loss, kLossTolerance * two[kSteps - 1].loss)
      << "step 3 resumed on one device from data=2's checkpoint";
  ExpectWeightsAgree(Weights("one", kSteps), Weights("dp2", kSteps), "data=2 resumed at data=1, last step");

  ASSERT_TRUE(TrainOnRanks(Tiny("dp3", 3), 3));
  ExpectTheReferenceRun("one", "dp3", "data=3");
}

TEST_F(DataParallelCudaTest, ZeroOneIsTheSameRunWithTheMomentsSharded) {
  ASSERT_TRUE(TrainOnRanks(Tiny("zero_plain", 2), 2));
  std::vector<std::string> logs;
  ASSERT_TRUE(TrainOnRanks(Tiny("zero", 2, {"run.parallel.zero_stage=1"}), 2, 0, false, &logs));
  ExpectZeroIsThePlainRun("zero_plain", "zero", logs, /*expert=*/1, "data=2, ZeRO-1");
}

// The gradients summed during the last backward (run.parallel.overlap_grad_reduce, the default: each part's
// all-reduces on the NCCL group's stream after an event on the model's) and after it (false) are the same
// run bit for bit: the same per-parameter sums of the same gradients.
TEST_F(DataParallelCudaTest, OverlappedGradientSumsAreTheRunWithout) {
  ASSERT_TRUE(TrainOnRanks(Tiny("overlapped", 2), 2));
  ASSERT_TRUE(TrainOnRanks(Tiny("after_backward", 2, {"run.parallel.overlap_grad_reduce=false"}), 2));
  const std::vector<StepMetrics> overlapped = Metrics("overlapped"), after = Metrics("after_backward");
  ASSERT_EQ(overlapped.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(after.size(), overlapped.size());
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(overlapped[i].loss, after[i].loss) << "step " << i + 1;
  ExpectSameCheckpointFiles("overlapped", "after_backward", "the overlapped sums against those after the backward");
}

// Expert parallelism on GPUs: the experts spread over 2 ranks (data=1) and over 2 ranks of each of 2
// replicas (data=2), their rows exchanged and the expert blocks' gradients summed over NCCL, train the
// single-device run: the loss of every step and the last checkpoint (every expert under its global name).
TEST_F(DataParallelCudaTest, DataTimesExpertRanksTrainTheSingleDeviceMoeRun) {
  if (kernels::cuda::CudaDeviceCount() < 4) GTEST_SKIP() << "needs 4 CUDA devices (data=2 x expert=2)";
  ASSERT_TRUE(TrainOnRanks(TinyMoe("moe_one", 1, 1), 1));
  for (const auto& [data, expert] : {std::pair{1, 2}, std::pair{2, 2}}) {
    const std::string run = absl::StrCat("moe_dp", data, "_ep", expert);
    const std::string layout = absl::StrCat("data=", data, " x expert=", expert);
    ASSERT_TRUE(TrainOnRanks(TinyMoe(run, data, expert), data * expert)) << layout;
    ExpectTheReferenceRun("moe_one", run, layout);
  }
  // ZeRO-1 at data=2 x expert=2: the dense moments sharded over the 4 ranks, each expert block's over its 2
  // replicas.
  std::vector<std::string> logs;
  ASSERT_TRUE(TrainOnRanks(TinyMoe("moe_zero", 2, 2, {"run.parallel.zero_stage=1"}), 4, 0, false, &logs));
  ExpectZeroIsThePlainRun("moe_dp2_ep2", "moe_zero", logs, /*expert=*/2, "data=2 x expert=2, ZeRO-1");
}

// The fake NCCL's socket buffers at their smallest (a few KiB) while it lives, so that a send of the
// pipelines' messages (4 KiB and up) waits for its receive, as NCCL's do beyond its buffers: a schedule
// whose sends and receives waited on each other would time out. No effect on a GPU.
class SendsWaitForReceives {
 public:
  SendsWaitForReceives() { ::setenv("LMF_FAKE_NCCL_SOCKET_BYTES", "1", 1); }
  ~SendsWaitForReceives() { ::unsetenv("LMF_FAKE_NCCL_SOCKET_BYTES"); }
};

// Pipelines on GPUs: 2 stages (data=1) and 2 stages x 2 replicas (data=2) under 1F1B, the activations and
// their gradients sent device to device over NCCL (with sends that wait for their receives:
// SendsWaitForReceives), the replicas' gradients summed over NCCL, train the single-device run of the same
// 2-layer model (the tolerances above: the stages' norms and the replicas' gradients are summed in another
// order); ZeRO-1 at data=2 x pipeline=2 is that layout's run bit for bit; the validation loss at the end
// (evaluated through the stages) is the single device's too; a checkpoint written at data=2 x pipeline=2
// (ended after step 3, as a kill would: its newest is step 2's) resumes on one device with the same next
// loss; and in bf16 with tied embeddings (the hidden states cross in bf16, as one device keeps them; the
// token table's two gradients are summed by an all-reduce of the two stages) 2 stages train the
// single-device bf16 run to kBf16LossTolerance.
TEST_F(DataParallelCudaTest, PipelineStagesTrainTheSingleDeviceRun) {
  if (kernels::cuda::CudaDeviceCount() < 4) GTEST_SKIP() << "needs 4 CUDA devices (data=2 x pipeline=2)";
  SendsWaitForReceives small_buffers;
  const auto deep = [](const std::string& run, int data, int pipeline, std::vector<std::string> more = {}) {
    more.insert(more.begin(), {"model.n_layers=2", absl::StrCat("run.parallel.pipeline=", pipeline),
                               "data.val_tokens=" + TrainTokens(), "run.eval_tokens=128"});
    return Tiny(run, data, std::move(more));
  };
  ASSERT_TRUE(TrainOnRanks(deep("deep_one", 1, 1), 1));
  const std::vector<StepMetrics> one = Metrics("deep_one");
  ASSERT_EQ(one.size(), static_cast<size_t>(kSteps));
  for (const auto& [data, pipeline] : {std::pair{1, 2}, std::pair{2, 2}}) {
    const std::string run = absl::StrCat("deep_dp", data, "_pp", pipeline);
    const std::string layout = absl::StrCat("data=", data, " x pipeline=", pipeline);
    std::vector<std::string> logs;
    ASSERT_TRUE(TrainOnRanks(deep(run, data, pipeline), data * pipeline, 0, false, &logs)) << layout;
    EXPECT_TRUE(absl::StrContains(logs[0], "pipeline: rank 0 of")) << layout << ": rank 0's log:\n" << logs[0];
    ExpectTheReferenceRun("deep_one", run, layout);
    const std::vector<StepMetrics> got = Metrics(run);
    ASSERT_TRUE(one.back().val_loss.has_value() && !got.empty() && got.back().val_loss.has_value()) << layout;
    EXPECT_NEAR(*got.back().val_loss, *one.back().val_loss, kLossTolerance * *one.back().val_loss) << layout;
  }
  ASSERT_TRUE(TrainOnRanks(deep("deep_cut", 2, 2), 4, /*stop_after_step=*/kSteps));
  const std::vector<StepMetrics> cut = Metrics("deep_cut");
  ASSERT_EQ(cut.size(), static_cast<size_t>(kSteps));
  ASSERT_TRUE(TrainOnRanks(deep("deep_cut", 1, 1), 1, 0, /*resume=*/true));
  const std::vector<StepMetrics> resumed = Metrics("deep_cut");
  ASSERT_EQ(resumed.size(), static_cast<size_t>(kSteps));
  EXPECT_NEAR(resumed[kSteps - 1].loss, cut[kSteps - 1].loss, kLossTolerance * cut[kSteps - 1].loss)
      << "step 3 resumed on one device from data=2 x pipeline=2's checkpoint";
  std::vector<std::string> logs;
  ASSERT_TRUE(TrainOnRanks(deep("deep_zero", 2, 2, {"run.parallel.zero_stage=1"}), 4, 0, false, &logs));
  ExpectZeroIsThePlainRun("deep_dp2_pp2", "deep_zero", logs, /*expert=*/1, "data=2 x pipeline=2, ZeRO-1",
                          /*stages=*/2);

  // bf16 attention on CUDA takes heads of 64 or more.
  const std::vector<std::string> bf16 = {"run.precision=BF16", "model.d_model=64", "model.tied_embeddings=true"};
  ASSERT_TRUE(TrainOnRanks(deep("deep_bf16_one", 1, 1, bf16), 1));
  ASSERT_TRUE(TrainOnRanks(deep("deep_bf16_pp2", 1, 2, bf16), 2));
  const std::vector<StepMetrics> bf16_one = Metrics("deep_bf16_one"), bf16_pp2 = Metrics("deep_bf16_pp2");
  ASSERT_EQ(bf16_one.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(bf16_pp2.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) {
    std::fprintf(stderr, "bf16 step %d: one device %.9g, pipeline=2 %.9g\n", i + 1, bf16_one[i].loss, bf16_pp2[i].loss);
    EXPECT_NEAR(bf16_pp2[i].loss, bf16_one[i].loss, kBf16LossTolerance * bf16_one[i].loss) << "bf16, step " << i + 1;
  }
}

// The other schedules on GPUs: a 4-layer model at pipeline=2 under interleaved 1F1B (2 chunks per rank, so
// activations and gradients flow both ways between the two ranks, over four channels) and under ZB-H1 (its
// backward split into input and weight gradients) trains the single-device run (the tolerances above).
TEST_F(DataParallelCudaTest, PipelineSchedulesTrainTheSingleDeviceRun) {
  if (kernels::cuda::CudaDeviceCount() < 2) GTEST_SKIP() << "needs 2 CUDA devices (pipeline=2)";
  SendsWaitForReceives small_buffers;
  const auto deeper = [](const std::string& run, std::vector<std::string> more) {
    more.insert(more.begin(), {"model.n_layers=4", absl::StrCat("run.grad_accum_steps=", 4)});
    return Tiny(run, 1, std::move(more));
  };
  ASSERT_TRUE(TrainOnRanks(deeper("deeper_one", {}), 1));
  const std::vector<std::pair<std::string, std::vector<std::string>>> layouts = {
      {"interleaved", {"run.parallel.pipeline=2", "run.parallel.schedule=INTERLEAVED_1F1B",
                       "run.parallel.virtual_stages=2"}},
      {"zb_h1", {"run.parallel.pipeline=2", "run.parallel.schedule=ZB_H1"}}};
  for (const auto& [name, layout] : layouts) {
    ASSERT_TRUE(TrainOnRanks(deeper("deeper_" + name, layout), 2)) << name;
    ExpectTheReferenceRun("deeper_one", "deeper_" + name, "pipeline=2, " + name);
  }
}

// Pipeline x expert on GPUs: a 2-layer mixture of experts in 2 stages, each stage's 4 experts spread over 2
// ranks (data=1 x pipeline=2 x expert=2), the rows exchanged over the NCCL mesh's expert groups, trains the
// single-device run (the tolerances above); with ZeRO-1 (the dense moments over each stage's 2 ranks, the
// expert blocks' kept whole: one data replica) it is that layout's run bit for bit.
TEST_F(DataParallelCudaTest, PipelineByExpertTrainsTheSingleDeviceMoeRun) {
  if (kernels::cuda::CudaDeviceCount() < 4) GTEST_SKIP() << "needs 4 CUDA devices (pipeline=2 x expert=2)";
  SendsWaitForReceives small_buffers;
  const std::vector<std::string> deep = {"model.n_layers=2", "run.parallel.pipeline=2"};
  ASSERT_TRUE(TrainOnRanks(TinyMoe("moe_deep_one", 1, 1, {"model.n_layers=2"}), 1));
  ASSERT_TRUE(TrainOnRanks(TinyMoe("moe_pp2_ep2", 1, 2, deep), 4));
  ExpectTheReferenceRun("moe_deep_one", "moe_pp2_ep2", "pipeline=2 x expert=2");
  std::vector<std::string> zero = deep, logs;
  zero.push_back("run.parallel.zero_stage=1");
  ASSERT_TRUE(TrainOnRanks(TinyMoe("moe_pp2_ep2_zero", 1, 2, zero), 4, 0, false, &logs));
  ExpectZeroIsThePlainRun("moe_pp2_ep2", "moe_pp2_ep2_zero", logs, /*expert=*/2, "pipeline=2 x expert=2, ZeRO-1",
                          /*stages=*/2);
}

// Rank 1 ends after step 1 (its process exits, closing its connections); rank 0's step 2 fails within the
// group's timeout, naming rank 1.
TEST_F(DataParallelCudaTest, ADeadRankIsNamedWithinTheTimeout) {
  const config::Experiment experiment = Tiny("dead", 2, {"run.parallel.timeout_seconds=10"});
  const std::string store = experiment.run().output_dir() + "_store";
  ASSERT_TRUE(MakeDirs(store).ok());
  distributed::testing::RankOptions rank_options;
  rank_options.timeout = std::chrono::seconds(10);
  rank_options.deadline = std::chrono::seconds(600);
  const auto outcomes = distributed::testing::RunRanks(
      2,
      [&](distributed::Collectives& group) {
        distributed::testing::Checks checks(group.rank());
        TrainOptions options;
        options.console = stderr;
        options.collectives = &group;
        options.store.dir = store;
        options.local_rank = group.rank();
        if (group.rank() == 1) options.stop_after_step = 1;
        const auto start = std::chrono::steady_clock::now();
        absl::StatusOr<TrainResult> result = Train(experiment, options);
        if (group.rank() == 1) {
          checks.Ok(result.status(), "rank 1 trains one step");
          return checks.exit_code();
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        checks.FailsWith(result.status(), {"rank 1"}, "rank 0 names the rank that died");
        // One step's time (well under a minute, emulated) and the timeout, with room.
        checks.Expect(seconds < 120, absl::StrCat("rank 0 gave up after ", seconds, " s"));
        return checks.exit_code();
      },
      rank_options);
  distributed::testing::ExpectAllPassed(outcomes);
}

}  // namespace
}  // namespace lmf::experiments
