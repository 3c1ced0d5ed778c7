// Pipeline parallelism through the trainer (run.parallel.pipeline): the test process is rank 0 and starts
// the other ranks as the train binary. Every process runs one thread (LMF_NUM_THREADS=1 in the BUILD
// target), so that the GEMMs split their work alike in every layout. Checked: a (data=1, pipeline=2) run
// without clipping is the single-process run bit for bit (losses, validation loss and both checkpoint
// files), and so are a CPU bf16 run's 2 stages, interleaved 1F1B on 2 ranks x 2 chunks and ZB-H1 (split
// backward) on 2 and 4 ranks;
// (data=2, pipeline=2) with clipping agrees to
// fp32 rounding (its gradients are summed in another order); a checkpoint written at (2, 2) resumes at
// (4, 1) and at (1, 1), and one written at (1, 1) resumes at (1, 2), each with the same next loss (that
// step's forward reads the same weights and data: the losses agree to the double rounding of their sum
// over ranks, 1e-12 relative); ZeRO-1 (each stage's optimizer state sharded over its data replicas) is the
// run without it bit for bit, holds about 1/data of each stage's moments per rank, and its checkpoint
// resumes at (1, 1) and (4, 1); a rank killed during a pipeline run (1F1B, 1F1B with ZeRO-1, or ZB-H1) is
// named and the run ends within its timeout. The gradient noise scale a pipeline run logs is the single
// process's at data=1 and plain data parallelism's at data=2, to fp32 rounding.
//
// A mixture of experts (run.parallel.pipeline with model.moe): tiny_moe with 4 layers (layers 1-3 MoE),
// noisy top-k gating, the auxiliary-loss-free expert bias and a capacity that drops assignments, without
// clipping. Checked: (data=1, pipeline=2) under 1F1B and
// ZB-H1 is the single-process run bit for bit (losses, expert loads, dropped shares, validation loss and
// both checkpoint files, expert biases included), its aux losses to 1e-12 relative (the same doubles summed
// per stage, then over the ranks); a checkpoint written at (1, 2) resumes in one process, and one written
// in one process resumes at (1, 2), with the same next loss (that step reads the same weights, biases and
// data). Pipeline x expert (data=1, pipeline=2, expert=2: each stage's 8 experts over 2 ranks) is the
// single-process run to fp32 rounding (the tolerances of trainer/expert_parallel_test, whose reasons hold:
// an expert's rows arrive in another order and gradients are summed over ranks in another order): losses,
// aux losses and the validation loss to 1e-5 relative, the checkpoint's weights (every expert under its
// global name, gathered from both stages' expert ranks) to 1e-4 of the largest; its checkpoint resumes in one
// process with the same next loss to 1e-6 (the experts' rows grouped differently over the ranks). With ZeRO-1
// (dense moments over each stage's expert ranks, expert blocks' over their data ranks) that layout is the run
// without ZeRO bit for bit, every moment is held by one rank, and its checkpoint resumes in one process and
// in its own layout.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "config/loader.h"
#include "config/parallel_layout.h"
#include "experiments/checkpoint/checkpoint.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/trainer/trainer.h"
#include "experiments/trainer/trainer_testing.h"
#include "gtest/gtest.h"

