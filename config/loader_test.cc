// Config loading: parse errors at file:line:column, --set overrides (every scalar kind, enums, oneofs,
// errors), default resolution, and the resolved config round-tripping through its text form.
#include "config/loader.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/damaged_copies.h"
#include "base/file.h"
#include "config/overrides.h"
#include "gtest/gtest.h"

namespace lmf::config {
namespace {

constexpr char kValid[] = R"pb(model {
  d_model: 64
  n_layers: 2
  n_heads: 4
  vocab_size: 512
  context_length: 32
  ffn { d_ff: 128 }
}
optimizer { lr: 1e-3 }
data { train_tokens: "train.tok" }
run { batch_size: 4 max_steps: 10 output_dir: "out" }
)pb";

std::string Error(const std::string& text, std::vector<std::string> overrides = {}) {
  auto loaded = LoadExperimentText(text, "tiny.textproto", overrides);
  return loaded.ok() ? "OK" : std::string(loaded.status().message());
}

// Positions are what protobuf's parser reports, 1-based: the column just past the offending token.
TEST(ConfigLoader, UnknownFieldReportsFileLineColumn) {
  std::string text = kValid;
  text.replace(text.find("n_layers"), 8, "n_layer");
  EXPECT_EQ(Error(text),
            "tiny.textproto:3:10: Message type \"lmf.config.ModelConfig\" has no field named \"n_layer\".");
}

TEST(ConfigLoader, BadValueReportsFileLineColumn) {
  EXPECT_EQ(Error("run {\n  batch_size: many\n}\n"),
            "tiny.textproto:2:15: Expected integer, got: many");
  EXPECT_EQ(Error("run { device: TPU }"),
            "tiny.textproto:1:19: Unknown enumeration value of \"TPU\" for field \"device\".");
}

TEST(ConfigLoader, MissingFileNamesThePath) {
  auto loaded = LoadExperiment("/nonexistent/x.textproto", {});
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(std::string(loaded.status().message()).find("/nonexistent/x.textproto"), std::string::npos);
}

TEST(ConfigOverrides, SetsEveryScalarKind) {
  auto loaded = LoadExperimentText(kValid, "tiny.textproto",
                                   {"optimizer.lr=3e-4", "model.n_layers=3", "run.seed=7", "model.bias=true",
                                    "data.val_tokens=v.tok", "run.eval_tokens=128", "model.norm.eps=1e-6",
                                    "model.norm.kind=LAYERNORM", "run.max_tokens=4096"});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_DOUBLE_EQ(loaded->optimizer().lr(), 3e-4);
  EXPECT_EQ(loaded->model().n_layers(), 3);
  EXPECT_EQ(loaded->run().seed(), 7u);
  EXPECT_TRUE(loaded->model().bias());
  EXPECT_EQ(loaded->data().val_tokens(), "v.tok");
  EXPECT_FLOAT_EQ(loaded->model().norm().eps(), 1e-6f);
  EXPECT_EQ(loaded->model().norm().kind(), config::NormConfig::LAYERNORM);
  // Setting the other member of the `length` oneof replaces max_steps.
  EXPECT_FALSE(loaded->run().has_max_steps());
  EXPECT_EQ(loaded->run().max_tokens(), 4096);
}

TEST(ConfigOverrides, LaterOverridesWin) {
  auto loaded = LoadExperimentText(kValid, "tiny.textproto", {"optimizer.lr=1", "optimizer.lr=2"});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_DOUBLE_EQ(loaded->optimizer().lr(), 2);
}

