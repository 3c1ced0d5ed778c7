// The training loop end to end on the tiny config: it overfits a single window, lowers the loss on the
// CS336 TinyStories sample (BPE trained in the test), resumes bit-identically after a simulated kill,
// stops on NaN keeping the last good checkpoint, accumulates gradients like a larger batch, and writes the
// run folder.
#include "experiments/trainer/trainer.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/shared_data.h"
#include "config/loader.h"
#include "config/model_conversion.h"
#include "experiments/checkpoint/checkpoint.h"
#include "experiments/crc32c/crc32c.h"
#include "experiments/metrics/metrics_log.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kernels/core/context.h"
#include "model/accounting/accounting.h"
#include "tokenizer/bpe_train.h"
#include "tokenizer/token_file.h"

namespace lmf::experiments {
namespace {

std::string TempPath(const std::string& name) { return std::string(getenv("TEST_TMPDIR")) + "/" + name; }

std::string WriteTokens(const std::string& name, const std::vector<uint32_t>& ids, uint32_t vocab = 512,
                        uint64_t hash = 1) {
  const std::string path = TempPath(name);
  auto writer = tokenizer::TokenFileWriter::Create(path, vocab, hash);
  EXPECT_TRUE(writer.ok()) << writer.status();
  EXPECT_TRUE(writer->Append(ids.data(), ids.size()).ok());
  EXPECT_TRUE(writer->Commit().ok());
  return path;
}

std::vector<uint32_t> RandomIds(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> ids(n);
  for (auto& id : ids) id = rng() % 512;
  return ids;
}

config::Experiment Tiny(std::vector<std::string> overrides) {
  auto loaded = config::LoadExperiment("experiments/configs/tiny.textproto", overrides);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return *loaded;
}

std::vector<StepMetrics> ReadMetrics(const std::string& run_dir) {
  auto metrics = ReadMetricsLog(run_dir + "/metrics.jsonl");
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  return metrics.ok() ? *std::move(metrics) : std::vector<StepMetrics>{};
}

TrainOptions Quiet() {
  TrainOptions options;
  options.console = std::fopen("/dev/null", "w");
  return options;
}

TEST(Trainer, OverfitsASingleWindow) {
  // 33 tokens, context 32, batch 1: every batch is the same sequence, so the model can memorise it.
  const std::string train = WriteTokens("overfit.tok", RandomIds(33, 1));
  const std::string out = TempPath("overfit_run");
  auto result = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=150",
                            "run.batch_size=1",
                            "schedule.warmup=10", "optimizer.lr=0.01", "optimizer.adamw.weight_decay=0"}),
                      Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<StepMetrics> metrics = ReadMetrics(out);
  ASSERT_EQ(metrics.size(), 150u);
  EXPECT_NEAR(metrics.front().loss, std::log(512.0), 0.5);  // starts near uniform over the vocabulary
  // Memorised: a mean cross-entropy of 0.05 nats is a probability of about 0.95 on every target.
  EXPECT_LT(result->last_loss, 0.05);
  EXPECT_FALSE(metrics.front().z_loss.has_value());  // only runs with model.z_loss log it
  EXPECT_FALSE(metrics.front().noise_trace.has_value());  // one micro-batch per step: no noise scale
}

// With gradient accumulation every step logs the noise scale's two parts (model::StepResult; their
// agreement with a direct estimate is step_strategy_test's).
TEST(Trainer, AccumulationLogsTheGradientNoiseScale) {
  const std::string train = WriteTokens("noise.tok", RandomIds(4000, 2));
  const std::string out = TempPath("noise_run");
  auto result = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=20",
                            "run.grad_accum_steps=2"}),
                      Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<StepMetrics> metrics = ReadMetrics(out);
  ASSERT_EQ(metrics.size(), 20u);
  double traces = 0, grads = 0;
  for (const StepMetrics& m : metrics) {
    ASSERT_TRUE(m.noise_trace.has_value() && m.noise_grad_sq.has_value()) << "step " << m.step;
    traces += *m.noise_trace, grads += *m.noise_grad_sq;
  }
  EXPECT_GT(traces, 0);
}

TEST(Trainer, ZLossIsLoggedAndPullsTheLogNormaliserTowardZero) {
  const std::string train = WriteTokens("zloss.tok", RandomIds(33, 1));
  const std::string out = TempPath("zloss_run");
  auto result = Train(
      Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=100", "run.batch_size=1",
            "schedule.warmup=10", "optimizer.lr=0.01", "optimizer.adamw.weight_decay=0", "model.z_loss=0.1"}),
      Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<StepMetrics> metrics = ReadMetrics(out);
  ASSERT_EQ(metrics.size(), 100u);
  for (const StepMetrics& m : metrics) ASSERT_TRUE(m.z_loss.has_value()) << "step " << m.step;
  // At initialisation the logits are small, so lse is about ln(512) = 6.24 and the term 0.1 * 6.24^2 = 3.9.
  EXPECT_NEAR(*metrics.front().z_loss, 0.1 * std::pow(std::log(512.0), 2), 0.4);
  // The logged loss is the cross-entropy alone (near ln 512 at the start, not 3.9 more), and it still drops
  // while the z-loss pulls lse toward 0 (by a factor well beyond what the cross-entropy's fall needs).
  EXPECT_NEAR(metrics.front().loss, std::log(512.0), 0.5);
  EXPECT_LT(result->last_loss, 0.5 * metrics.front().loss);
  EXPECT_LT(*metrics.back().z_loss, 0.25 * *metrics.front().z_loss);
}