namespace lmf::experiments {
namespace {

using testing::TempPath;

const std::string& Tokens() {
  static const std::string path = testing::WriteRandomTokens("pp_train.tok", 7);
  return path;
}

// The tiny config at (data, pipeline), 4 micro-batches a step, a checkpoint after step 2 and at the end,
// the validation loss at the end.
config::Experiment Tiny(const std::string& run, int data, int pipeline, std::vector<std::string> more = {}) {
  std::vector<std::string> o = {"data.train_tokens=" + Tokens(),
                                "data.val_tokens=" + Tokens(),
                                "run.eval_tokens=512",
                                "run.output_dir=" + TempPath(run),
                                absl::StrCat("run.parallel.data=", data),
                                absl::StrCat("run.parallel.pipeline=", pipeline),
                                "run.parallel.timeout_seconds=20",
                                "run.grad_accum_steps=4",
                                "run.max_steps=4",
                                "schedule.warmup=2",
                                "run.checkpoint_interval=2",
                                "run.keep_checkpoints=5"};
  o.insert(o.end(), more.begin(), more.end());
  auto loaded = config::LoadExperiment("experiments/configs/tiny.textproto", o);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return *loaded;
}

std::string TrainBinary() { return std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/train"; }

TrainOptions Options(int64_t stop_after_step = 0, bool resume = false) {
  TrainOptions options;
  options.console = std::fopen("/dev/null", "w");
  options.data_parallel_command = {TrainBinary()};
  options.stop_after_step = stop_after_step;
  options.resume = resume;
  return options;
}

std::vector<StepMetrics> Metrics(const std::string& run) {
  auto metrics = ReadMetricsLog(TempPath(run) + "/metrics.jsonl");
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  return metrics.ok() ? *metrics : std::vector<StepMetrics>{};
}

std::string File(const std::string& run, const std::string& name) {
  auto text = ReadFile(TempPath(run) + "/checkpoints/step_00000004/" + name);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

// Every step logs the gradient noise scale's parts (4 micro-batches a step), each equal to the reference
// run's (the same micro-batches split over as many data replicas) to fp32 rounding relative to the
// |g_small|^2 and |G_big|^2 terms it subtracts: 1e-6 of them (PipelineStep sums the squared norms over the
// stages and the gradients over the replicas in other orders; distributed/pipeline:pipeline_step_test).
void ExpectSameNoiseScale(const std::vector<StepMetrics>& want, const std::vector<StepMetrics>& got) {
  const config::Experiment tiny = Tiny("pp_noise_config", 1, 1);
  const double small = static_cast<double>(tiny.run().batch_size() * tiny.model().context_length());
  const double big = small * tiny.run().grad_accum_steps();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(want[i].noise_trace.has_value() && want[i].noise_grad_sq.has_value()) << "step " << i + 1;
    ASSERT_TRUE(got[i].noise_trace.has_value() && got[i].noise_grad_sq.has_value()) << "step " << i + 1;
    const double big_sq = want[i].grad_norm * want[i].grad_norm;
    const double small_sq = big_sq + *want[i].noise_trace * (1 / small - 1 / big);
    EXPECT_NEAR(*got[i].noise_grad_sq, *want[i].noise_grad_sq,
                1e-6 * (big * big_sq + small * small_sq) / (big - small))
        << "step " << i + 1;
    EXPECT_NEAR(*got[i].noise_trace, *want[i].noise_trace, 1e-6 * (small_sq + big_sq) / (1 / small - 1 / big))
        << "step " << i + 1;
  }
}

// `overrides` trained in one process (run `single`) and at (data=1, pipeline=2) (run `piped`): the same run
// bit for bit: every step's loss, the validation loss, and one model.safetensors with the single process's
// names, order and values (the optimizer's likewise).
void ExpectTwoStagesAreTheSingleProcess(const std::string& single, const std::string& piped,
                                        const std::vector<std::string>& overrides) {
  auto one_run = Train(Tiny(single, 1, 1, overrides), Options());
  ASSERT_TRUE(one_run.ok()) << one_run.status();
  auto two_run = Train(Tiny(piped, 1, 2, overrides), Options());
  ASSERT_TRUE(two_run.ok()) << two_run.status();
  const std::vector<StepMetrics> one = Metrics(single), two = Metrics(piped);
  ASSERT_EQ(two.size(), one.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(two[i].loss, one[i].loss) << "step " << i + 1;
  ASSERT_TRUE(one_run->last_val_loss.has_value() && two_run->last_val_loss.has_value());
  EXPECT_EQ(*two_run->last_val_loss, *one_run->last_val_loss);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    EXPECT_TRUE(File(piped, file) == File(single, file)) << file << " differs";
  }
}

TEST(Pipeline, TwoStagesTrainTheSingleProcessRunBitForBit) {
  ExpectTwoStagesAreTheSingleProcess("pp_single", "pp_2", {"optimizer.grad_clip=0"});
  ExpectSameNoiseScale(Metrics("pp_single"), Metrics("pp_2"));
}

// CPU bf16 (run.precision: BF16): the stages pass bf16 hidden states and their gradients, as one process
// keeps them between its blocks, so two stages are the single bf16 process bit for bit too.
TEST(Pipeline, Bf16TwoStagesTrainTheSingleProcessRunBitForBit) {
  ExpectTwoStagesAreTheSingleProcess("pp_bf16_single", "pp_bf16_2", {"optimizer.grad_clip=0", "run.precision=BF16"});
}

// Interleaved 1F1B: two ranks hold two chunks each of a 4-layer model (stages 0 and 2, 1 and 3); the
// checkpoint gathers them into the single process's order.
TEST(Pipeline, InterleavedChunksTrainTheSingleProcessRunBitForBit) {
  const std::vector<std::string> four = {"optimizer.grad_clip=0", "model.n_layers=4"};
  ASSERT_TRUE(Train(Tiny("pp_single4", 1, 1, four), Options()).ok());
  std::vector<std::string> interleaved = four;
  interleaved.insert(interleaved.end(),
                     {"run.parallel.schedule=INTERLEAVED_1F1B", "run.parallel.virtual_stages=2"});
  auto trained = Train(Tiny("pp_interleaved", 1, 2, interleaved), Options());
  ASSERT_TRUE(trained.ok()) << trained.status();
  const std::vector<StepMetrics> one = Metrics("pp_single4"), two = Metrics("pp_interleaved");
  ASSERT_EQ(two.size(), one.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(two[i].loss, one[i].loss) << "step " << i + 1;
  ExpectSameNoiseScale(one, two);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    EXPECT_TRUE(File("pp_interleaved", file) == File("pp_single4", file)) << file << " differs";
  }
}

// ZB-H1 at (data=1, pipeline=2) and (data=1, pipeline=4) on a 4-layer model: the single process's run bit
// for bit (losses, validation loss, both checkpoint files).
TEST(Pipeline, ZeroBubbleH1TrainsTheSingleProcessRunBitForBit) {
  const std::vector<std::string> four = {"optimizer.grad_clip=0", "model.n_layers=4"};
  auto single = Train(Tiny("pp_single_zb", 1, 1, four), Options());
  ASSERT_TRUE(single.ok()) << single.status();
  std::vector<std::string> zb = four;
  zb.push_back("run.parallel.schedule=ZB_H1");
  for (int pipeline : {2, 4}) {
    const std::string run = absl::StrCat("pp_zb_", pipeline);
    auto trained = Train(Tiny(run, 1, pipeline, zb), Options());
    ASSERT_TRUE(trained.ok()) << "pipeline=" << pipeline << ": " << trained.status();
    const std::vector<StepMetrics> one = Metrics("pp_single_zb"), many = Metrics(run);
    ASSERT_EQ(many.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      EXPECT_EQ(many[i].loss, one[i].loss) << "pipeline=" << pipeline << " step " << i + 1;
    }
    ASSERT_TRUE(single->last_val_loss.has_value() && trained->last_val_loss.has_value());
    EXPECT_EQ(*trained->last_val_loss, *single->last_val_loss) << "pipeline=" << pipeline;
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      EXPECT_TRUE(File(run, file) == File("pp_single_zb", file)) << "pipeline=" << pipeline << ": " << file << " differs";
    }
  }
}

TEST(Pipeline, TwoReplicasOfTwoStagesAgreeToRounding) {
  ASSERT_TRUE(Train(Tiny("pp_single_clip", 1, 1), Options()).ok());
  auto trained = Train(Tiny("pp_2x2", 2, 2), Options());
  ASSERT_TRUE(trained.ok()) << trained.status();
  const std::vector<StepMetrics> one = Metrics("pp_single_clip"), many = Metrics("pp_2x2");
  ASSERT_EQ(many.size(), one.size());
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(many[i].loss, one[i].loss, 1e-6 * one[i].loss) << "step " << i + 1;
  }
  // The noise scale's small batch is each replica's first micro-batch: plain data parallelism's at data=2.
  ASSERT_TRUE(Train(Tiny("pp_data2_clip", 2, 1), Options()).ok());
  ExpectSameNoiseScale(Metrics("pp_data2_clip"), many);
  auto a = LoadCheckpoint(TempPath("pp_single_clip/checkpoints/step_00000004"));
  auto b = LoadCheckpoint(TempPath("pp_2x2/checkpoints/step_00000004"));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->model.tensors().size(), b->model.tensors().size());
  for (const auto& [name, tensor] : a->model.tensors()) {
    auto x = a->model.ReadFloat(name), y = b->model.ReadFloat(name);
    ASSERT_TRUE(x.ok() && y.ok()) << name << ": " << y.status();
    ASSERT_EQ(x->size(), y->size()) << name;
    for (size_t i = 0; i < x->size(); ++i) ASSERT_NEAR((*x)[i], (*y)[i], 1e-5) << name << "[" << i << "]";
  }
}

