// metrics.jsonl lines (exact text, round trip), dropping a killed run's lines past the resumed
// checkpoint, and the console line and progress bar formats.
#include "experiments/metrics/metrics_log.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "base/damaged_copies.h"
#include "base/file.h"
#include "base/json.h"
#include "gtest/gtest.h"

namespace lmf::experiments {
namespace {

StepMetrics Sample(int64_t step) {
  StepMetrics m;
  m.step = step;
  m.tokens = step * 2048;
  m.loss = 3.25;
  m.lr = 3e-4;
  m.grad_norm = 0.8125;
  m.tokens_per_second = 45200;
  m.mfu = 0.123;
  m.wall_seconds = 83;
  return m;
}

TEST(MetricsJson, LineHasEveryFieldInOrder) {
  StepMetrics m = Sample(120);
  EXPECT_EQ(MetricsJsonLine(m),
            "{\"step\":120,\"tokens\":245760,\"loss\":3.25,\"val_loss\":null,\"lr\":0.0003,\"grad_norm\":0.8125,"
            "\"tokens_per_second\":45200,\"mfu\":0.123,\"wall_seconds\":83}\n");
  m.val_loss = 3.5;
  auto back = ParseMetricsJsonLine(MetricsJsonLine(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->step, 120);
  EXPECT_EQ(*back->val_loss, 3.5);
  EXPECT_EQ(back->lr, 3e-4);
  EXPECT_FALSE(back->z_loss.has_value());
}

// A validation loss that is not finite stays apart from "not evaluated" (null), and the line stays strict
// JSON: the string "nan", "inf" or "-inf", read back as the same value.
TEST(MetricsJson, NonFiniteValLossIsAStringNotNull) {
  StepMetrics m = Sample(9);
  for (const auto& [value, json] : std::vector<std::pair<double, std::string>>{
           {NAN, "\"nan\""}, {INFINITY, "\"inf\""}, {-INFINITY, "\"-inf\""}}) {
    m.val_loss = value;
    const std::string line = MetricsJsonLine(m);
    EXPECT_NE(line.find(",\"val_loss\":" + json + ","), std::string::npos) << line;
    EXPECT_TRUE(ParseJson(line).ok()) << line;
    auto back = ParseMetricsJsonLine(line);
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_TRUE(back->val_loss.has_value()) << line;
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(*back->val_loss));
    } else {
      EXPECT_EQ(*back->val_loss, value);
    }
  }
  m.val_loss.reset();
  auto not_evaluated = ParseMetricsJsonLine(MetricsJsonLine(m));
  ASSERT_TRUE(not_evaluated.ok());
  EXPECT_FALSE(not_evaluated->val_loss.has_value());
  // Any other string or kind is not a metrics line.
  std::string other = MetricsJsonLine(Sample(9));
  other.replace(other.find("null"), 4, "\"bad\"");
  EXPECT_FALSE(ParseMetricsJsonLine(other).ok()) << other;
}

TEST(MetricsJson, ZLossIsWrittenLastOnlyWhenSet) {
  StepMetrics m = Sample(7);
  m.z_loss = 0.0025;
  const std::string line = MetricsJsonLine(m);
  EXPECT_NE(line.find(",\"wall_seconds\":83,\"z_loss\":0.0025}\n"), std::string::npos) << line;
  auto back = ParseMetricsJsonLine(line);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->z_loss.has_value());
  EXPECT_EQ(*back->z_loss, 0.0025);
}

TEST(MetricsJson, MixtureOfExpertsMetricsRoundTripWhenSet) {
  StepMetrics m = Sample(7);
  m.aux_loss = 0.0125;
  m.expert_load_max_over_mean = 1.75;
  m.dropped_share = 0.25;
  const std::string line = MetricsJsonLine(m);
  EXPECT_NE(line.find(",\"aux_loss\":0.0125,\"expert_load_max_over_mean\":1.75,\"dropped_share\":0.25}\n"),
            std::string::npos)
      << line;
  auto back = ParseMetricsJsonLine(line);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->aux_loss, 0.0125);
  EXPECT_EQ(back->expert_load_max_over_mean, 1.75);
  EXPECT_EQ(back->dropped_share, 0.25);
  m = Sample(7);
  m.noise_trace = 12.5;
  m.noise_grad_sq = 0.25;
  back = ParseMetricsJsonLine(MetricsJsonLine(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->noise_trace, 12.5);
  EXPECT_EQ(back->noise_grad_sq, 0.25);
  m = Sample(7);
  m.expert_loads = {{"layers.1.ffn", {3, 0, 5}}, {"layers.2.ffn", {4, 4, 0}}};
  const std::string with_loads = MetricsJsonLine(m);
  EXPECT_NE(with_loads.find(",\"expert_loads\":{\"layers.1.ffn\":[3,0,5],\"layers.2.ffn\":[4,4,0]}}\n"),
            std::string::npos)
      << with_loads;
  back = ParseMetricsJsonLine(with_loads);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->expert_loads, m.expert_loads);
  EXPECT_FALSE(ParseMetricsJsonLine(absl::StrReplaceAll(with_loads, {{"[3,0,5]", "3"}})).ok())
      << "expert_loads must map layers to arrays of numbers";
  auto dense = ParseMetricsJsonLine(MetricsJsonLine(Sample(7)));
  ASSERT_TRUE(dense.ok());
  EXPECT_FALSE(dense->aux_loss.has_value() || dense->expert_load_max_over_mean.has_value() ||
               dense->dropped_share.has_value() || !dense->expert_loads.empty());
}