// A mixture-of-experts run logs its auxiliary loss, expert load and dropped share every step, and learns.
TEST(Trainer, MixtureOfExpertsLogsItsMetrics) {
  const std::string train = WriteTokens("moe.tok", RandomIds(33, 1));
  const std::string out = TempPath("moe_run");
  auto loaded = config::LoadExperiment("experiments/configs/tiny_moe.textproto",
                                       {"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=40",
                                        "run.batch_size=1"});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto result = Train(*loaded, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<StepMetrics> metrics = ReadMetrics(out);
  ASSERT_EQ(metrics.size(), 40u);
  for (const StepMetrics& m : metrics) {
    ASSERT_TRUE(m.aux_loss.has_value() && m.expert_load_max_over_mean.has_value() && m.dropped_share.has_value())
        << "step " << m.step;
    EXPECT_GT(*m.aux_loss, 0) << "step " << m.step;  // the balancing loss is alpha * E * sum f_i P_i > 0
    EXPECT_GE(*m.expert_load_max_over_mean, 1.0) << "step " << m.step;
    EXPECT_EQ(*m.dropped_share, 0.0) << "dropless by default";
    // The MoE layer's tokens per expert: its 8 experts share the step's 32 tokens x top-2 assignments.
    ASSERT_EQ(m.expert_loads.size(), 1u) << "step " << m.step;
    EXPECT_EQ(m.expert_loads[0].first, "layers.1.ffn");
    ASSERT_EQ(m.expert_loads[0].second.size(), 8u);
    EXPECT_EQ(std::accumulate(m.expert_loads[0].second.begin(), m.expert_loads[0].second.end(), 0.0), 64.0);
  }
  EXPECT_LT(metrics.back().loss, metrics.front().loss - 0.5);
}

// run.init_from of a dense run into a model.moe config of the same shape upcycles it: a new run from step 0
// whose first loss is the dense model's (on the memorised window: near 0, not ln 512), and a MoE whose
// experts cannot copy the FFN is refused naming the fields.
TEST(Trainer, InitFromADenseRunUpcyclesIntoAMixtureOfExperts) {
  const std::string train = WriteTokens("upcycle.tok", RandomIds(33, 1));
  const std::string dense = TempPath("upcycle_dense");
  const std::vector<std::string> common = {"data.train_tokens=" + train, "run.batch_size=1", "schedule.warmup=10",
                                           "optimizer.lr=0.01", "optimizer.adamw.weight_decay=0"};
  std::vector<std::string> dense_set = common;
  dense_set.insert(dense_set.end(), {"run.output_dir=" + dense, "run.max_steps=150"});
  auto dense_run = Train(Tiny(dense_set), Quiet());
  ASSERT_TRUE(dense_run.ok()) << dense_run.status();
  ASSERT_LT(dense_run->last_loss, 0.05);
  std::vector<std::string> moe_set = common;
  moe_set.insert(moe_set.end(), {"run.output_dir=" + TempPath("upcycle_moe"), "run.max_steps=12",
                                 "run.init_from=" + dense_run->last_checkpoint, "model.moe.n_experts=4",
                                 "model.moe.top_k=2", "model.moe.d_expert=172", "model.moe.router=TOPK_SOFTMAX"});
  auto upcycled = Train(Tiny(moe_set), Quiet());
  ASSERT_TRUE(upcycled.ok()) << upcycled.status();
  const std::vector<StepMetrics> metrics = ReadMetrics(TempPath("upcycle_moe"));
  ASSERT_EQ(metrics.size(), 12u);
  EXPECT_EQ(metrics.front().step, 1);
  EXPECT_NEAR(metrics.front().loss, dense_run->last_loss, 0.05);
  moe_set.back() = "model.moe.router=TOPK_SOFTMAX";
  moe_set[moe_set.size() - 2] = "model.moe.d_expert=100";
  moe_set[common.size()] = "run.output_dir=" + TempPath("upcycle_narrow");
  auto refused = Train(Tiny(moe_set), Quiet());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("model.moe.d_expert=100 must be its kind SWIGLU and d_ff 172"),
            std::string::npos)
      << refused.status();
}

TEST(Trainer, TinyStoriesSampleLossDrops) {
  LMF_SHARED_DATA_OR_SKIP(sample, "cs336/assignment1-basics/tests/fixtures/tinystories_sample.txt");
  auto text = ReadFile(sample);
  ASSERT_TRUE(text.ok());
  tokenizer::TrainOptions bpe;
  bpe.vocab_size = 512;
  bpe.special_tokens = {"<|endoftext|>"};
  auto tok = tokenizer::TrainBpeOnText(*text, bpe);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<uint32_t> ids = tok->Encode(*text);
  ASSERT_GT(ids.size(), 600u);
  const std::string train = WriteTokens("stories.tok", ids, tok->vocab_size(), tok->Hash());
  const std::string out = TempPath("stories_run");
  auto result = Train(Tiny({"data.train_tokens=" + train, "data.val_tokens=" + train, "run.eval_tokens=256",
                            "run.output_dir=" + out, "run.max_steps=200", "run.eval_interval=100"}),
                      Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<StepMetrics> metrics = ReadMetrics(out);
  ASSERT_EQ(metrics.size(), 200u);
  // From about ln(512) = 6.2 nats; 200 steps on ~1k tokens must at least halve it (it goes far lower).
  EXPECT_LT(result->last_loss, 0.5 * metrics.front().loss);
  ASSERT_TRUE(result->last_val_loss.has_value());
  EXPECT_LT(*result->last_val_loss, 0.5 * metrics.front().loss);
  EXPECT_TRUE(metrics[99].val_loss.has_value());
  EXPECT_FALSE(metrics[98].val_loss.has_value());
}

TEST(Trainer, ResumeAfterAKillIsBitIdentical) {
  const std::string train = WriteTokens("resume.tok", RandomIds(4000, 2));
  const std::vector<std::string> common = {"data.train_tokens=" + train, "data.val_tokens=" + train,
                                           "run.eval_tokens=256", "run.eval_interval=4", "run.max_steps=12",
                                           "run.checkpoint_interval=4", "run.grad_accum_steps=2"};
  auto with = [&](const std::string& out) {
    std::vector<std::string> o = common;
    o.push_back("run.output_dir=" + out);
    return Tiny(o);
  };
  const std::string straight = TempPath("straight_run");
  ASSERT_TRUE(Train(with(straight), Quiet()).ok());

  const std::string killed = TempPath("killed_run");
  TrainOptions kill_at_6 = Quiet();
  kill_at_6.stop_after_step = 6;  // checkpoint at 4; steps 5 and 6 logged, then "killed"
  auto first = Train(with(killed), kill_at_6);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->last_checkpoint, killed + "/checkpoints/step_00000004");
  EXPECT_EQ(ReadMetrics(killed).size(), 6u);
  TrainOptions resume = Quiet();
  resume.resume = true;
  auto second = Train(with(killed), resume);
  ASSERT_TRUE(second.ok()) << second.status();

  const std::vector<StepMetrics> a = ReadMetrics(straight), b = ReadMetrics(killed);
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].step, b[i].step);
    EXPECT_EQ(a[i].tokens, b[i].tokens);
    EXPECT_EQ(a[i].loss, b[i].loss) << "step " << a[i].step;  // bit-identical, not merely close
    EXPECT_EQ(a[i].lr, b[i].lr);
    EXPECT_EQ(a[i].grad_norm, b[i].grad_norm) << "step " << a[i].step;
    EXPECT_EQ(a[i].val_loss, b[i].val_loss) << "step " << a[i].step;
  }
  auto weights_a = ReadFile(straight + "/checkpoints/step_00000012/model.safetensors");
  auto weights_b = ReadFile(killed + "/checkpoints/step_00000012/model.safetensors");
  ASSERT_TRUE(weights_a.ok() && weights_b.ok());
  EXPECT_TRUE(*weights_a == *weights_b) << "final weights differ";
  auto moments_a = ReadFile(straight + "/checkpoints/step_00000012/optimizer.safetensors");
  auto moments_b = ReadFile(killed + "/checkpoints/step_00000012/optimizer.safetensors");
  EXPECT_TRUE(*moments_a == *moments_b) << "final optimizer state differs";

  // A checkpoint records its thread count; resuming on another says the continuation is not bit-identical.
  const std::string other = TempPath("other_threads_run");
  ASSERT_TRUE(Train(with(other), kill_at_6).ok());
  const std::string state_path = other + "/checkpoints/step_00000004/trainer_state.textproto";
  auto state = LoadCheckpoint(other + "/checkpoints/step_00000004");
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE(state->state.has_threads());
  checkpoint::TrainerState edited = state->state;
  edited.set_threads(999);
  ASSERT_TRUE(WriteFileAtomically(state_path, StateFileText(edited)).ok());
  const std::string console_path = TempPath("other_threads_console.txt");
  TrainOptions resume_other = resume;
  resume_other.console = std::fopen(console_path.c_str(), "w");
  ASSERT_TRUE(Train(with(other), resume_other).ok());
  std::fclose(resume_other.console);
  auto console = ReadFile(console_path);
  ASSERT_TRUE(console.ok());
  EXPECT_NE(console->find("step_00000004 was written by a run on 999 CPU threads and this one has "),
            std::string::npos)
      << *console;
}