// The loss of step 3 after resuming the checkpoint of step 2 of `experiment`'s run (in its layout).
double NextLossResumed(const config::Experiment& experiment) {
  auto resumed = Train(experiment, Options(/*stop_after_step=*/3, /*resume=*/true));
  EXPECT_TRUE(resumed.ok()) << config::LayoutFields(experiment.run().parallel()) << ": " << resumed.status();
  return resumed.ok() ? resumed->last_loss : NAN;
}

// The same for the tiny config in `layout` (data, pipeline).
double NextLossResumedAt(const std::string& run, int data, int pipeline) {
  return NextLossResumed(Tiny(run, data, pipeline));
}

TEST(Pipeline, ACheckpointResumesInAnyLayout) {
  // Written at (2, 2): step 3 ends the run as a kill would; the checkpoint of step 2 is the newest.
  auto first = Train(Tiny("pp_reshard", 2, 2), Options(/*stop_after_step=*/3));
  ASSERT_TRUE(first.ok()) << first.status();
  const double want = first->last_loss;
  for (const auto& [data, pipeline] : {std::make_pair(4, 1), std::make_pair(1, 1), std::make_pair(2, 2)}) {
    EXPECT_NEAR(NextLossResumedAt("pp_reshard", data, pipeline), want, 1e-12 * want)
        << "data=" << data << " pipeline=" << pipeline;
  }
  // Written at (1, 1), resumed in two stages.
  auto whole = Train(Tiny("pp_reshard_back", 1, 1), Options(/*stop_after_step=*/3));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_NEAR(NextLossResumedAt("pp_reshard_back", 1, 2), whole->last_loss, 1e-12 * whole->last_loss);
}