TEST(ConfigOverrides, AListReplacesARepeatedFieldOfNumbers) {
  auto loaded =
      LoadExperimentText(kValid, "tiny.textproto", {"run.checkpoint_steps=9", "run.checkpoint_steps=2,5"});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(
      std::vector<int64_t>(loaded->run().checkpoint_steps().begin(), loaded->run().checkpoint_steps().end()),
      (std::vector<int64_t>{2, 5}));
  loaded =
      LoadExperimentText(kValid, "tiny.textproto", {"run.checkpoint_steps=2,5", "run.checkpoint_steps="});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->run().checkpoint_steps_size(), 0);
  EXPECT_EQ(Error(kValid, {"run.checkpoint_steps=2,x"}),
            "--set=run.checkpoint_steps=2,x: run.checkpoint_steps expects an integer, got \"x\"");
  EXPECT_EQ(Error(kValid, {"run.checkpoint_steps=2,11"}),
            "tiny.textproto: run.checkpoint_steps[1]=11 must be a step of the run, 1 to 10");
  EXPECT_EQ(Error(kValid, {"run.checkpoint_steps=0"}),
            "tiny.textproto: run.checkpoint_steps[0]=0 must be a step of the run, 1 to 10");
  EXPECT_EQ(Error(kValid, {"run.eval_steps=3"}),
            "tiny.textproto: run.eval_steps needs run.eval_tokens (how many validation tokens an evaluation "
            "reads)");
  EXPECT_EQ(Error(kValid, {"run.eval_steps=3,12", "data.val_tokens=v.tok", "run.eval_tokens=128"}),
            "tiny.textproto: run.eval_steps[1]=12 must be a step of the run, 1 to 10");
  EXPECT_EQ(
      Error(kValid, {"run.checkpoint_steps.x=4"}),
      "--set=run.checkpoint_steps.x=4: run.checkpoint_steps is a list, not a message, so it has no field "
      "\"x\"");
  EXPECT_EQ(
      Error(kValid, {"data.train_mixture.path=a.tok"}),
      "--set=data.train_mixture.path=a.tok: data.train_mixture is a repeated field of messages or strings; "
      "--set takes single fields and lists of numbers, booleans or enums (edit the config file for this "
      "one)");
}

TEST(ConfigOverrides, ErrorsNameTheAssignment) {
  EXPECT_EQ(Error(kValid, {"optimizer.lr"}), "--set=optimizer.lr: expected --set=field.path=value");
  EXPECT_EQ(Error(kValid, {"optimizer.lrr=3e-4"}), "--set=optimizer.lrr=3e-4: optimizer has no field \"lrr\"");
  EXPECT_EQ(Error(kValid, {"modle.d_model=3"}), "--set=modle.d_model=3: Experiment has no field \"modle\"");
  EXPECT_EQ(Error(kValid, {"optimizer.lr=abc"}), "--set=optimizer.lr=abc: optimizer.lr expects a finite number, got \"abc\"");
  EXPECT_EQ(Error(kValid, {"optimizer.lr=inf"}), "--set=optimizer.lr=inf: optimizer.lr expects a finite number, got \"inf\"");
  EXPECT_EQ(Error(kValid, {"model.n_layers=2.5"}),
            "--set=model.n_layers=2.5: model.n_layers expects a 32-bit integer, got \"2.5\"");
  EXPECT_EQ(Error(kValid, {"run.seed=-1"}), "--set=run.seed=-1: run.seed expects a non-negative integer, got \"-1\"");
  EXPECT_EQ(Error(kValid, {"model.bias=yes please"}),
            "--set=model.bias=yes please: model.bias expects true or false, got \"yes please\"");
  EXPECT_EQ(Error(kValid, {"run.device=TPU"}), "--set=run.device=TPU: run.device expects one of CPU, CUDA, got \"TPU\"");
  EXPECT_EQ(Error(kValid, {"run.device=DEVICE_UNSPECIFIED"}),
            "--set=run.device=DEVICE_UNSPECIFIED: run.device expects one of CPU, CUDA, got \"DEVICE_UNSPECIFIED\"");
  // A real value 0 (not an *_UNSPECIFIED one) can be set: the default schedule, explicitly.
  EXPECT_EQ(Error(kValid, {"run.parallel.schedule=ONE_F_ONE_B"}), "OK");
  EXPECT_EQ(Error(kValid, {"run.parallel.schedule=ZB"}),
            "--set=run.parallel.schedule=ZB: run.parallel.schedule expects one of ONE_F_ONE_B, GPIPE, "
            "INTERLEAVED_1F1B, ZB_H1, got \"ZB\"");
  EXPECT_EQ(Error(kValid, {"model.norm=1"}),
            "--set=model.norm=1: model.norm is a message; --set takes one of its fields (model.norm.<field>=value)");
  EXPECT_EQ(Error(kValid, {"optimizer.lr.x=1"}),
            "--set=optimizer.lr.x=1: optimizer.lr is not a message, so it has no field \"x\"");
}

TEST(ConfigOverrides, ResultIsValidatedLikeTheFile) {
  EXPECT_EQ(Error(kValid, {"model.n_heads=12", "model.d_model=1000"}),
            "tiny.textproto: model.n_heads=12 does not divide model.d_model=1000");
}