// A resume that does not log (logging.metrics_jsonl: false) still takes back what the killed run logged
// past its checkpoint: no line newer than the resumed step stays in metrics.jsonl.
TEST(Trainer, ResumeWithoutMetricsLoggingDropsTheKilledRunsLaterLines) {
  const std::string train = WriteTokens("resume_quiet.tok", RandomIds(2000, 5));
  const std::string out = TempPath("resume_quiet_run");
  const std::vector<std::string> common = {"data.train_tokens=" + train, "run.output_dir=" + out,
                                           "run.max_steps=8", "run.checkpoint_interval=4", "schedule.warmup=2"};
  TrainOptions kill_at_6 = Quiet();
  kill_at_6.stop_after_step = 6;  // checkpoint at 4; steps 5 and 6 logged, then "killed"
  ASSERT_TRUE(Train(Tiny(common), kill_at_6).ok());
  ASSERT_EQ(ReadMetrics(out).size(), 6u);
  std::vector<std::string> quiet = common;
  quiet.push_back("logging.metrics_jsonl=false");
  TrainOptions resume = Quiet();
  resume.resume = true;
  resume.stop_after_step = 5;  // the continuation is killed too, before its next checkpoint
  auto resumed = Train(Tiny(quiet), resume);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  const std::vector<StepMetrics> kept = ReadMetrics(out);
  ASSERT_EQ(kept.size(), 4u);
  EXPECT_EQ(kept.back().step, 4);
}

TEST(Trainer, NanStopsAndKeepsTheLastGoodCheckpoint) {
  const std::string train = WriteTokens("nan.tok", RandomIds(1000, 3));
  const std::string out = TempPath("nan_run");
  // An absurd learning rate overflows the weights after the first updates, so a later loss is not finite.
  auto result = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "optimizer.lr=1e30",
                            "schedule.warmup=0", "optimizer.grad_clip=0", "run.checkpoint_interval=1"}),
                      Quiet());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kAborted);
  const std::string message(result.status().message());
  const std::vector<StepMetrics> logged = ReadMetrics(out);
  ASSERT_FALSE(logged.empty());
  const int64_t bad_step = logged.back().step + 1;
  const std::string good = CheckpointPath(out + "/checkpoints", logged.back().step);
  // Which goes first depends on where the overflow lands: the loss itself or only its gradients.
  const bool names_loss = message.rfind(absl::StrCat("step ", bad_step, ": loss is "), 0) == 0;
  const bool names_norm = message.rfind(absl::StrCat("step ", bad_step, ": gradient norm is "), 0) == 0;
  EXPECT_TRUE(names_loss || names_norm) << message;
  EXPECT_NE(message.find("stopping before the update. Last good checkpoint: " + good), std::string::npos) << message;
  auto latest = LatestCheckpoint(out + "/checkpoints");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, good);
}

TEST(Trainer, GradientAccumulationMatchesTheLargerBatch) {
  // Batch 8 in one micro-batch and 4 x 2 accumulated draw the same 8 windows (the sampler is sequential).
  const std::string train = WriteTokens("accum.tok", RandomIds(3000, 4));
  auto one = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + TempPath("accum1"), "run.max_steps=3",
                         "schedule.warmup=0"}),
                   Quiet());
  auto two = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + TempPath("accum2"), "run.max_steps=3",
                         "run.batch_size=4", "run.grad_accum_steps=2", "schedule.warmup=0"}),
                   Quiet());
  ASSERT_TRUE(one.ok() && two.ok());
  const std::vector<StepMetrics> a = ReadMetrics(TempPath("accum1")), b = ReadMetrics(TempPath("accum2"));
  for (int i = 0; i < 3; ++i) {
    // Same math, different summation order (float32): agree to ~1e-6 relative.
    EXPECT_NEAR(a[i].loss, b[i].loss, 1e-5 * a[i].loss) << i;
    EXPECT_NEAR(a[i].grad_norm, b[i].grad_norm, 1e-4 * a[i].grad_norm) << i;
    EXPECT_EQ(a[i].tokens, b[i].tokens);
  }
}

TEST(Trainer, WritesTheRunFolderAndRefusesToOverwriteIt) {
  const std::string train = WriteTokens("folder.tok", RandomIds(2000, 5));
  const std::string out = TempPath("folder_run");
  const config::Experiment e = Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=20",
                                     "run.checkpoint_interval=5"});
  ASSERT_TRUE(Train(e, Quiet()).ok());
  auto config = config::LoadExperiment(out + "/config.textproto", {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config::ExperimentToText(*config), config::ExperimentToText(e));
  EXPECT_EQ(ReadMetrics(out).size(), 20u);
  EXPECT_EQ(ListCheckpointSteps(out + "/checkpoints"), (std::vector<int64_t>{15, 20}));  // keep_checkpoints: 2
  bool has_events = false;
  DIR* dir = opendir(out.c_str());
  ASSERT_NE(dir, nullptr);
  while (const dirent* entry = readdir(dir)) {
    has_events |= std::string(entry->d_name).rfind("events.out.tfevents.", 0) == 0;
  }
  closedir(dir);
  EXPECT_TRUE(has_events);

  auto again = Train(e, Quiet());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().message(), "run.output_dir=" + out +
                                          " already holds a run; pass --resume to continue it or choose another folder");
}