// Each rank's report of a ZeRO-1 run's moments (rank 0's on `console`, the others' in <run>/rank_<r>.log):
// "ZeRO-1: this rank holds X of the Y bytes of AdamW moments", X into *held and Y into *whole, by rank.
bool ReadMomentsHeld(const std::string& run, const std::string& console, int ranks, std::vector<int64_t>* held,
                     std::vector<int64_t>* whole) {
  for (int rank = 0; rank < ranks; ++rank) {
    auto log = ReadFile(rank == 0 ? console : TempPath(run) + absl::StrCat("/rank_", rank, ".log"));
    EXPECT_TRUE(log.ok()) << log.status();
    std::smatch m;
    const std::regex line(R"(ZeRO-1: this rank holds (\d+) of the (\d+) bytes of AdamW moments)");
    if (!log.ok() || !std::regex_search(*log, m, line)) {
      ADD_FAILURE() << run << " rank " << rank << " reports no moments:\n" << (log.ok() ? *log : "");
      return false;
    }
    held->push_back(std::stoll(m[1].str()));
    whole->push_back(std::stoll(m[2].str()));
  }
  return true;
}

// ZeRO-1 with a pipeline (run.parallel.zero_stage=1): each stage's AdamW moments are sharded over its data
// group. An owner updates its parameters from the same summed gradient and global norm as every replica
// does without ZeRO, and broadcasts them, so (data=2, pipeline=2) with ZeRO-1 is the run without it bit for
// bit: losses, validation loss and both checkpoint files (each stage's shards consolidated onto its first
// replica, then gathered under the single-process names). Each rank reports the moments it holds on its
// console (rank 0 here, rank_<r>.log for the others; ranks 0, 1 are stage 0's replicas, 2, 3 stage 1's):
// at most half its stage's plus the largest parameter's (the unit of the shard), and a stage's two replicas
// together hold exactly all of them.
TEST(Pipeline, ZeroOneShardsEachStageOverItsDataReplicas) {
  ASSERT_TRUE(Train(Tiny("pp_2x2_plain", 2, 2), Options()).ok());
  TrainOptions options = Options();
  const std::string console = TempPath("pp_2x2_zero_console.txt");
  options.console = std::fopen(console.c_str(), "w");
  auto zero = Train(Tiny("pp_2x2_zero", 2, 2, {"run.parallel.zero_stage=1"}), options);
  std::fclose(options.console);
  ASSERT_TRUE(zero.ok()) << zero.status();
  const std::vector<StepMetrics> plain = Metrics("pp_2x2_plain"), sharded = Metrics("pp_2x2_zero");
  ASSERT_EQ(sharded.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(sharded[i].loss, plain[i].loss) << "step " << i + 1;
  ASSERT_TRUE(sharded.back().val_loss.has_value() && plain.back().val_loss.has_value());
  EXPECT_EQ(*sharded.back().val_loss, *plain.back().val_loss);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    EXPECT_TRUE(File("pp_2x2_zero", file) == File("pp_2x2_plain", file)) << file << " differs";
  }

  auto checkpoint = LoadCheckpoint(TempPath("pp_2x2_zero/checkpoints/step_00000004"));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  int64_t largest = 0;  // bytes of one parameter's two moments
  for (const auto& [name, tensor] : checkpoint->model.tensors()) {
    auto values = checkpoint->model.ReadFloat(name);
    ASSERT_TRUE(values.ok()) << values.status();
    largest = std::max(largest, static_cast<int64_t>(2 * sizeof(float) * values->size()));
  }
  std::vector<int64_t> held, whole;
  ASSERT_TRUE(ReadMomentsHeld("pp_2x2_zero", console, 4, &held, &whole));
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_LE(held[rank], whole[rank] / 2 + largest) << "rank " << rank;
    EXPECT_LT(held[rank], whole[rank]) << "rank " << rank;
    std::printf("ZeRO-1, (data=2, pipeline=2): rank %d holds %lld of its stage's %lld bytes of moments (%.2f)\n",
                rank, static_cast<long long>(held[rank]), static_cast<long long>(whole[rank]),
                static_cast<double>(held[rank]) / static_cast<double>(whole[rank]));
  }
  for (int stage = 0; stage < 2; ++stage) {
    EXPECT_EQ(whole[2 * stage], whole[2 * stage + 1]) << "stage " << stage;
    EXPECT_EQ(held[2 * stage] + held[2 * stage + 1], whole[2 * stage]) << "stage " << stage;
  }
}

