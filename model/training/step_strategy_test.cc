// The single-process step on a small mixture-of-experts model: the loss falls over a few dozen steps, the
// step reports the layers' auxiliary losses, and each step ends with the expert-bias update (EndStep), whose
// counts it then clears.
#include "model/training/step_strategy.h"

#include <cmath>
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

}  // namespace
}  // namespace lmf::model