std::vector<std::string> EventFiles(const std::string& run_dir) {
  std::vector<std::string> files;
  auto names = ListFolder(run_dir);
  EXPECT_TRUE(names.ok()) << names.status();
  for (const std::string& name : names.ok() ? *names : std::vector<std::string>{}) {
    if (absl::StartsWith(name, "events.out.tfevents.")) files.push_back(name);
  }
  return files;
}

// Resuming a run that has finished trains nothing and logs nothing: no new TensorBoard event file (each
// would show in TensorBoard as one more, empty run), and metrics.jsonl as it was.
TEST(Trainer, ResumingAFinishedRunWritesNoNewEventFile) {
  const std::string train = WriteTokens("finished.tok", RandomIds(2000, 6));
  const std::string out = TempPath("finished_run");
  const config::Experiment e =
      Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=4", "schedule.warmup=1"});
  ASSERT_TRUE(Train(e, Quiet()).ok());
  const std::vector<std::string> events = EventFiles(out);
  ASSERT_EQ(events.size(), 1u);
  const absl::StatusOr<std::string> event_bytes = ReadFile(out + "/" + events[0]);
  const absl::StatusOr<std::string> metrics = ReadFile(out + "/metrics.jsonl");
  ASSERT_TRUE(event_bytes.ok() && metrics.ok());
  // An event file is named by the second and the pid: a second later, a new one would get a name of its own.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  TrainOptions resume = Quiet();
  resume.resume = true;
  auto again = Train(e, resume);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->steps, 4);
  EXPECT_EQ(EventFiles(out), events);
  EXPECT_TRUE(*ReadFile(out + "/" + events[0]) == *event_bytes) << "the event file was written to";
  EXPECT_EQ(*ReadFile(out + "/metrics.jsonl"), *metrics);
}

TEST(Trainer, ResumeRefusesACheckpointOfAnotherModel) {
  const std::string train = WriteTokens("other.tok", RandomIds(1000, 7));
  const std::string out = TempPath("other_run");
  ASSERT_TRUE(Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=12"}), Quiet()).ok());
  TrainOptions resume = Quiet();
  resume.resume = true;
  auto result = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=24",
                            "model.n_layers=3"}),
                      resume);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(),
            "cannot resume from " + out +
                "/checkpoints/step_00000012: model differs from the checkpoint's config "
                "(modified: n_layers: 2 -> 3)");
  // A longer run of the same model continues from the checkpoint.
  auto longer = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=24",
                            "schedule.decay_end=100"}),
                      resume);
  ASSERT_TRUE(longer.ok()) << longer.status();
  EXPECT_EQ(longer->steps, 24);
  EXPECT_EQ(ReadMetrics(out).size(), 24u);
  // A shorter run than the checkpoint's step is refused before the run's config is replaced; an equal one
  // is finished already and reports the checkpoint's loss.
  auto config_before = ReadFile(out + "/config.textproto");
  auto shorter = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=20",
                             "schedule.decay_end=100"}),
                       resume);
  EXPECT_EQ(std::string(shorter.status().message()),
            "--resume: " + out +
                "/checkpoints/step_00000024 is at step 24, past this config's end at step 20 "
                "(run.max_steps / run.max_tokens); a resumed run can only go on");
  EXPECT_EQ(*ReadFile(out + "/config.textproto"), *config_before);
  auto same = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=24",
                          "schedule.decay_end=100"}),
                    resume);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->steps, 24);
  EXPECT_EQ(same->last_loss, longer->last_loss);
}

// A WSD run branched off a longer WSD run's checkpoint at its own decay start (run.init_from) is that run:
// the stable phases have the same learning rates and data, so the 8-step run trained straight and the one
// that starts from step 4 of a 16-step run (decays from 4 and from 8) log the same steps 5-8 and end with
// the same weights and optimizer state, bit for bit.
TEST(Trainer, WsdBranchOffALongerRunIsTheShorterRun) {
  const std::string train = WriteTokens("wsd.tok", RandomIds(4000, 3));
  auto with = [&](const std::vector<std::string>& overrides) {  // the test's settings, then `overrides`
    std::vector<std::string> o = {"schedule.kind=WSD", "schedule.warmup=2", "schedule.decay_fraction=0.5",
                                  "run.checkpoint_interval=4", "data.train_tokens=" + train};
    o.insert(o.end(), overrides.begin(), overrides.end());
    return Tiny(o);
  };
  const std::string straight = TempPath("wsd_straight"), stable = TempPath("wsd_stable"),
                    branch = TempPath("wsd_branch");
  ASSERT_TRUE(Train(with({"run.max_steps=8", "run.output_dir=" + straight}), Quiet()).ok());
  // The branch points are pinned (run.checkpoint_steps): kept however many newer checkpoints follow.
  ASSERT_TRUE(Train(with({"run.max_steps=16", "run.output_dir=" + stable, "run.keep_checkpoints=1",
                          "run.checkpoint_steps=4,8"}),
                    Quiet())
                  .ok());
  EXPECT_EQ(ListCheckpointSteps(stable + "/checkpoints"), (std::vector<int64_t>{4, 8, 16}));
  const std::string from = stable + "/checkpoints/step_00000004";
  auto branched =
      Train(with({"run.max_steps=8", "run.output_dir=" + branch, "run.init_from=" + from}), Quiet());
  ASSERT_TRUE(branched.ok()) << branched.status();
  EXPECT_EQ(branched->steps, 8);
  const std::vector<StepMetrics> a = ReadMetrics(straight), b = ReadMetrics(branch), s = ReadMetrics(stable);
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 4u);      // steps 5-8: the branch's own
  EXPECT_LT(a[7].lr, s[7].lr);  // the straight run decays where the stable one holds the peak
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(b[i].step, a[4 + i].step);
    EXPECT_EQ(b[i].tokens, a[4 + i].tokens);
    EXPECT_EQ(b[i].lr, a[4 + i].lr);
    EXPECT_EQ(b[i].loss, a[4 + i].loss) << "step " << b[i].step;
  }
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    auto x = ReadFile(straight + "/checkpoints/step_00000008/" + file);
    auto y = ReadFile(branch + "/checkpoints/step_00000008/" + file);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_TRUE(*x == *y) << file << " differs";
  }

  // What cannot start: a missing folder, a run folder, another model, a checkpoint at or past the end.
  auto error = [&](std::vector<std::string> o) {
    auto result = Train(with(o), Quiet());
    return result.ok() ? std::string("OK") : std::string(result.status().message());
  };
  const std::string missing = error({"run.max_steps=8", "run.output_dir=" + TempPath("wsd_e1"),
                                     "run.init_from=" + stable + "/checkpoints/step_00000005"});
  EXPECT_EQ(missing.rfind("run.init_from=" + stable + "/checkpoints/step_00000005: ", 0), 0u) << missing;
  const std::string run_folder =
      error({"run.max_steps=8", "run.output_dir=" + TempPath("wsd_e2"), "run.init_from=" + stable});
  EXPECT_NE(run_folder.find(" (a run folder: name one of its checkpoints/step_* folders)"), std::string::npos)
      << run_folder;
  EXPECT_EQ(error({"run.max_steps=8", "run.output_dir=" + TempPath("wsd_e3"), "run.init_from=" + from,
                   "model.n_layers=3"}),
            "cannot start from run.init_from=" + from +
                ": model differs from the checkpoint's config (modified: n_layers: 2 -> 3)");
  EXPECT_EQ(error({"run.max_steps=4", "run.output_dir=" + TempPath("wsd_e4"), "run.init_from=" + from}),
            "run.init_from=" + from + " is at step 4, not before this run's end at step 4");
  // A branch must have taken the steps it takes over at its own learning rates and optimizer: not past its
  // decay start (a 12-step run decays from step 6; the stable run held the peak to step 8), not off a cosine
  // run, not with other AdamW settings.
  const std::string late = stable + "/checkpoints/step_00000008";
  const std::string past =
      error({"run.max_steps=12", "run.output_dir=" + TempPath("wsd_e5"), "run.init_from=" + late});
  EXPECT_EQ(past.rfind("cannot start from run.init_from=" + late +
                           ": its run took step 8 at lr 0.003 (by its config), this config's "
                           "schedule gives 0.00",
                       0),
            0u)
      << past;
  const std::string cosine_run = TempPath("wsd_cosine");
  ASSERT_TRUE(Train(with({"run.max_steps=16", "run.output_dir=" + cosine_run, "schedule.kind=COSINE",
                          "run.keep_checkpoints=4"}),
                    Quiet())
                  .ok());
  const std::string cosine = error({"run.max_steps=8", "run.output_dir=" + TempPath("wsd_e6"),
                                    "run.init_from=" + cosine_run + "/checkpoints/step_00000004"});
  EXPECT_NE(cosine.find(": its run took step 4 at lr "), std::string::npos) << cosine;
  EXPECT_EQ(error({"run.max_steps=8", "run.output_dir=" + TempPath("wsd_e7"), "run.init_from=" + from,
                   "optimizer.adamw.beta2=0.99"}),
            "cannot start from run.init_from=" + from +
                ": optimizer differs from the checkpoint's config (modified: adamw.beta2: 0.95 -> 0.99)");
  // A run extended by --resume took its earlier steps under its earlier schedule (8 steps: decaying from 4),
  // which its final config (16 steps) no longer says; its metrics.jsonl does.
  const std::string extended = TempPath("wsd_extended");
  ASSERT_TRUE(
      Train(with({"run.max_steps=8", "run.output_dir=" + extended, "run.keep_checkpoints=4"}), Quiet()).ok());
  TrainOptions resume = Quiet();
  resume.resume = true;
  ASSERT_TRUE(
      Train(with({"run.max_steps=16", "run.output_dir=" + extended, "run.keep_checkpoints=4"}), resume).ok());
  const std::string ext = error({"run.max_steps=16", "run.output_dir=" + TempPath("wsd_e8"),
                                 "run.init_from=" + extended + "/checkpoints/step_00000012"});
  EXPECT_NE(ext.find(": its run took step 6 at lr "), std::string::npos) << ext;
  EXPECT_NE(ext.find(" (by its metrics.jsonl), this config's schedule gives 0.003 there"), std::string::npos)
      << ext;
}