// A checkpoint written at (data=2, pipeline=2, ZeRO-1) holds every moment under its single-process name: it
// resumes in one process, at (data=4, pipeline=1) with ZeRO-1 and in its own layout (each stage's owners
// taking their moments from the whole file) with the same next loss.
TEST(Pipeline, AZeroOneCheckpointResumesInOtherLayouts) {
  auto first = Train(Tiny("pp_zero_reshard", 2, 2, {"run.parallel.zero_stage=1"}), Options(/*stop_after_step=*/3));
  ASSERT_TRUE(first.ok()) << first.status();
  const double want = first->last_loss;
  EXPECT_NEAR(NextLossResumedAt("pp_zero_reshard", 1, 1), want, 1e-12 * want) << "data=1 pipeline=1";
  auto resumed = Train(Tiny("pp_zero_reshard", 4, 1, {"run.parallel.zero_stage=1"}),
                       Options(/*stop_after_step=*/3, /*resume=*/true));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_NEAR(resumed->last_loss, want, 1e-12 * want) << "data=4 pipeline=1 zero_stage=1";
  resumed = Train(Tiny("pp_zero_reshard", 2, 2, {"run.parallel.zero_stage=1"}),
                  Options(/*stop_after_step=*/3, /*resume=*/true));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_NEAR(resumed->last_loss, want, 1e-12 * want) << "data=2 pipeline=2 zero_stage=1";
}

// Rank 3 of (data=2, pipeline=2) is killed 3 s after it starts, while the run trains: rank 0 fails within
// the group's timeout, naming it; with ZeRO-1 too (its broadcasts over the data group keep the timeout).
void ExpectAKilledRankIsNamed(const std::string& run, std::vector<std::string> overrides) {
  SCOPED_TRACE(run);
  overrides.insert(overrides.end(), {"run.max_steps=100000", "run.checkpoint_interval=0", "run.eval_tokens=0"});
  TrainOptions options = Options();
  options.data_parallel_command = {"/bin/sh", "-c",
                                   "set -- $LMF_DATA_PARALLEL_WORKER; if [ \"$1\" = 3 ]; then exec timeout "
                                   "-s KILL 3 \"$0\"; fi; exec \"$0\"",
                                   TrainBinary()};
  const auto start = std::chrono::steady_clock::now();
  auto trained = Train(Tiny(run, 2, 2, overrides), options);
  ASSERT_FALSE(trained.ok());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 60.0);
  const std::string message(trained.status().message());
  EXPECT_EQ(message.rfind("run.parallel.data=2 x run.parallel.pipeline=2: ", 0), 0u) << message;
  EXPECT_NE(message.find("rank 3 was killed by signal 9"), std::string::npos) << message;
}