// Every truncation and 300 seeded edits of each of a set of valid --set assignments (each kind of field):
// an error that names the assignment (or the file, where the result fails validation), or a config.
TEST(ConfigOverrides, DamagedAssignmentsGiveErrorsNamingThem) {
  for (const char* valid :
       {"optimizer.lr=3e-4", "model.n_layers=3", "run.seed=7", "model.bias=true", "data.val_tokens=v.tok",
        "model.norm.kind=LAYERNORM", "run.checkpoint_steps=2,5", "schedule.kind=WSD", "model.ffn.d_ff=256"}) {
    int errors = 0;
    for (const std::string& bad : DamagedCopies(valid, /*seed=*/43, /*edits=*/300)) {
      absl::StatusOr<config::Experiment> r = LoadExperimentText(kValid, "tiny.textproto", {bad});
      if (r.ok()) continue;
      ++errors;
      const absl::string_view message = r.status().message();
      EXPECT_TRUE(absl::StartsWith(message, absl::StrCat("--set=", bad, ": ")) ||
                  absl::StartsWith(message, "tiny.textproto: "))
          << r.status() << "\n"
          << Escaped(bad);
    }
    EXPECT_GT(errors, 100) << valid;
  }
}

TEST(ConfigResolve, FillsDefaultsAndDefaultOneofMembers) {
  auto loaded = LoadExperimentText(kValid, "tiny.textproto", {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->model().norm().has_kind());
  EXPECT_TRUE(loaded->model().norm().has_eps());
  EXPECT_TRUE(loaded->model().ffn().has_kind());
  EXPECT_EQ(loaded->model().n_kv_heads(), 4);
  EXPECT_TRUE(loaded->model().attention().has_causal());
  EXPECT_TRUE(loaded->optimizer().has_adamw());
  EXPECT_TRUE(loaded->optimizer().adamw().has_beta2());
  EXPECT_TRUE(loaded->schedule().has_kind());
  EXPECT_TRUE(loaded->run().has_seed());
  EXPECT_TRUE(loaded->logging().has_log_interval());
  EXPECT_FALSE(loaded->data().has_val_tokens());  // no [default]: stays absent
  EXPECT_FALSE(loaded->run().has_max_tokens());   // the other oneof member stays absent
}

TEST(ConfigResolve, ResolvedTextRoundTrips) {
  auto loaded = LoadExperimentText(kValid, "tiny.textproto", {"optimizer.lr=3e-4"});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const std::string text = ExperimentToText(*loaded);
  auto again = LoadExperimentText(text, "resolved.textproto", {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ExperimentToText(*again), text);
  EXPECT_NE(text.find("lr: 0.0003"), std::string::npos) << text;
}

TEST(ConfigResolve, WritesResolvedConfigFile) {
  auto loaded = LoadExperimentText(kValid, "tiny.textproto", {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/resolved.textproto";
  ASSERT_TRUE(WriteExperiment(*loaded, path).ok());
  auto back = LoadExperiment(path, {});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ExperimentToText(*back), ExperimentToText(*loaded));
}

TEST(ConfigPaths, RelativePathsJoinTheBaseFolder) {
  auto loaded = LoadExperimentText(kValid, "tiny.textproto", {"data.tokenizer=/abs/tok.json"});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  MakePathsAbsolute("/home/me", &*loaded);
  EXPECT_EQ(loaded->data().train_tokens(), "/home/me/train.tok");
  EXPECT_EQ(loaded->data().tokenizer(), "/abs/tok.json");
  EXPECT_EQ(loaded->run().output_dir(), "/home/me/out");
}

// Every truncation and 3000 seeded edits of a config: an error that names the file, or a config that
// passed validation. Never a crash (or, under --config=asan, a bad read).
TEST(ConfigLoader, DamagedConfigsGiveErrorsNamingTheFile) {
  int errors = 0;
  for (const std::string& bad : DamagedCopies(kValid, /*seed=*/37, /*edits=*/3000)) {
    absl::StatusOr<config::Experiment> r = LoadExperimentText(bad, "tiny.textproto", {});
    if (r.ok()) continue;
    ++errors;
    EXPECT_TRUE(absl::StartsWith(r.status().message(), "tiny.textproto")) << r.status() << "\n"
                                                                          << Escaped(bad);
  }
  EXPECT_GT(errors, 1000);
}

}  // namespace
}  // namespace lmf::config