TEST(MetricsLog, ResumeDropsStepsAfterTheCheckpoint) {
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/metrics.jsonl";
  {
    auto log = MetricsLog::Open(path, std::nullopt);
    ASSERT_TRUE(log.ok());
    for (int64_t step = 1; step <= 5; ++step) ASSERT_TRUE(log->Append(Sample(step)).ok());
  }
  // A line torn by a kill.
  auto text = ReadFile(path);
  ASSERT_TRUE(WriteFileAtomically(path, *text + "{\"step\":6,\"tok").ok());
  {
    auto log = MetricsLog::Open(path, 3);
    ASSERT_TRUE(log.ok());
    ASSERT_TRUE(log->Append(Sample(4)).ok());
  }
  auto after = ReadFile(path);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, MetricsJsonLine(Sample(1)) + MetricsJsonLine(Sample(2)) + MetricsJsonLine(Sample(3)) +
                        MetricsJsonLine(Sample(4)));
}

TEST(MetricsLog, ReadMetricsLogReturnsEveryStepAndNamesTheFileOfABadLine) {
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/read.jsonl";
  ASSERT_TRUE(WriteFileAtomically(path, MetricsJsonLine(Sample(1)) + MetricsJsonLine(Sample(2))).ok());
  auto read = ReadMetricsLog(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[1].step, 2);
  EXPECT_EQ((*read)[1].tokens, 4096);

  ASSERT_TRUE(WriteFileAtomically(path, MetricsJsonLine(Sample(1)) + "{\"step\":2,\"tok\n").ok());
  read = ReadMetricsLog(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(read.status().message()).rfind(path + ": ", 0), 0u) << read.status();

  // An unterminated last line is one being written (or torn by a kill): left out, the rest read.
  ASSERT_TRUE(WriteFileAtomically(path, MetricsJsonLine(Sample(1)) + "{\"step\":2,\"tok").ok());
  read = ReadMetricsLog(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->size(), 1u);

  EXPECT_FALSE(ReadMetricsLog(path + ".missing").ok());
}

TEST(Console, StepLineShowsThroughputAndMfu) {
  EXPECT_EQ(FormatStepLine(Sample(120), 5000),
            "step  120/5000 | loss 3.2500 | lr 3.00e-04 | gnorm 0.812 | 45.2k tok/s | MFU 12.3% | 1m23s, eta 56m15s");
}

TEST(Console, ProgressBarFillsWithTheFraction) {
  EXPECT_EQ(FormatProgressBar(Sample(50), 100, 10),
            "[#####.....]  50% 50/100 | loss 3.2500 | lr 3.00e-04 | gnorm 0.812 | 45.2k tok/s | MFU 12.3% | 1m23s, "
            "eta 1m23s");
}

TEST(Console, Durations) {
  EXPECT_EQ(FormatDuration(12.4), "12s");
  EXPECT_EQ(FormatDuration(245), "4m05s");
  EXPECT_EQ(FormatDuration(3723), "1h02m03s");
}

// Every truncation and 3000 seeded edits of a metrics.jsonl: an error that names the file, or the steps
// (an unterminated last line left out). Never a crash (or, under --config=asan, a bad read).
TEST(MetricsJson, DamagedLogsGiveErrorsNamingTheFileOrSteps) {
  StepMetrics with_val = Sample(20);
  with_val.val_loss = 3.5;
  const std::string valid =
      MetricsJsonLine(Sample(10)) + MetricsJsonLine(with_val) + MetricsJsonLine(Sample(30));
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/damaged_metrics.jsonl";
  int errors = 0;
  for (const std::string& bad : DamagedCopies(valid, /*seed=*/31, /*edits=*/3000)) {
    ASSERT_TRUE(WriteFileAtomically(path, bad).ok());
    absl::StatusOr<std::vector<StepMetrics>> r = ReadMetricsLog(path);
    if (r.ok()) {
      EXPECT_LE(r->size(), 4u) << Escaped(bad);  // a repeated span can add a line
      continue;
    }
    ++errors;
    EXPECT_TRUE(absl::StrContains(r.status().message(), path)) << r.status() << "\n" << Escaped(bad);
  }
  EXPECT_GT(errors, 1000);
}

}  // namespace
}  // namespace lmf::experiments