TEST(Pipeline, AKilledRankIsNamed) { ExpectAKilledRankIsNamed("pp_killed", {}); }
TEST(Pipeline, AKilledRankIsNamedUnderZeroOne) {
  ExpectAKilledRankIsNamed("pp_killed_zero1", {"run.parallel.zero_stage=1"});
}
TEST(Pipeline, AKilledRankIsNamedUnderZeroBubbleH1) {
  ExpectAKilledRankIsNamed("pp_killed_zb", {"run.parallel.schedule=ZB_H1"});
}

// tiny_moe with 4 layers at (data, pipeline), 4 micro-batches of 4 sequences a step, a checkpoint after
// step 2 and at the end, the validation loss at the end.
config::Experiment TinyMoe(const std::string& run, int data, int pipeline, std::vector<std::string> more = {}) {
  std::vector<std::string> o = {"data.train_tokens=" + Tokens(),
                                "data.val_tokens=" + Tokens(),
                                "run.eval_tokens=512",
                                "run.output_dir=" + TempPath(run),
                                absl::StrCat("run.parallel.data=", data),
                                absl::StrCat("run.parallel.pipeline=", pipeline),
                                "run.parallel.timeout_seconds=20",
                                "run.batch_size=4",
                                "run.grad_accum_steps=4",
                                "run.max_steps=4",
                                "schedule.warmup=2",
                                "run.checkpoint_interval=2",
                                "run.keep_checkpoints=5",
                                "optimizer.grad_clip=0",
                                "model.n_layers=4",
                                "model.moe.noisy_gating=true",
                                "model.moe.expert_bias=true",
                                "model.moe.bias_update_rate=0.01",
                                "model.moe.capacity_factor=1.0"};
  o.insert(o.end(), more.begin(), more.end());
  auto loaded = config::LoadExperiment("experiments/configs/tiny_moe.textproto", o);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return *loaded;
}

TEST(PipelineMoe, TwoStagesTrainTheSingleProcessRunBitForBit) {
  auto single = Train(TinyMoe("pp_moe_single", 1, 1), Options());
  ASSERT_TRUE(single.ok()) << single.status();
  const std::vector<StepMetrics> one = Metrics("pp_moe_single");
  for (const std::string schedule : {"ONE_F_ONE_B", "ZB_H1"}) {
    SCOPED_TRACE(schedule);
    const std::string run = "pp_moe_2_" + schedule;
    auto piped = Train(TinyMoe(run, 1, 2, {"run.parallel.schedule=" + schedule}), Options());
    ASSERT_TRUE(piped.ok()) << piped.status();
    const std::vector<StepMetrics> two = Metrics(run);
    ASSERT_EQ(two.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      EXPECT_EQ(two[i].loss, one[i].loss) << "step " << i + 1;
      ASSERT_TRUE(one[i].aux_loss.has_value() && two[i].aux_loss.has_value()) << "step " << i + 1;
      EXPECT_NEAR(*two[i].aux_loss, *one[i].aux_loss, 1e-12 * *one[i].aux_loss) << "step " << i + 1;
      ASSERT_EQ(one[i].expert_loads.size(), 3u) << "step " << i + 1;  // layers 1, 2 and 3
      EXPECT_EQ(two[i].expert_loads, one[i].expert_loads) << "step " << i + 1;
      EXPECT_EQ(two[i].dropped_share, one[i].dropped_share) << "step " << i + 1;
      EXPECT_EQ(two[i].expert_load_max_over_mean, one[i].expert_load_max_over_mean) << "step " << i + 1;
    }
    EXPECT_GT(*one.back().dropped_share, 0.0);  // the capacity drops some assignments
    ASSERT_TRUE(single->last_val_loss.has_value() && piped->last_val_loss.has_value());
    EXPECT_EQ(*piped->last_val_loss, *single->last_val_loss);
    // One model.safetensors with the single process's names, order and values (the expert biases
    // included); the optimizer's likewise.
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      EXPECT_TRUE(File(run, file) == File("pp_moe_single", file)) << file << " differs";
    }
    EXPECT_NE(File(run, "model.safetensors").find("layers.3.ffn.router.expert_bias"), std::string::npos);
  }
}

