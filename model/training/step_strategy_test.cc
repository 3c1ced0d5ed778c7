// The single-process step on a small mixture-of-experts model: the loss falls over a few dozen steps, the
// step reports the layers' auxiliary losses, and each step ends with the expert-bias update (EndStep), whose
// counts it then clears.
#include "model/training/step_strategy.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/core/context.h"

namespace lmf::model {
namespace {

// Sequences of a fixed rule (next = 5 * id + 3 mod V) from varied starts: learnable in a few dozen steps.
class PatternSource final : public MicroBatchSource {
 public:
  PatternSource(int64_t b, int64_t t, int64_t v) : b_(b), t_(t), v_(v) {}
  absl::Status Next(int32_t* ids, int32_t* targets) override {
    for (int64_t s = 0; s < b_; ++s) {
      int32_t id = static_cast<int32_t>((next_start_++ * 7) % v_);
      for (int64_t i = 0; i < t_; ++i) {
        ids[s * t_ + i] = id;
        id = static_cast<int32_t>((5 * id + 3) % v_);
        targets[s * t_ + i] = id;
      }
    }
    return absl::OkStatus();
  }
  void Skip() override { next_start_ += b_; }

 private:
  int64_t b_, t_, v_, next_start_ = 0;
};

ModelConfig TinyMoe() {
  ModelConfig c = Cs336Config(/*vocab=*/32, /*context=*/16, /*d_model=*/32, /*layers=*/2, /*heads=*/4, /*d_ff=*/64);
  MoeSpec moe;
  moe.n_experts = 4, moe.top_k = 2, moe.d_expert = 32, moe.shared_d_ff = 16;
  moe.aux_loss = 0.01, moe.router_z_loss = 0.001, moe.expert_bias = true, moe.bias_update_rate = 1e-3;
  c.moe = moe;
  c.first_k_dense = 1;
  return c;
}

// A model of `config` with its optimizer, data and the single-process step at `lr`: 2 micro-batches of
// 4 x 16 tokens per step.
struct Training {
  Training(const ModelConfig& config, double lr) : data(4, 16, 32) {
    auto created = LanguageModel::Create(config, kernels::Context::Cpu());
    EXPECT_TRUE(created.ok()) << created.status();
    model = *std::move(created);
    model->InitializeParameters(3);
    optimizer = std::make_unique<AdamW>(AdamWConfig{}, *model);
    input.micro_batches = 2, input.b = 4, input.t = 16, input.lr = lr;
  }
  absl::StatusOr<StepResult> Step() { return strategy.Step(*model, *optimizer, data, input); }

  std::unique_ptr<LanguageModel> model;
  std::unique_ptr<AdamW> optimizer;
  PatternSource data;
  SingleProcessStep strategy;
  StepInput input;
};

TEST(SingleProcessStep, TrainsAMixtureOfExpertsAndEndsEachStep) {
  Training training(TinyMoe(), 1e-2);
  LanguageModel* model = training.model.get();
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    absl::StatusOr<StepResult> result = training.Step();
    ASSERT_TRUE(result.ok()) << result.status();
    if (step == 0) first = result->loss;
    last = result->loss;
    // Balancing loss about aux_loss (E * sum f P is 1 when balanced) plus the z-loss term.
    EXPECT_GT(result->aux_loss, 0.005) << step;
    EXPECT_LT(result->aux_loss, 0.1) << step;
    // Dropless: nothing dropped; the busiest expert's load is at least the mean and at most all assignments.
    EXPECT_EQ(result->dropped_share, 0) << step;
    EXPECT_GE(result->expert_load_max_over_mean, 1.0) << step;
    EXPECT_LE(result->expert_load_max_over_mean, 4.0 / 2.0) << step;
    model->VisitStepCounts([&](const std::string& name, const kernels::Tensor& counts) {
      for (int64_t i = 0; i < counts.numel(); ++i) ASSERT_EQ(counts.data<float>()[i], 0.0f) << name << " not cleared";
    });
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
  int buffers = 0;
  double moved = 0;
  model->VisitBuffers([&](const std::string& name, const kernels::Tensor& bias) {
    EXPECT_EQ(name, "layers.1.ffn.router.expert_bias");
    for (int64_t i = 0; i < bias.numel(); ++i) moved += std::fabs(bias.data<float>()[i]);
    ++buffers;
  });
  EXPECT_EQ(buffers, 1);
  EXPECT_GT(moved, 0) << "40 steps of bias updates left every bias at 0";
}

// With a capacity of half the balanced load, at least half the assignments are dropped, and the step says so.
TEST(SingleProcessStep, ReportsTheDroppedShare) {
  ModelConfig config = TinyMoe();
  config.moe->capacity_factor = 0.5;
  Training training(config, 1e-3);
  absl::StatusOr<StepResult> result = training.Step();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GE(result->dropped_share, 0.5);
  EXPECT_LT(result->dropped_share, 1.0);
}

// Independent random sequences whose next token follows a rule 3 times in 4, else is uniform: gradients with
// a signal (|G| > 0) and noise (tr(Sigma) > 0).
class NoisyRuleSource final : public MicroBatchSource {
 public:
  NoisyRuleSource(int64_t b, int64_t t, int64_t v, uint64_t seed) : b_(b), t_(t), v_(v), rng_(seed) {}
  absl::Status Next(int32_t* ids, int32_t* targets) override {
    for (int64_t i = 0; i < b_ * t_; ++i) {
      ids[i] = static_cast<int32_t>(rng_() % v_);
      targets[i] = rng_() % 4 != 0 ? static_cast<int32_t>((5 * ids[i] + 3) % v_) : static_cast<int32_t>(rng_() % v_);
    }
    return absl::OkStatus();
  }
  void Skip() override {}