// A training file replaced at the same path since the checkpoint (other ids, or another length) is refused by
// --resume: the rest of the run would not draw the windows it would have.
TEST(Trainer, ResumeRefusesChangedTrainingData) {
  const std::string out = TempPath("changed_data_run");
  const std::string train = WriteTokens("changed_data.tok", RandomIds(3000, 41));
  ASSERT_TRUE(
      Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=12"}), Quiet()).ok());
  TrainOptions resume = Quiet();
  resume.resume = true;
  const auto again = [&] {
    auto r = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=16"}), resume);
    return r.ok() ? std::string("OK") : std::string(r.status().message());
  };
  const std::string prefix = "cannot resume from " + out + "/checkpoints/step_00000012: the training file " +
                             train + " changed since the checkpoint (";
  WriteTokens("changed_data.tok", RandomIds(3000, 42));  // same length, other ids
  EXPECT_EQ(again(), prefix + "the same length, other ids; the checkpoint's run read " + train +
                         "): the run would not continue on the same data");
  WriteTokens("changed_data.tok", RandomIds(2500, 41));
  EXPECT_EQ(again(), prefix + "3000 tokens then, 2500 now; the checkpoint's run read " + train +
                         "): the run would not continue on the same data");
  WriteTokens("changed_data.tok", RandomIds(3000, 41));  // the original again
  EXPECT_EQ(again(), "OK");
}

// Without data.tokenizer, the validation file must still be of the training data's tokenizer.
TEST(Trainer, ValidationDataOfAnotherTokenizerIsRefused) {
  const std::string train = WriteTokens("val_hash_train.tok", RandomIds(2000, 31));
  const std::string val = WriteTokens("val_hash_other.tok", RandomIds(2000, 32), 512, /*hash=*/99);
  auto result = Train(Tiny({"data.train_tokens=" + train, "data.val_tokens=" + val, "run.eval_tokens=256",
                            "run.output_dir=" + TempPath("val_hash_run"), "run.max_steps=12"}),
                      Quiet());
  EXPECT_EQ(
      std::string(result.status().message()),
      val +
          ": the token file was written by a different tokenizer (header tokenizer_hash=0000000000000063, "
          "the training data has hash 0000000000000001)");
}

// data.train_mixture: a mixture of one file trains exactly as that file as train_tokens; a two-file
// mixture trains, and --resume with another mixture is refused naming the difference.
TEST(Trainer, TrainMixture) {
  const std::string a = WriteTokens("mix_a.tok", RandomIds(3000, 21)),
                    b = WriteTokens("mix_b.tok", RandomIds(2000, 22));
  auto mixture = [&](const std::vector<std::pair<std::string, double>>& sources, const std::string& out,
                     int steps) {
    config::Experiment e =
        Tiny({"data.train_tokens=" + a, "run.output_dir=" + out, "run.max_steps=" + std::to_string(steps)});
    e.mutable_data()->clear_train_tokens();
    for (const auto& [path, weight] : sources) {
      config::TokenSource* s = e.mutable_data()->add_train_mixture();
      s->set_path(path);
      s->set_weight(weight);
    }
    return e;
  };
  const std::string plain = TempPath("mix_plain"), one = TempPath("mix_one"), two = TempPath("mix_two");
  ASSERT_TRUE(
      Train(Tiny({"data.train_tokens=" + a, "run.output_dir=" + plain, "run.max_steps=12"}), Quiet()).ok());
  ASSERT_TRUE(Train(mixture({{a, 2.0}}, one, 12), Quiet()).ok());
  const std::vector<StepMetrics> p = ReadMetrics(plain), o = ReadMetrics(one);
  ASSERT_EQ(p.size(), o.size());
  for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(p[i].loss, o[i].loss) << i;
  auto trained = Train(mixture({{a, 3.0}, {b, 1.0}}, two, 12), Quiet());
  ASSERT_TRUE(trained.ok()) << trained.status();
  TrainOptions resume = Quiet();
  resume.resume = true;
  auto changed = Train(mixture({{a, 1.0}, {b, 1.0}}, two, 16), resume);
  EXPECT_EQ(std::string(changed.status().message()),
            "cannot resume from " + two +
                "/checkpoints/step_00000012: data.train_mixture differs from the "
                "checkpoint's config (modified: train_mixture[0].weight: 3 -> 1)");
}

// What FileLock writes for this process: "pid P on HOST".
std::string LockHolder() {
  char host[256] = {0};
  EXPECT_EQ(gethostname(host, sizeof(host) - 1), 0);
  return "pid " + std::to_string(getpid()) + " on " + host;
}

// A run folder has one trainer at a time: while another holds its lock (here this process, as a second
// train --resume would find the first), Train refuses before it opens the device or the data or writes
// anything; once released, it runs.
TEST(Trainer, ARunFolderInUseIsRefused) {
  const std::string train = WriteTokens("locked.tok", RandomIds(1000, 9));
  const std::string out = TempPath("locked_run");
  ASSERT_TRUE(MakeDirs(out).ok());
  const auto run = [&] {
    TrainOptions resume = Quiet();
    resume.resume = true;
    return Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=12"}), resume);
  };
  {
    absl::StatusOr<FileLock> other = FileLock::Acquire(out + "/.lock");
    ASSERT_TRUE(other.ok()) << other.status();
    auto refused = run();
    EXPECT_EQ(std::string(refused.status().message()),
              "run.output_dir=" + out + " is in use by another train process: " + out +
                  "/.lock is locked by another process (" + LockHolder() + ")");
    EXPECT_FALSE(FileExists(out + "/metrics.jsonl"));
  }
  auto ran = run();
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(ran->steps, 12);
}

// A checkpoint written by an older build: its config lacks the fields added since (here the two newest model
// fields, which it ran with at their defaults), and its digest matches that file. --resume continues it (the
// configs are compared resolved); a real difference is still refused, naming the field.
TEST(Trainer, ResumesACheckpointOfAnOlderBuild) {
  const std::string train = WriteTokens("older.tok", RandomIds(2000, 8));
  const std::string out = TempPath("older_run");
  ASSERT_TRUE(
      Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=12"}), Quiet()).ok());
  const std::string step = out + "/checkpoints/step_00000012";
  auto config = ReadFile(step + "/config.textproto");
  ASSERT_TRUE(config.ok());
  std::string older;
  for (absl::string_view line : absl::StrSplit(*config, '\n')) {
    if (absl::StrContains(line, "final_logit_softcap") || absl::StrContains(line, "parallel_shared_norm"))
      continue;
    absl::StrAppend(&older, line, "\n");
  }
  ASSERT_LT(older.size(), config->size());
  ASSERT_TRUE(WriteFileAtomically(step + "/config.textproto", older).ok());
  auto state_text = ReadFile(step + "/trainer_state.textproto");
  ASSERT_TRUE(state_text.ok());
  checkpoint::TrainerState state;
  ASSERT_TRUE(config::ParseTextProto(*state_text, "trainer_state.textproto", &state).ok());
  for (checkpoint::FileDigest& file : *state.mutable_files()) {
    if (file.name() != "config.textproto") continue;
    file.set_bytes(static_cast<int64_t>(older.size()));
    file.set_crc32c(Crc32c(older));
  }
  std::string rewritten;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(state, &rewritten));
  ASSERT_TRUE(WriteFileAtomically(step + "/trainer_state.textproto", rewritten).ok());

  TrainOptions resume = Quiet();
  resume.resume = true;
  auto wider = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=16",
                           "model.final_logit_softcap=30"}),
                     resume);
  ASSERT_FALSE(wider.ok());
  EXPECT_EQ(std::string(wider.status().message()),
            "cannot resume from " + step +
                ": model differs from the checkpoint's config (modified: "
                "final_logit_softcap: 0 -> 30)");
  auto resumed =
      Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=16"}), resume);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->steps, 16);
}