TEST(PipelineMoe, ACheckpointResumesAcrossLayouts) {
  // Written at (1, 2): step 3 ends the run as a kill would; the checkpoint of step 2 is the newest.
  auto piped = Train(TinyMoe("pp_moe_reshard", 1, 2), Options(/*stop_after_step=*/3));
  ASSERT_TRUE(piped.ok()) << piped.status();
  EXPECT_NEAR(NextLossResumed(TinyMoe("pp_moe_reshard", 1, 1)), piped->last_loss, 1e-12 * piped->last_loss);
  // Written in one process, resumed in two stages.
  auto whole = Train(TinyMoe("pp_moe_reshard_back", 1, 1), Options(/*stop_after_step=*/3));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_NEAR(NextLossResumed(TinyMoe("pp_moe_reshard_back", 1, 2)), whole->last_loss, 1e-12 * whole->last_loss);
}

TEST(PipelineMoe, PipelineByExpertTrainsTheSingleProcessRunToRounding) {
  auto single = Train(TinyMoe("pp_moe_single_ep", 1, 1), Options());
  ASSERT_TRUE(single.ok()) << single.status();
  auto piped = Train(TinyMoe("pp_moe_2x2", 1, 2, {"run.parallel.expert=2"}), Options());
  ASSERT_TRUE(piped.ok()) << piped.status();
  const std::vector<StepMetrics> one = Metrics("pp_moe_single_ep"), many = Metrics("pp_moe_2x2");
  ASSERT_EQ(many.size(), one.size());
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(many[i].loss, one[i].loss, 1e-5 * one[i].loss) << "step " << i + 1;
    ASSERT_TRUE(one[i].aux_loss.has_value() && many[i].aux_loss.has_value()) << "step " << i + 1;
    EXPECT_NEAR(*many[i].aux_loss, *one[i].aux_loss, 1e-5 * *one[i].aux_loss) << "step " << i + 1;
    ASSERT_EQ(many[i].expert_loads.size(), 3u) << "step " << i + 1;
  }
  ASSERT_TRUE(single->last_val_loss.has_value() && piped->last_val_loss.has_value());
  EXPECT_NEAR(*piped->last_val_loss, *single->last_val_loss, 1e-5 * *single->last_val_loss);
  auto a = LoadCheckpoint(TempPath("pp_moe_single_ep/checkpoints/step_00000004"));
  auto b = LoadCheckpoint(TempPath("pp_moe_2x2/checkpoints/step_00000004"));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->model.tensors().size(), b->model.tensors().size());
  float largest = 0, worst = 0;
  std::string worst_name;
  for (const auto& [name, tensor] : a->model.tensors()) {
    auto x = a->model.ReadFloat(name), y = b->model.ReadFloat(name);
    ASSERT_TRUE(x.ok() && y.ok()) << name << ": " << y.status();
    ASSERT_EQ(x->size(), y->size()) << name;
    for (size_t i = 0; i < x->size(); ++i) {
      largest = std::max(largest, std::fabs((*x)[i]));
      if (std::fabs((*x)[i] - (*y)[i]) > worst) worst = std::fabs((*x)[i] - (*y)[i]), worst_name = name;
    }
  }
  EXPECT_LE(worst, 1e-4f * largest) << worst_name << " (largest weight " << largest << ")";
  std::printf("(data=1, pipeline=2, expert=2) vs one process: last loss %.9g vs %.9g, largest weight difference %g "
              "(%s) of largest %g\n",
              many.back().loss, one.back().loss, worst, worst_name.c_str(), largest);
  // Its checkpoint of step 2, resumed in one process: the same next loss.
  auto stopped = Train(TinyMoe("pp_moe_2x2_reshard", 1, 2, {"run.parallel.expert=2"}), Options(/*stop_after_step=*/3));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_NEAR(NextLossResumed(TinyMoe("pp_moe_2x2_reshard", 1, 1)), stopped->last_loss, 1e-6 * stopped->last_loss);
}