 private:
  int64_t b_, t_, v_;
  std::mt19937_64 rng_;
};

// The gradient noise scale from the step's two batch sizes (StepResult::noise_trace / noise_grad_sq, means
// over 400 steps at fixed weights: lr 0) against a direct estimate at the same weights from 2,000
// independent micro-batch gradients g_i: tr(Sigma) = B_small * (sample variance of g_i summed over
// coordinates), |G|^2 = |mean g_i|^2 less its own bias tr(Sigma) / (B_small n). Both estimate the same
// B_simple; the step estimator's mean over 400 steps has a relative standard error of a few percent here
// (its per-step spread is printed), so 15% is several standard errors.
TEST(GradientNoiseScale, TwoBatchEstimateMatchesADirectOne) {
  const ModelConfig c = Cs336Config(/*vocab=*/32, /*context=*/16, /*d_model=*/32, /*layers=*/2, /*heads=*/4, 64);
  auto created = LanguageModel::Create(c, kernels::Context::Cpu());
  ASSERT_TRUE(created.ok()) << created.status();
  LanguageModel& model = **created;
  model.InitializeParameters(3);
  const int64_t b = 2, t = 16, small = b * t;
  // Direct: many independent micro-batch gradients at these weights.
  NoisyRuleSource direct_data(b, t, c.vocab_size, 1);
  std::vector<double> sum, sum_sq;
  const int n = 2000;
  std::vector<int32_t> ids(small), targets(small);
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(direct_data.Next(ids.data(), targets.data()).ok());
    model.ZeroGrad();
    ASSERT_TRUE(model.ForwardWithLoss(ids.data(), targets.data(), b, t).ok());
    model.Backward();
    size_t k = 0;
    model.VisitParameters([&](const std::string&, const Parameter& p) {
      for (int64_t j = 0; j < p.grad.numel(); ++j, ++k) {
        if (k == sum.size()) sum.push_back(0), sum_sq.push_back(0);
        const double g = p.grad_data()[j];
        sum[k] += g, sum_sq[k] += g * g;
      }
    });
  }
  double variance = 0, mean_sq = 0;  // summed over coordinates
  for (size_t k = 0; k < sum.size(); ++k) {
    const double mean = sum[k] / n;
    variance += (sum_sq[k] - n * mean * mean) / (n - 1);
    mean_sq += mean * mean;
  }
  const double trace = small * variance, grad_sq = mean_sq - variance / n;
  const double direct = trace / grad_sq;
  // The step's estimate, at the same weights (lr 0 leaves them as they are).
  AdamW optimizer(AdamWConfig{}, model);
  SingleProcessStep strategy;
  NoisyRuleSource step_data(b, t, c.vocab_size, 2);
  StepInput input;
  input.micro_batches = 4, input.b = b, input.t = t, input.lr = 0;
  double traces = 0, grads = 0, trace_sq = 0;
  const int steps = 400;
  for (int i = 0; i < steps; ++i) {
    absl::StatusOr<StepResult> r = strategy.Step(model, optimizer, step_data, input);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(std::isfinite(r->noise_trace) && std::isfinite(r->noise_grad_sq));
    traces += r->noise_trace, grads += r->noise_grad_sq, trace_sq += r->noise_trace * r->noise_trace;
  }
  const double estimate = traces / grads;
  const double trace_mean = traces / steps;
  const double trace_se = std::sqrt((trace_sq / steps - trace_mean * trace_mean) / steps) / trace_mean;
  std::printf("B_simple: two-batch estimate %.2f tokens (tr(Sigma) relative standard error %.3f), direct %.2f\n",
              estimate, trace_se, direct);
  EXPECT_GT(direct, 0);
  EXPECT_NEAR(estimate / direct, 1.0, 0.15);
  // One micro-batch per step: nothing to compare, so nothing is reported.
  input.micro_batches = 1;
  absl::StatusOr<StepResult> one = strategy.Step(model, optimizer, step_data, input);
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(std::isnan(one->noise_trace) && std::isnan(one->noise_grad_sq));
}

}  // namespace
}  // namespace lmf::model