// Damage a kill cannot cause (saves are staged, then renamed): --resume falls back to the newest intact
// checkpoint, and where none is intact it refuses instead of starting over, which would overwrite the damaged
// folders and the metrics log.
TEST(Trainer, ResumeSkipsADamagedCheckpointAndRefusesWhenAllAreDamaged) {
  const std::string train = WriteTokens("damaged.tok", RandomIds(2000, 9));
  const std::string out = TempPath("damaged_run");
  auto run = [&](int64_t max_steps) {
    TrainOptions resume = Quiet();
    resume.resume = true;
    return Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.checkpoint_interval=4",
                       "run.max_steps=" + std::to_string(max_steps), "schedule.decay_end=100"}),
                 resume);
  };
  ASSERT_TRUE(run(12).ok());
  const std::string checkpoints = out + "/checkpoints";
  ASSERT_EQ(ListCheckpointSteps(checkpoints), (std::vector<int64_t>{8, 12}));
  auto flip_a_byte = [](const std::string& path) {
    auto bytes = ReadFile(path);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    (*bytes)[bytes->size() / 2] ^= 1;
    ASSERT_TRUE(WriteFileAtomically(path, *bytes).ok());
  };
  flip_a_byte(checkpoints + "/step_00000012/optimizer.safetensors");
  auto fallback = run(12);
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_EQ(fallback->steps, 12);  // resumed at 8, ran 9..12, saved a good step 12 over the damaged one
  EXPECT_EQ(ReadMetrics(out).size(), 12u);

  flip_a_byte(checkpoints + "/step_00000008/model.safetensors");
  flip_a_byte(checkpoints + "/step_00000012/config.textproto");
  auto metrics_before = ReadFile(out + "/metrics.jsonl");
  ASSERT_TRUE(metrics_before.ok());
  auto refused = run(16);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StartsWith(
      refused.status().message(),
      "--resume: every checkpoint in " + checkpoints + " is damaged (" + checkpoints + "/step_00000012/"))
      << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), checkpoints + "/step_00000008/model.safetensors"))
      << refused.status();
  EXPECT_EQ(ListCheckpointSteps(checkpoints), (std::vector<int64_t>{8, 12}));
  auto metrics_after = ReadFile(out + "/metrics.jsonl");
  ASSERT_TRUE(metrics_after.ok());
  EXPECT_EQ(*metrics_after, *metrics_before);
}

