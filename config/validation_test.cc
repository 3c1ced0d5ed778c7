// Every validation rule of the experiment config, each with a bad config and the exact message expected.
// Bad configs are a valid base config with one line removed or one field overridden (--set), so each test
// breaks exactly one rule.
#include "config/validation.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "config/loader.h"
#include "config/run_length.h"
#include "gtest/gtest.h"

namespace lmf::config {
namespace {

constexpr char kBase[] = R"pb(
model {
  d_model: 64
  n_layers: 2
  n_heads: 4
  vocab_size: 512
  context_length: 32
  ffn { kind: SWIGLU d_ff: 128 }
}
optimizer {
  lr: 1e-3
}
data {
  train_tokens: "train.tok"
  val_tokens: "val.tok"
}
run {
  batch_size: 4
  max_steps: 100
  eval_tokens: 256
  output_dir: "out"
}
)pb";

// kBase without every line that contains `needle`.
std::string Without(const std::string& needle) {
  std::vector<std::string> kept;
  for (absl::string_view line : absl::StrSplit(kBase, '\n')) {
    if (!absl::StrContains(line, needle)) kept.emplace_back(line);
  }
  return absl::StrJoin(kept, "\n");
}

// The error message of loading `text` with `overrides`, or "OK".
std::string Error(const std::string& text, std::vector<std::string> overrides = {}) {
  auto loaded = LoadExperimentText(text, "tiny.textproto", overrides);
  return loaded.ok() ? "OK" : std::string(loaded.status().message());
}

std::string ErrorWith(const std::string& assignment) { return Error(kBase, {assignment}); }

// kBase with `fields` written into its model message (for values --set cannot express).
std::string WithModelFields(const std::string& fields) {
  std::string text = kBase;
  text.replace(text.find("ffn {"), 5, fields + "\n  ffn {");
  return text;
}

TEST(ConfigValidation, BaseConfigIsValid) { EXPECT_EQ(Error(kBase), "OK"); }

TEST(ConfigValidation, MissingTopLevelMessages) {
  EXPECT_EQ(Error("run { batch_size: 1 }"),
            "tiny.textproto: model is required\ntiny.textproto: optimizer is required\n"
            "tiny.textproto: data is required");
}

TEST(ConfigValidation, HeadsMustDivideWidth) {
  EXPECT_EQ(Error(kBase, {"model.d_model=1000", "model.n_heads=12"}),
            "tiny.textproto: model.n_heads=12 does not divide model.d_model=1000");
}

TEST(ConfigValidation, KvHeadsMustDivideHeads) {
  EXPECT_EQ(ErrorWith("model.n_kv_heads=3"),
            "tiny.textproto: model.n_kv_heads=3 does not divide model.n_heads=4 (each key/value head must "
            "serve the same number of query heads)");
  EXPECT_EQ(ErrorWith("model.n_kv_heads=8"),
            "tiny.textproto: model.n_kv_heads=8 is more than model.n_heads=4");
}

TEST(ConfigValidation, KvHeadsMustBePositive) {
  EXPECT_EQ(ErrorWith("model.n_kv_heads=0"), "tiny.textproto: model.n_kv_heads=0 must be positive");
}

TEST(ConfigValidation, RequiredModelSizes) {
  EXPECT_EQ(Error(Without("d_model")), "tiny.textproto: model.d_model is required (a positive integer)");
  EXPECT_EQ(Error(Without("n_layers")), "tiny.textproto: model.n_layers is required (a positive integer)");
  EXPECT_EQ(Error(Without("n_heads")), "tiny.textproto: model.n_heads is required (a positive integer)");
  EXPECT_EQ(Error(Without("vocab_size")), "tiny.textproto: model.vocab_size is required (a positive integer)");
  EXPECT_EQ(Error(Without("context_length")),
            "tiny.textproto: model.context_length is required (a positive integer)");
}

TEST(ConfigValidation, ModelSizesMustBePositive) {
  EXPECT_EQ(ErrorWith("model.n_layers=0"), "tiny.textproto: model.n_layers=0 must be positive");
  EXPECT_EQ(ErrorWith("model.vocab_size=-5"), "tiny.textproto: model.vocab_size=-5 must be positive");
}

TEST(ConfigValidation, FeedForwardIsRequired) {
  EXPECT_EQ(Error(Without("ffn")), "tiny.textproto: model.ffn is required (kind and d_ff of the feed-forward layer)");
  EXPECT_EQ(Error(kBase, {"model.ffn.d_ff=0"}), "tiny.textproto: model.ffn.d_ff=0 must be positive");
}

TEST(ConfigValidation, RopeNeedsEvenHeadSize) {
  EXPECT_EQ(Error(kBase, {"model.d_model=60", "model.n_heads=4"}),
            "tiny.textproto: model.positional.kind=ROPE needs an even head size, but model.d_model=60 / "
            "model.n_heads=4 = 15");
  EXPECT_EQ(Error(kBase, {"model.d_model=60", "model.positional.kind=LEARNED"}), "OK");
}

// The model's own rule (model/config), reported at load with the file and the field's config path; it
// was once reported by the model alone, without either, once training started.
TEST(ConfigValidation, SinusoidalPositionsNeedAnEvenWidth) {
  EXPECT_EQ(
      Error(kBase, {"model.positional.kind=SINUSOIDAL", "model.d_model=63", "model.n_heads=7"}),
      "tiny.textproto: model.positional.kind=SINUSOIDAL needs an even model.d_model (a sine and a cosine "
      "per frequency), got 63");
  EXPECT_EQ(Error(kBase, {"model.positional.kind=SINUSOIDAL", "model.d_model=62", "model.n_heads=2"}), "OK");
}

// The model's own rule (model/config: above 1): a config validation accepts is one the model builds.
TEST(ConfigValidation, RopeThetaMustBeAboveOne) {
  for (const char* theta : {"0", "0.5", "1"}) {
    EXPECT_EQ(ErrorWith(std::string("model.positional.rope_theta=") + theta),
              std::string("tiny.textproto: model.positional.rope_theta=") + theta +
                  " must be a finite number above 1 (the base of RoPE's wavelengths)");
  }
  EXPECT_EQ(
      Error(WithModelFields("positional { kind: ROPE rope_theta: inf }")),
      "tiny.textproto: model.positional.rope_theta=inf must be a finite number above 1 (the base of RoPE's "
      "wavelengths)");
  EXPECT_EQ(ErrorWith("model.positional.rope_theta=1.0001"), "OK");
}

TEST(ConfigValidation, NormEpsMustBePositive) {
  EXPECT_EQ(ErrorWith("model.norm.eps=-1e-05"), "tiny.textproto: model.norm.eps=-1e-05 must be positive");
}

TEST(ConfigValidation, ZLossIsFiniteAndNotNegative) {
  EXPECT_EQ(ErrorWith("model.z_loss=1e-4"), "OK");
  EXPECT_EQ(ErrorWith("model.z_loss=-1e-4"),
            "tiny.textproto: model.z_loss=-0.0001 must be a finite number >= 0 (0 turns it off)");
  EXPECT_EQ(ErrorWith("model.z_loss=inf"),
            "--set=model.z_loss=inf: model.z_loss expects a finite number, got \"inf\"");
  EXPECT_EQ(Error(WithModelFields("z_loss: inf")),
            "tiny.textproto: model.z_loss=inf must be a finite number >= 0 (0 turns it off)");
}

TEST(ConfigValidation, ParallelBlockNeedsPreNorm) {
  EXPECT_EQ(ErrorWith("model.parallel_block=true"), "OK");
  EXPECT_EQ(Error(kBase, {"model.parallel_block=true", "model.norm.placement=POST"}),
            "tiny.textproto: model.parallel_block=true needs model.norm.placement=PRE, not POST (the two "
            "branches read one normed block input)");
}

TEST(ConfigValidation, UnspecifiedEnumIsRejected) {
  std::string text = kBase;
  text.replace(text.find("kind: SWIGLU"), 12, "kind: KIND_UNSPECIFIED");
  EXPECT_EQ(Error(text), "tiny.textproto: model.ffn.kind must not be an UNSPECIFIED value");
}

TEST(ConfigValidation, InitStdMustBePositive) {
  EXPECT_EQ(ErrorWith("model.init.std=0"),
            "tiny.textproto: model.init.std=0 must be a positive finite number");
  EXPECT_EQ(
      ErrorWith("model.init.scheme=MUP"),
      "tiny.textproto: model.init.mup_base_d_model=0 must be positive with model.init.scheme=MUP (the width "
      "its lr was tuned at)");
  EXPECT_EQ(Error(kBase, {"model.init.scheme=MUP", "model.init.mup_base_d_model=32"}), "OK");
  EXPECT_EQ(ErrorWith("model.init.mup_base_d_model=32"),
            "tiny.textproto: model.init.mup_base_d_model applies to model.init.scheme=MUP only, not "
            "TRUNCATED_NORMAL");
  EXPECT_EQ(
      Error(kBase, {"model.init.scheme=MUP", "model.init.mup_base_d_model=32", "model.tied_embeddings=true"}),
      "tiny.textproto: model.init.scheme=MUP needs model.tied_embeddings=false (the input embedding and the "
      "LM "
      "head scale differently with width)");
}

TEST(ConfigValidation, SlidingWindowRules) {
  EXPECT_EQ(ErrorWith("model.attention.sliding_window.window=64"),
            "tiny.textproto: model.attention.sliding_window.window=64 exceeds model.context_length=32");
  EXPECT_EQ(Error(kBase, {"model.attention.sliding_window.window=8",
                          "model.attention.sliding_window.global_every=-1"}),
            "tiny.textproto: model.attention.sliding_window.global_every=-1 must not be negative");
  EXPECT_EQ(Error(WithModelFields("attention { sliding_window {} }")),
            "tiny.textproto: model.attention.sliding_window.window is required (a positive integer)");
}

TEST(ConfigValidation, MultiLatentAttentionRules) {
  EXPECT_EQ(Error(kBase, {"model.attention.mla.kv_lora_rank=16", "model.attention.mla.rope_head_dim=7"}),
            "tiny.textproto: model.attention.mla.rope_head_dim=7 must be even");
  EXPECT_EQ(ErrorWith("model.attention.mla.kv_lora_rank=16"),
            "tiny.textproto: model.attention.mla.rope_head_dim is required (a positive integer)");
  EXPECT_EQ(Error(kBase, {"model.attention.mla.kv_lora_rank=16", "model.attention.mla.rope_head_dim=8",
                          "model.attention.mla.q_lora_rank=-1"}),
            "tiny.textproto: model.attention.mla.q_lora_rank=-1 must not be negative");
}

TEST(ConfigValidation, SoftcapMustNotBeNegative) {
  EXPECT_EQ(ErrorWith("model.attention.logit_softcap=-30"),
            "tiny.textproto: model.attention.logit_softcap=-30 must be a finite number >= 0 (0 turns it "
            "off)");
}

TEST(ConfigValidation, SharedParallelNormNeedsParallelBlocks) {
  EXPECT_EQ(ErrorWith("model.parallel_shared_norm=true"),
            "tiny.textproto: model.parallel_shared_norm=true needs model.parallel_block=true (it shares the "
            "parallel branches' norm)");
  EXPECT_EQ(Error(kBase, {"model.parallel_block=true", "model.parallel_shared_norm=true"}), "OK");
}

TEST(ConfigValidation, FinalLogitSoftcapMustNotBeNegative) {
  EXPECT_EQ(ErrorWith("model.final_logit_softcap=-30"),
            "tiny.textproto: model.final_logit_softcap=-30 must be a finite number >= 0 (0 turns it off)");
}

TEST(ConfigValidation, LearningRateRules) {
  EXPECT_EQ(Error(Without("lr:")), "tiny.textproto: optimizer.lr is required (the peak learning rate)");
  EXPECT_EQ(ErrorWith("optimizer.lr=-0.001"), "tiny.textproto: optimizer.lr=-0.001 must be positive and finite");
}

TEST(ConfigValidation, AdamWRules) {
  EXPECT_EQ(ErrorWith("optimizer.adamw.beta1=1"), "tiny.textproto: optimizer.adamw.beta1=1 must be in [0, 1)");
  EXPECT_EQ(ErrorWith("optimizer.adamw.beta2=-0.5"),
            "tiny.textproto: optimizer.adamw.beta2=-0.5 must be in [0, 1)");
  EXPECT_EQ(ErrorWith("optimizer.adamw.eps=0"), "tiny.textproto: optimizer.adamw.eps=0 must be positive");
  EXPECT_EQ(ErrorWith("optimizer.adamw.weight_decay=-0.1"),
            "tiny.textproto: optimizer.adamw.weight_decay=-0.1 must be a finite number >= 0");
  std::string inf_decay = kBase;
  inf_decay.replace(inf_decay.find("lr: 1e-3"), 8, "lr: 1e-3 adamw { weight_decay: inf }");
  EXPECT_EQ(Error(inf_decay),
            "tiny.textproto: optimizer.adamw.weight_decay=inf must be a finite number >= 0");
  EXPECT_EQ(ErrorWith("optimizer.grad_clip=-1"),
            "tiny.textproto: optimizer.grad_clip=-1 must be a finite number >= 0 (0 turns clipping off)");
  // A file can hold inf (--set refuses it); an epsilon below fp32's range rounds to 0 in the kernels.
  std::string inf_clip = kBase;
  inf_clip.replace(inf_clip.find("lr: 1e-3"), 8, "lr: 1e-3 grad_clip: inf");
  EXPECT_EQ(Error(inf_clip),
            "tiny.textproto: optimizer.grad_clip=inf must be a finite number >= 0 (0 turns clipping off)");
  EXPECT_EQ(ErrorWith("optimizer.adamw.eps=1e-50"),
            "tiny.textproto: optimizer.adamw.eps=1e-50 is not a positive fp32 number (the kernels apply it "
            "in fp32)");
}

TEST(ConfigValidation, ScheduleRules) {
  EXPECT_EQ(ErrorWith("schedule.warmup=-1"), "tiny.textproto: schedule.warmup=-1 must not be negative");
  EXPECT_EQ(ErrorWith("schedule.decay_end=-1"), "tiny.textproto: schedule.decay_end=-1 must not be negative");
  EXPECT_EQ(ErrorWith("schedule.min_lr_ratio=1.5"),
            "tiny.textproto: schedule.min_lr_ratio=1.5 must be in [0, 1]");
  EXPECT_EQ(Error(kBase, {"schedule.warmup=50", "schedule.decay_end=50"}),
            "tiny.textproto: schedule.decay_end=50 must be greater than schedule.warmup=50");
  EXPECT_EQ(Error(kBase, {"schedule.warmup=50", "schedule.decay_end=50", "schedule.kind=CONSTANT"}), "OK");
  // Warmup-stable-decay's own fields.
  EXPECT_EQ(
      Error(kBase, {"schedule.kind=WSD", "schedule.decay_fraction=0.1", "schedule.decay_shape=DECAY_COSINE"}),
      "OK");
  EXPECT_EQ(Error(kBase, {"schedule.kind=WSD", "schedule.decay_fraction=0"}),
            "tiny.textproto: schedule.decay_fraction=0 must be in (0, 1]");
  EXPECT_EQ(Error(kBase, {"schedule.kind=WSD", "schedule.decay_fraction=1.5"}),
            "tiny.textproto: schedule.decay_fraction=1.5 must be in (0, 1]");
  EXPECT_EQ(Error(kBase, {"schedule.decay_fraction=0"}), "OK");  // ignored by COSINE
  // A decay that rounds to no step, or that the warmup leaves no room for (100 steps).
  EXPECT_EQ(
      Error(kBase, {"schedule.kind=WSD", "schedule.decay_fraction=0.0001"}),
      "tiny.textproto: schedule.decay_fraction=0.0001 leaves WSD no decay: over 100 steps it would start at "
      "100 (after schedule.warmup=0) and end at 100, under the two steps it takes to leave the peak");
  EXPECT_EQ(
      Error(kBase, {"schedule.kind=WSD", "schedule.warmup=100"}),
      "tiny.textproto: schedule.decay_fraction=0.2 leaves WSD no decay: over 100 steps it would start at 100 "
      "(after schedule.warmup=100) and end at 100, under the two steps it takes to leave the peak");
  // A decay of one step is at the peak throughout.
  EXPECT_EQ(
      Error(kBase, {"schedule.kind=WSD", "schedule.warmup=99"}),
      "tiny.textproto: schedule.decay_fraction=0.2 leaves WSD no decay: over 100 steps it would start at 99 "
      "(after schedule.warmup=99) and end at 100, under the two steps it takes to leave the peak");
  EXPECT_EQ(Error(kBase, {"schedule.kind=WSD", "schedule.warmup=98"}), "OK");
  // (--set refuses an UNSPECIFIED enum name; a file can hold one.)
  EXPECT_EQ(Error(std::string(kBase) + "schedule { kind: WSD decay_shape: DECAY_SHAPE_UNSPECIFIED }"),
            "tiny.textproto: schedule.decay_shape must not be an UNSPECIFIED value");
}

TEST(ConfigValidation, WarmupLongerThanRun) {
  EXPECT_EQ(ErrorWith("schedule.warmup=101"),
            "tiny.textproto: schedule.warmup=101 exceeds the run's length of 100 steps");
  // In tokens: 100 steps * 4 sequences * 32 tokens = 12800 tokens.
  EXPECT_EQ(Error(kBase, {"schedule.unit=TOKENS", "schedule.warmup=12801"}),
            "tiny.textproto: schedule.warmup=12801 exceeds the run's length of 12800 tokens");
}

TEST(ConfigValidation, TrainTokensRequired) {
  EXPECT_EQ(Error(Without("train_tokens")),
            "tiny.textproto: data.train_tokens is required (a token file from `bpe encode`), or "
            "data.train_mixture");
}

TEST(ConfigValidation, TrainMixtureRules) {
  std::string mixture = Without("train_tokens");
  mixture.replace(
      mixture.find("data {"), 6,
      "data {\n  train_mixture { path: \"web.tok\" weight: 3 }\n  train_mixture { path: \"code.tok\" }");
  EXPECT_EQ(Error(mixture), "OK");
  EXPECT_EQ(Error(mixture, {"data.train_tokens=x.tok"}),
            "tiny.textproto: data.train_tokens and data.train_mixture are alternatives: give one of them");
  std::string bad = mixture;
  bad.replace(bad.find("weight: 3"), 9, "weight: 0");
  bad.replace(bad.find("path: \"code.tok\""), 16, "weight: inf");
  EXPECT_EQ(Error(bad),
            "tiny.textproto: data.train_mixture[0].weight=0 must be a positive, finite number\n"
            "tiny.textproto: data.train_mixture[1].path is required\n"
            "tiny.textproto: data.train_mixture[1].weight=inf must be a positive, finite number");
  std::string huge = mixture;
  huge.replace(huge.find("weight: 3"), 9, "weight: 1e308");
  huge.replace(huge.find("path: \"code.tok\""), 16, "path: \"code.tok\" weight: 1e308");
  EXPECT_EQ(Error(huge),
            "tiny.textproto: data.train_mixture's weights sum to infinity: give them on a smaller scale "
            "(only their "
            "ratios matter)");
  auto loaded = LoadExperimentText(mixture, "/base/tiny.textproto", {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->data().train_mixture(1).weight(), 1.0);  // the default
}

TEST(ConfigValidation, EvaluationNeedsValidationData) {
  EXPECT_EQ(Error(Without("  val_tokens")), "tiny.textproto: run.eval_tokens=256 needs data.val_tokens");
}

TEST(ConfigValidation, EvaluationBudgetCoversOneBatch) {
  EXPECT_EQ(ErrorWith("run.eval_tokens=100"),
            "tiny.textproto: run.eval_tokens=100 is less than one batch of 128 tokens "
            "(run.batch_size * model.context_length)");
}

TEST(ConfigValidation, RunRules) {
  EXPECT_EQ(Error(Without("batch_size")), "tiny.textproto: run.batch_size is required (a positive integer)");
  EXPECT_EQ(ErrorWith("run.grad_accum_steps=0"), "tiny.textproto: run.grad_accum_steps=0 must be at least 1");
  EXPECT_EQ(Error(Without("max_steps")),
            "tiny.textproto: run.max_steps or run.max_tokens is required (how long to train)");
  EXPECT_EQ(ErrorWith("run.max_steps=0"), "tiny.textproto: run.max_steps=0 must be positive");
  EXPECT_EQ(ErrorWith("run.eval_interval=-1"), "tiny.textproto: run.eval_interval=-1 must not be negative");
  EXPECT_EQ(ErrorWith("run.checkpoint_interval=-2"),
            "tiny.textproto: run.checkpoint_interval=-2 must not be negative");
  EXPECT_EQ(ErrorWith("run.keep_checkpoints=0"), "tiny.textproto: run.keep_checkpoints=0 must be at least 1");
  EXPECT_EQ(Error(Without("output_dir")), "tiny.textproto: run.output_dir is required (the folder this run writes)");
  // Negative, a unit slip, 1e-300 (MFU was infinite) and inf (MFU was 0) are refused; 0 means "measure".
  for (const char* peak : {"-1", "989.4", "1e-300"}) {
    EXPECT_EQ(
        ErrorWith(std::string("run.peak_flops=") + peak),
        std::string("tiny.textproto: run.peak_flops=") + peak +
            " must be 0 (the measured CPU peak or the GPU's data-sheet rate) or a finite rate of at least "
            "1e6 FLOP/s");
  }
  std::string inf_peak = kBase;
  inf_peak.replace(inf_peak.find("  batch_size: 4"), 15, "  batch_size: 4 peak_flops: inf");
  EXPECT_EQ(
      Error(inf_peak),
      "tiny.textproto: run.peak_flops=inf must be 0 (the measured CPU peak or the GPU's data-sheet rate) or "
      "a finite rate of at least 1e6 FLOP/s");
  EXPECT_EQ(ErrorWith("run.peak_flops=0"), "OK");
  EXPECT_EQ(ErrorWith("run.peak_flops=989.4e12"), "OK");
}

TEST(ConfigValidation, MaxTokensCoversOneStep) {
  EXPECT_EQ(Error(Without("max_steps"), {"run.max_tokens=100"}),
            "tiny.textproto: run.max_tokens=100 is less than one step of 128 tokens "
            "(run.batch_size * run.grad_accum_steps * model.context_length)");
  EXPECT_EQ(Error(Without("max_steps"), {"run.max_tokens=-4"}), "tiny.textproto: run.max_tokens=-4 must be positive");
}

// Three int32 fields whose product passes int64: refused before any count of tokens is formed from them.
TEST(ConfigValidation, TokensPerStepFitInSixtyFourBits) {
  EXPECT_EQ(Error(kBase,
                  {"run.batch_size=2147483647", "run.grad_accum_steps=2147483647", "model.context_length=4"}),
            "tiny.textproto: run.batch_size=2147483647 * run.grad_accum_steps=2147483647 * "
            "model.context_length=4 tokens per step do not fit in 64 bits");
  EXPECT_EQ(Error(kBase, {"run.batch_size=2147483647", "run.grad_accum_steps=2147483647",
                          "model.context_length=1", "run.eval_tokens=4611686014132420609"}),
            "OK");  // (2^31 - 1)^2 fits
}

TEST(ConfigValidation, Bf16RunsOnEitherDevice) {
  EXPECT_EQ(ErrorWith("run.precision=BF16"), "OK");  // the CPU's bf16 path (kernels/cpu/bf16.h)
  EXPECT_EQ(Error(kBase, {"run.precision=BF16", "run.device=CUDA"}), "OK");
  EXPECT_EQ(ErrorWith("run.cuda_device=-1"), "tiny.textproto: run.cuda_device=-1 must not be negative");
}

TEST(ConfigValidation, OpProfileStepsOnEitherDeviceNeverNegative) {
  EXPECT_EQ(ErrorWith("run.op_profile_steps=3"), "OK");
  EXPECT_EQ(Error(kBase, {"run.op_profile_steps=3", "run.device=CUDA"}), "OK");
  EXPECT_EQ(Error(kBase, {"run.op_profile_steps=-1", "run.device=CUDA"}),
            "tiny.textproto: run.op_profile_steps=-1 must not be negative");
}

TEST(ConfigValidation, GemmAutotuneNeedsCuda) {
  EXPECT_EQ(ErrorWith("run.gemm_autotune=true"),
            "tiny.textproto: run.gemm_autotune=true needs run.device=CUDA (it chooses among cuBLASLt's algorithms)");
  EXPECT_EQ(Error(kBase, {"run.gemm_autotune=true", "run.device=CUDA"}), "OK");
}

TEST(ConfigValidation, LogIntervalAtLeastOne) {
  EXPECT_EQ(ErrorWith("logging.log_interval=0"), "tiny.textproto: logging.log_interval=0 must be at least 1");
}

TEST(ConfigValidation, ReportsEveryProblemOnItsOwnLine) {
  EXPECT_EQ(Error(kBase, {"model.n_layers=0", "optimizer.lr=-1"}),
            "tiny.textproto: model.n_layers=0 must be positive\n"
            "tiny.textproto: optimizer.lr=-1 must be positive and finite");
  // The config's rules and the model's (model/config) together; a size left out is reported once, as
  // absent, not also as 0.
  EXPECT_EQ(Error(Without("d_model"),
                  {"model.z_loss=-1", "model.norm.placement=POST", "model.parallel_block=true"}),
            "tiny.textproto: model.d_model is required (a positive integer)\n"
            "tiny.textproto: model.parallel_block=true needs model.norm.placement=PRE, not POST (the two "
            "branches read one normed block input)\n"
            "tiny.textproto: model.z_loss=-1 must be a finite number >= 0 (0 turns it off)");
}

// run.parallel's pipeline rules, each message naming the fields it compares.
TEST(ConfigValidation, PipelineStagesFitTheModelAndTheSchedule) {
  EXPECT_EQ(Error(kBase, {"run.parallel.pipeline=2", "run.grad_accum_steps=4", "run.parallel.data=2"}), "OK");
  EXPECT_EQ(ErrorWith("run.parallel.pipeline=3"),
            "tiny.textproto: run.parallel.pipeline=3 x run.parallel.virtual_stages=1 stages exceed "
            "model.n_layers=2 (each stage needs a layer)");
  EXPECT_EQ(ErrorWith("run.parallel.pipeline=0"),
            "tiny.textproto: run.parallel.pipeline=0 must be 1 to 256 stages");
  EXPECT_EQ(Error(kBase, {"model.n_layers=4", "run.parallel.pipeline=2", "run.parallel.stage_layers=1,2"}),
            "tiny.textproto: run.parallel.stage_layers sums to 3 layers, model.n_layers=4");
  EXPECT_EQ(Error(kBase, {"model.n_layers=4", "run.parallel.pipeline=2", "run.parallel.stage_layers=1,2,1"}),
            "tiny.textproto: run.parallel.stage_layers has 3 entries; run.parallel.pipeline=2 x "
            "run.parallel.virtual_stages=1 needs 2");
  EXPECT_EQ(Error(kBase, {"model.n_layers=4", "run.parallel.pipeline=2", "run.parallel.stage_layers=4,0"}),
            "tiny.textproto: run.parallel.stage_layers[1]=0 must be at least 1 (every stage needs a layer)");
  EXPECT_EQ(Error(kBase, {"model.n_layers=4", "run.parallel.pipeline=2", "run.parallel.stage_layers=3,1"}),
            "OK");
  EXPECT_EQ(Error(kBase, {"run.parallel.pipeline=2", "run.parallel.schedule=ZB_H1"}), "OK");
  // ZeRO-1 shards each stage's optimizer state over its data group (experiments/trainer/pipeline_test).
  EXPECT_EQ(Error(kBase, {"run.parallel.data=2", "run.parallel.pipeline=2", "run.parallel.zero_stage=1",
                          "run.grad_accum_steps=4"}),
            "OK");
  // On GPUs pipelines compose with data parallelism (experiments/trainer/data_parallel_cuda_test).
  EXPECT_EQ(Error(kBase, {"run.parallel.pipeline=2", "run.device=CUDA"}), "OK");
  EXPECT_EQ(Error(kBase, {"run.parallel.data=2", "run.parallel.pipeline=2", "run.grad_accum_steps=4",
                          "run.device=CUDA", "run.precision=BF16", "run.parallel.zero_stage=1"}),
            "OK");
}

// Data parallelism on GPUs runs over NCCL (experiments/trainer/device_group.h), with ZeRO-1 too.
TEST(ConfigValidation, DataParallelOnCuda) {
  EXPECT_EQ(Error(kBase, {"run.parallel.data=2", "run.grad_accum_steps=2", "run.device=CUDA"}), "OK");
  EXPECT_EQ(Error(kBase, {"run.parallel.data=2", "run.grad_accum_steps=2", "run.device=CUDA",
                          "run.precision=BF16"}),
            "OK");
  EXPECT_EQ(Error(kBase, {"run.parallel.data=2", "run.grad_accum_steps=2", "run.device=CUDA",
                          "run.parallel.zero_stage=1"}),
            "OK");
  EXPECT_EQ(Error(kBase, {"run.parallel.data=2", "run.grad_accum_steps=2", "run.parallel.zero_stage=1"}), "OK");
}

TEST(ConfigValidation, InterleavingNeedsChunksAndMicroBatchesPerStage) {
  const std::vector<std::string> interleaved = {"model.n_layers=4", "run.parallel.pipeline=2",
                                                "run.parallel.virtual_stages=2",
                                                "run.parallel.schedule=INTERLEAVED_1F1B"};
  std::vector<std::string> fits = interleaved;
  fits.push_back("run.grad_accum_steps=4");
  EXPECT_EQ(Error(kBase, fits), "OK");
  std::vector<std::string> odd = interleaved;
  odd.insert(odd.end(), {"run.grad_accum_steps=6", "run.parallel.data=2"});
  EXPECT_EQ(Error(kBase, odd),
            "tiny.textproto: run.parallel.schedule=INTERLEAVED_1F1B needs each pipeline's micro-batches "
            "(run.grad_accum_steps=6 / run.parallel.data=2 = 3) to be a multiple of run.parallel.pipeline=2");
  EXPECT_EQ(Error(kBase, {"model.n_layers=4", "run.parallel.pipeline=2", "run.parallel.virtual_stages=2"}),
            "tiny.textproto: run.parallel.virtual_stages=2 needs run.parallel.schedule=INTERLEAVED_1F1B "
            "(run.parallel.schedule=ONE_F_ONE_B runs one chunk of layers per process)");
  EXPECT_EQ(Error(kBase, {"run.parallel.pipeline=2", "run.parallel.virtual_stages=2",
                          "run.parallel.schedule=INTERLEAVED_1F1B", "run.grad_accum_steps=2"}),
            "tiny.textproto: run.parallel.pipeline=2 x run.parallel.virtual_stages=2 stages exceed "
            "model.n_layers=2 (each stage needs a layer)");
}

TEST(ConfigSizes, TokensPerStepAndTotalSteps) {
  auto loaded = LoadExperimentText(Without("max_steps"), "tiny.textproto",
                                   {"run.max_tokens=1000", "run.grad_accum_steps=2"});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(TokensPerStep(*loaded), 4 * 2 * 32);
  EXPECT_EQ(TotalSteps(*loaded), 1000 / 256);
}

// A layer_pattern entry's moe: model.moe's required fields at the entry's path, reported once (not again
// by the model's rule on the converted 0), and not beside the entry's ffn.
TEST(ConfigValidation, LayerPatternMixtureOfExperts) {
  const std::string error =
      Error(WithModelFields("layer_pattern { ffn { d_ff: 64 } moe { top_k: 2 d_expert: 16 first_k_dense: 1 } }"));
  for (const char* expected : {"model.layer_pattern[0] sets both ffn and moe",
                               "model.layer_pattern[0].moe.n_experts is required (a positive integer)",
                               "model.layer_pattern[0].moe.first_k_dense=1 applies to model.moe only"}) {
    EXPECT_TRUE(absl::StrContains(error, expected)) << error << "\nlacks: " << expected;
  }
  EXPECT_FALSE(absl::StrContains(error, "n_experts=0")) << error;
  EXPECT_EQ(Error(WithModelFields("layer_pattern { } layer_pattern { moe { n_experts: 4 top_k: 2 d_expert: 16 } }")),
            "OK");
}

// A pipeline takes a mixture of experts, as model.moe and as a layer_pattern entry's moe, with expert
// parallelism too, and with ZeRO-1 then (experiments/trainer/pipeline_test).
TEST(ConfigValidation, PipelineTakesMixturesOfExperts) {
  std::string moe = kBase;
  moe.replace(moe.find("ffn { kind: SWIGLU d_ff: 128 }"), 30, "moe { n_experts: 4 top_k: 2 d_expert: 32 }");
  EXPECT_EQ(Error(moe, {"run.parallel.pipeline=2", "run.grad_accum_steps=2"}), "OK");
  EXPECT_EQ(Error(WithModelFields("layer_pattern { } layer_pattern { moe { n_experts: 4 top_k: 2 d_expert: 16 } }"),
                  {"run.parallel.pipeline=2", "run.grad_accum_steps=2"}),
            "OK");
  EXPECT_EQ(Error(moe, {"run.parallel.pipeline=2", "run.parallel.expert=2", "run.grad_accum_steps=4"}), "OK");
  EXPECT_EQ(Error(moe, {"run.parallel.pipeline=2", "run.parallel.expert=2", "run.grad_accum_steps=4",
                        "run.parallel.zero_stage=1"}),
            "OK");
  const std::string zero2 = Error(moe, {"run.parallel.pipeline=2", "run.parallel.expert=2", "run.grad_accum_steps=4",
                                        "run.parallel.zero_stage=2"});
  EXPECT_TRUE(absl::StrContains(zero2, "run.parallel.zero_stage=2 must be 0 (off) or 1")) << zero2;
  // On GPUs too (experiments/trainer/data_parallel_cuda_test).
  EXPECT_EQ(Error(moe, {"run.parallel.pipeline=2", "run.grad_accum_steps=2", "run.device=CUDA"}), "OK");
  EXPECT_EQ(Error(moe, {"run.parallel.pipeline=2", "run.parallel.expert=2", "run.grad_accum_steps=4",
                        "run.device=CUDA", "run.parallel.zero_stage=1"}),
            "OK");
}

// run.parallel.expert: a mixture of experts whose experts divide over the processes, micro-batches and
// validation batches that divide over data * expert, CPU; ZeRO-1 is allowed (its shards:
// experiments/trainer/run_parallelism.h).
TEST(ConfigValidation, ExpertParallelism) {
  std::string moe = kBase;
  moe.replace(moe.find("ffn { kind: SWIGLU d_ff: 128 }"), 30, "moe { n_experts: 6 top_k: 2 d_expert: 32 }");
  EXPECT_EQ(Error(moe, {"run.parallel.expert=2", "run.grad_accum_steps=2"}), "OK");
  const std::string dense = Error(kBase, {"run.parallel.expert=2", "run.grad_accum_steps=2"});
  EXPECT_TRUE(absl::StrContains(dense, "run.parallel.expert=2 needs a mixture of experts (model.moe)")) << dense;
  // Each message's own rules first (the cross-message ones run on messages that passed theirs).
  const std::string run = Error(moe, {"run.parallel.expert=4", "run.parallel.zero_stage=2"});
  for (const char* expected :
       {"run.grad_accum_steps=1 must be a multiple of run.parallel.data=1 * run.parallel.expert=4",
        "run.parallel.zero_stage=2 must be 0 (off) or 1"}) {
    EXPECT_TRUE(absl::StrContains(run, expected)) << run << "\nlacks: " << expected;
  }
  EXPECT_EQ(Error(moe, {"run.parallel.expert=2", "run.grad_accum_steps=2", "run.parallel.zero_stage=1"}), "OK");
  // On GPUs: data x expert over NCCL, but not ZeRO-1.
  EXPECT_EQ(Error(moe, {"run.parallel.expert=2", "run.parallel.data=2", "run.grad_accum_steps=4", "run.device=CUDA",
                        "run.eval_tokens=512"}),
            "OK");
  EXPECT_EQ(Error(moe, {"run.parallel.expert=2", "run.parallel.data=2", "run.grad_accum_steps=4", "run.device=CUDA",
                        "run.parallel.zero_stage=1", "run.eval_tokens=512"}),
            "OK");
  const std::string across = Error(moe, {"run.parallel.expert=4", "run.grad_accum_steps=4"});
  for (const char* expected :
       {"model.moe.n_experts=6 must be a multiple of run.parallel.expert=4",
        "run.eval_tokens=256 gives 2 validation batches of 128 tokens, not a multiple of the run.parallel.data * "
        "run.parallel.expert=4 processes"}) {
    EXPECT_TRUE(absl::StrContains(across, expected)) << across << "\nlacks: " << expected;
  }
  EXPECT_TRUE(absl::StrContains(ErrorWith("run.parallel.expert=0"), "run.parallel.expert=0 must be 1 to 256"));
}

}  // namespace
}  // namespace lmf::config