// ZeRO-1 under pipeline x expert (pipeline=2, expert=2, run.parallel.zero_stage=1): each stage's dense
// moments sharded over its data x expert ranks (mesh stage()), each expert block's over the data ranks that
// hold it; the owners update from the same summed gradients as without ZeRO and broadcast, so the run is the
// one without ZeRO bit for bit: losses, aux losses, expert loads, validation loss and both checkpoint files
// (the shards consolidated onto each stage's first rank and each expert block's first data rank, the expert
// blocks gathered under their global names). Every moment is held by exactly one rank (the ranks' holdings
// sum to the optimizer file's moments) and each rank holds less than its slice's.
void ExpectZeroOneUnderPipelineByExpertIsTheRunWithoutIt(int data) {
  SCOPED_TRACE(absl::StrCat("data=", data, " pipeline=2 expert=2"));
  const std::string name = absl::StrCat("pp_moe_ep", data);
  const std::vector<std::string> ep = {"run.parallel.expert=2", absl::StrCat("run.grad_accum_steps=", 4 * data)};
  std::vector<std::string> ep_zero = ep;
  ep_zero.push_back("run.parallel.zero_stage=1");
  ASSERT_TRUE(Train(TinyMoe(name + "_plain", data, 2, ep), Options()).ok());
  TrainOptions options = Options();
  const std::string console = TempPath(name + "_zero_console.txt");
  options.console = std::fopen(console.c_str(), "w");
  auto zero = Train(TinyMoe(name + "_zero", data, 2, ep_zero), options);
  std::fclose(options.console);
  ASSERT_TRUE(zero.ok()) << zero.status();
  const std::vector<StepMetrics> plain = Metrics(name + "_plain"), sharded = Metrics(name + "_zero");
  ASSERT_EQ(sharded.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(sharded[i].loss, plain[i].loss) << "step " << i + 1;
    EXPECT_EQ(sharded[i].aux_loss, plain[i].aux_loss) << "step " << i + 1;
    EXPECT_EQ(sharded[i].expert_loads, plain[i].expert_loads) << "step " << i + 1;
  }
  ASSERT_TRUE(sharded.back().val_loss.has_value() && plain.back().val_loss.has_value());
  EXPECT_EQ(*sharded.back().val_loss, *plain.back().val_loss);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    EXPECT_TRUE(File(name + "_zero", file) == File(name + "_plain", file)) << file << " differs";
  }

  auto checkpoint = LoadCheckpoint(TempPath(name + "_zero/checkpoints/step_00000004"));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  int64_t moments = 0;  // bytes of every AdamW moment of the model
  for (const auto& [tensor_name, tensor] : checkpoint->optimizer->tensors()) {
    if (absl::EndsWith(tensor_name, ".exp_avg") || absl::EndsWith(tensor_name, ".exp_avg_sq")) {
      moments += tensor.numel() * static_cast<int64_t>(sizeof(float));
    }
  }
  const int ranks = 4 * data;
  std::vector<int64_t> held, whole;
  ASSERT_TRUE(ReadMomentsHeld(name + "_zero", console, ranks, &held, &whole));
  int64_t total = 0;
  for (int rank = 0; rank < ranks; ++rank) {
    EXPECT_LT(held[rank], whole[rank]) << "rank " << rank;
    total += held[rank];
    std::printf("ZeRO-1, (data=%d, pipeline=2, expert=2): rank %d holds %lld of its slice's %lld bytes of moments "
                "(%.2f)\n",
                data, rank, static_cast<long long>(held[rank]), static_cast<long long>(whole[rank]),
                static_cast<double>(held[rank]) / static_cast<double>(whole[rank]));
  }
  EXPECT_EQ(total, moments) << "the ranks' moments are not the model's, each once";
}

TEST(PipelineMoe, ZeroOneUnderPipelineByExpertIsTheRunWithoutItBitForBit) {
  ExpectZeroOneUnderPipelineByExpertIsTheRunWithoutIt(/*data=*/1);
  ExpectZeroOneUnderPipelineByExpertIsTheRunWithoutIt(/*data=*/2);
}

// A checkpoint of step 2 written at (data=1, pipeline=2, expert=2) with ZeRO-1 resumes in one process with
// the same next loss, to 1e-6 as the run without ZeRO (PipelineByExpert above: the experts' rows grouped
// differently over the ranks), and in its own layout (each rank's owners taking their moments, its expert
// blocks under their global names, from the whole file) to the double rounding of the losses' sum, 1e-12.
TEST(PipelineMoe, AZeroOnePipelineByExpertCheckpointResumes) {
  const std::vector<std::string> ep_zero = {"run.parallel.expert=2", "run.parallel.zero_stage=1"};
  auto stopped = Train(TinyMoe("pp_moe_ep_zero_reshard", 1, 2, ep_zero), Options(/*stop_after_step=*/3));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  const double want = stopped->last_loss;
  EXPECT_NEAR(NextLossResumed(TinyMoe("pp_moe_ep_zero_reshard", 1, 1)), want, 1e-6 * want) << "one process";
  EXPECT_NEAR(NextLossResumed(TinyMoe("pp_moe_ep_zero_reshard", 1, 2, ep_zero)), want, 1e-12 * want)
      << "data=1 pipeline=2 expert=2 zero_stage=1";
}

}  // namespace
}  // namespace lmf::experiments