// keep_checkpoints 1, a pinned step 4 and a damaged step 12: --resume goes back to step 4, sets step 12 aside
// with a log line, and the step 8 it writes is kept (pruning it would leave only the damaged folder, and the
// next --resume would have nothing to resume but step 4); resumed again, the run ends as an undamaged one
// does.
TEST(Trainer, ResumeSetsADamagedNewerCheckpointAsideAndKeepsItsOwn) {
  const std::string train = WriteTokens("aside.tok", RandomIds(2000, 9));
  const std::string out = TempPath("aside_run"), reference = TempPath("aside_reference");
  const std::string checkpoints = out + "/checkpoints", log = TempPath("aside.log");
  auto run = [&](const std::string& dir, int64_t stop_after, std::FILE* console) {
    TrainOptions options;
    options.console = console;
    options.resume = true;
    options.stop_after_step = stop_after;
    return Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + dir, "run.checkpoint_interval=4",
                       "run.keep_checkpoints=1", "run.checkpoint_steps=4", "run.max_steps=12"}),
                 options);
  };
  ASSERT_TRUE(run(out, 0, Quiet().console).ok());
  ASSERT_EQ(ListCheckpointSteps(checkpoints), (std::vector<int64_t>{4, 12}));
  ASSERT_EQ(::truncate((checkpoints + "/step_00000012/optimizer.safetensors").c_str(), 100), 0);
  std::FILE* console = std::fopen(log.c_str(), "w");
  auto stopped = run(out, 10, console);
  std::fclose(console);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(ListCheckpointSteps(checkpoints), (std::vector<int64_t>{4, 8}));
  EXPECT_TRUE(FileExists(checkpoints + "/damaged/step_00000012/model.safetensors"));
  auto text = ReadFile(log);
  ASSERT_TRUE(text.ok());
  EXPECT_TRUE(absl::StrContains(
      *text, "moved the damaged checkpoint after step 4 to " + checkpoints + "/damaged/step_00000012\n"))
      << *text;
  auto resumed = run(out, 0, Quiet().console);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->steps, 12);
  ASSERT_TRUE(run(reference, 0, Quiet().console).ok());
  const std::vector<StepMetrics> got = ReadMetrics(out), want = ReadMetrics(reference);
  ASSERT_EQ(got.size(), 12u);
  ASSERT_EQ(want.size(), 12u);
  EXPECT_EQ(got.back().loss, want.back().loss);
}

// 2 * 10^9 layers of the tiny model (about 1.6 PB with AdamW): refused before anything is allocated, naming
// the config, instead of the allocator's abort.
TEST(Trainer, AModelLargerThanTheMachineIsRefusedUpFront) {
  const std::string train = WriteTokens("huge.tok", RandomIds(2000, 3));
  auto result = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + TempPath("huge_run"),
                            "model.n_layers=2000000000"}),
                      Quiet());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted) << result.status();
  EXPECT_TRUE(absl::StartsWith(
      result.status().message(),
      "experiment \"tiny\" (model.n_layers=2000000000, model.d_model=64, model.ffn.d_ff=172, "
      "model.vocab_size=512; run.batch_size=8 x model.context_length=32 tokens per "
      "micro-batch) needs at least "))
      << result.status();
  EXPECT_TRUE(absl::StrContains(result.status().message(), "more than this machine's ")) << result.status();
  EXPECT_FALSE(FileExists(TempPath("huge_run") + "/checkpoints"));
}

TEST(Trainer, SigtermFinishesTheStepAndCheckpoints) {
  const std::string train = WriteTokens("signal.tok", RandomIds(2000, 8));
  const std::string out = TempPath("signal_run");
  TrainOptions options = Quiet();
  options.checkpoint_on_signal = true;
  // Sends SIGTERM once a few steps are logged; the trainer must stop at a step boundary with a checkpoint.
  std::thread sender([&] {
    for (int i = 0; i < 20000; ++i) {
      auto text = ReadFile(out + "/metrics.jsonl");
      if (text.ok() && std::count(text->begin(), text->end(), '\n') >= 3) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ::kill(::getpid(), SIGTERM);
  });
  auto result = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=100000",
                            "schedule.warmup=0"}),
                      options);
  sender.join();
  ASSERT_FALSE(result.ok());
  ASSERT_EQ(result.status().code(), absl::StatusCode::kCancelled) << result.status();
  const std::vector<StepMetrics> logged = ReadMetrics(out);
  const std::string checkpoint = CheckpointPath(out + "/checkpoints", logged.back().step);
  EXPECT_EQ(result.status().message(), absl::StrCat("stopped by signal ", SIGTERM, " after step ", logged.back().step,
                                                    "; checkpoint ", checkpoint, "; continue with --resume"));
  auto latest = LatestCheckpoint(out + "/checkpoints");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, checkpoint);
}

// A SIGTERM while the run starts (here on its first console line, "device: ...", written before the model is
// built) is taken like one during training: the run trains its step, checkpoints and returns Cancelled. It
// used to end the process at once (the test binary with it).
TEST(Trainer, SigtermDuringStartupStopsAfterTheFirstStep) {
  const std::string train = WriteTokens("startup_signal.tok", RandomIds(2000, 6));
  const std::string out = TempPath("startup_signal_run");
  cookie_io_functions_t io = {};
  io.write = [](void*, const char*, size_t size) -> ssize_t {
    static bool sent = false;
    if (!sent) sent = (::kill(::getpid(), SIGTERM) == 0);
    return static_cast<ssize_t>(size);
  };
  TrainOptions options;
  options.console = ::fopencookie(nullptr, "w", io);
  ASSERT_NE(options.console, nullptr);
  std::setvbuf(options.console, nullptr, _IONBF, 0);  // each message reaches `write` when it is printed
  options.checkpoint_on_signal = true;
  auto result = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=100000",
                            "schedule.warmup=0"}),
                      options);
  std::fclose(options.console);
  ASSERT_FALSE(result.ok());
  ASSERT_EQ(result.status().code(), absl::StatusCode::kCancelled) << result.status();
  EXPECT_TRUE(absl::StartsWith(result.status().message(),
                               absl::StrCat("stopped by signal ", SIGTERM, " after step ")))
      << result.status();
  EXPECT_TRUE(LatestCheckpoint(out + "/checkpoints").ok());
}

TEST(Trainer, LogNamesTheDeviceAndTheMfuPeak) {
  const std::string train = WriteTokens("device.tok", RandomIds(1000, 9));
  const std::string log = TempPath("device.log");
  TrainOptions options;
  options.console = std::fopen(log.c_str(), "w");
  auto result = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + TempPath("device_run"),
                            "run.max_steps=2", "schedule.warmup=0", "run.peak_flops=1e12"}),
                      options);
  std::fclose(options.console);
  ASSERT_TRUE(result.ok()) << result.status();
  auto text = ReadFile(log);
  ASSERT_TRUE(text.ok());
  const std::string threads = std::to_string(kernels::Context::Cpu().num_threads());
  EXPECT_EQ(text->rfind("device: CPU (" + threads + " threads), FP32; MFU against 1e+12 FLOP/s (run.peak_flops)\n", 0),
            0u)
      << *text;
  const std::vector<StepMetrics> metrics = ReadMetrics(TempPath("device_run"));
  ASSERT_EQ(metrics.size(), 2u);
  EXPECT_GT(metrics[1].mfu, 0);
}

// run.op_profile_steps on a CPU run: the table of the profiled steps names the model's ops with their calls
// per step (attention once per layer and micro-batch each way) and the host time outside them, the log names
// the file and the largest ops.
TEST(Trainer, CpuOpProfileCountsEveryOpOfTheProfiledSteps) {
  const std::string train = WriteTokens("op_profile.tok", RandomIds(2000, 5));
  const std::string log = TempPath("op_profile.log"), out = TempPath("op_profile_run");
  TrainOptions options;
  options.console = std::fopen(log.c_str(), "w");
  auto result = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + out, "run.max_steps=5",
                            "run.op_profile_steps=3", "run.grad_accum_steps=2", "schedule.warmup=0"}),
                      options);
  std::fclose(options.console);
  ASSERT_TRUE(result.ok()) << result.status();
  absl::StatusOr<std::string> profile = ReadFile(out + "/op_profile.txt");
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_TRUE(absl::StrContains(*profile, "steps 2-4 on CPU (")) << *profile;
  EXPECT_TRUE(absl::StrContains(*profile, "kernels/profile/cpu_op_profiler.h")) << *profile;
  // Calls per step: 2 layers x 2 micro-batches for each attention direction; the update is one call per
  // weight-decay group (optimizer.cc).
  const std::map<std::string, std::string> calls = {{"AttentionForward", "4.0"},
                                                    {"AttentionBackward", "4.0"},
                                                    {"MultiTensorAdamW", "2.0"},
                                                    {"CrossEntropyForward", "2.0"},
                                                    {"EmbeddingBackward", "2.0"}};
  for (const auto& [op, per_step] : calls) {
    const size_t row = profile->find("\n" + op + " ");
    ASSERT_NE(row, std::string::npos) << op << " missing from\n" << *profile;
    const std::string line = profile->substr(row + 1, profile->find('\n', row + 1) - row - 1);
    const std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    ASSERT_GE(fields.size(), 2u) << line;
    EXPECT_EQ(fields[1], per_step) << line;
  }
  for (const char* row : {"Matmul ", "MatmulBackward ", "(outside the ops) ", "window "}) {
    EXPECT_TRUE(absl::StrContains(*profile, row)) << row << " missing from\n" << *profile;
  }
  absl::StatusOr<std::string> console = ReadFile(log);
  ASSERT_TRUE(console.ok()) << console.status();
  EXPECT_TRUE(absl::StrContains(*console, "op profile of steps 2-4: " + out + "/op_profile.txt (largest: "))
      << *console;
}

// With gradient accumulation, a step processes batch_size x context_length x grad_accum_steps tokens: the
// logged tokens and tokens/s count all of them once per optimizer step, and MFU is tokens/s x the model's
// training FLOPs per token (model/accounting, at the context length) / the peak, so a FLOP or token count
// taken per micro-batch (or the micro-batches left out) shows as a factor of grad_accum_steps.
TEST(Trainer, MfuAndTokensCountEveryMicroBatchOncePerStep) {
  const std::string train = WriteTokens("accum_mfu.tok", RandomIds(2000, 12));
  const config::Experiment e = Tiny({"data.train_tokens=" + train, "run.output_dir=" + TempPath("accum_mfu_run"),
                                     "run.max_steps=2", "schedule.warmup=0", "run.peak_flops=1e12",
                                     "run.grad_accum_steps=3"});
  auto result = Train(e, Quiet());
  ASSERT_TRUE(result.ok()) << result.status();
  const int64_t tokens_per_step = e.run().batch_size() * e.model().context_length() * 3;
  absl::StatusOr<model::ModelConfig> config = config::ToModelConfig(e.model());
  ASSERT_TRUE(config.ok()) << config.status();
  const double flops_per_token = model::CountFlopsPerToken(*config, e.model().context_length()).training();
  const std::vector<StepMetrics> metrics = ReadMetrics(TempPath("accum_mfu_run"));
  ASSERT_EQ(metrics.size(), 2u);
  for (const StepMetrics& m : metrics) {
    EXPECT_EQ(m.tokens, m.step * tokens_per_step) << "step " << m.step;
    // metrics.jsonl keeps 17 significant digits; the products below round a few times in double.
    EXPECT_NEAR(m.mfu, m.tokens_per_second * flops_per_token / 1e12, 1e-12 * m.mfu) << "step " << m.step;
  }
  // The first step's wall time is that step's: its tokens/s is all of the step's tokens over it.
  EXPECT_NEAR(metrics[0].tokens_per_second * metrics[0].wall_seconds, static_cast<double>(tokens_per_step),
              1e-9 * tokens_per_step);
}

TEST(Trainer, CudaWithoutAUsableDeviceIsAClearError) {
  const std::string train = WriteTokens("cuda.tok", RandomIds(1000, 10));
  auto result = Train(Tiny({"data.train_tokens=" + train, "run.output_dir=" + TempPath("cuda_run"),
                            "run.device=CUDA", "model.d_model=256"}),
                      Quiet());
  if (result.ok()) GTEST_SKIP() << "this machine has a usable GPU (trainer_cuda_test covers it)";
  const std::string message(result.status().message());
  // Built without the CUDA backend, the message says how to build with it; built with it on a machine
  // without a GPU, it names the CUDA error.
  EXPECT_TRUE(message.rfind("run.device=CUDA: this binary was built without the CUDA backend", 0) == 0 ||
              message.rfind("run.device=CUDA: cannot open CUDA device 0: ", 0) == 0)
      << message;
  EXPECT_FALSE(FileExists(TempPath("cuda_run") + "/metrics.jsonl"));
}

TEST(Trainer, BadDataIsAClearError) {
  const std::string wide = WriteTokens("wide.tok", RandomIds(100, 6), 1000);
  auto result = Train(Tiny({"data.train_tokens=" + wide, "run.output_dir=" + TempPath("bad_run")}), Quiet());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(),
            wide + ": the token file's tokenizer has vocab_size=1000, more than model.vocab_size=512");
}

}  // namespace
}  // namespace lmf::experiments
