// The maximal update parametrization (model.init.scheme MUP; InitScheme::kMup with the optimizer's
// per-parameter learning-rate scales): at its base width it is GPT2's init and plain AdamW, bit for bit; at
// m times the width each group has the init std and learning rate of Tensor Programs V's Table 3; and the
// coordinate check, muP's defining property, holds where the standard parametrization fails it: after a
// few AdamW steps at one learning rate, the logits move by about as much at every width under muP, and by
// more and more with width under GPT2's init.
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "experiments/trainer/optimizer.h"
#include "gtest/gtest.h"
#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/language_model/language_model.h"

namespace lmf::experiments {
namespace {

constexpr int64_t kVocab = 97, kContext = 16, kBatch = 4;

// Llama-like blocks of head size 16 and d_ff = 4 * d_model, width `d_model`, 2 layers.
model::ModelConfig Config(int64_t d_model, model::InitScheme init, int64_t base_d_model) {
  model::ModelConfig c = model::Cs336Config(kVocab, kContext, d_model, 2, d_model / 16, 4 * d_model);
  c.init = init;
  c.init_std = 0.02;
  c.mup_base_d_model = base_d_model;
  return c;
}

std::unique_ptr<model::LanguageModel> Make(const model::ModelConfig& config, uint64_t seed) {
  auto m = model::LanguageModel::Create(config, kernels::Context::Cpu());
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  (*m)->InitializeParameters(seed);
  return *std::move(m);
}

config::OptimizerConfig Adam(double lr) {
  config::OptimizerConfig c;
  c.set_lr(lr);
  c.mutable_adamw()->set_beta1(0.9);
  c.mutable_adamw()->set_beta2(0.95);
  c.mutable_adamw()->set_eps(1e-8);
  c.mutable_adamw()->set_weight_decay(0);
  c.set_grad_clip(0);
  return c;
}

std::vector<int32_t> RandomIds(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % kVocab);
  return ids;
}

std::map<std::string, std::vector<float>> Weights(const model::LanguageModel& model) {
  std::map<std::string, std::vector<float>> out;
  model.VisitParameters([&](const std::string& name, const model::Parameter& p) {
    out[name] = std::vector<float>(p.data(), p.data() + p.value.numel());
  });
  return out;
}

// Steps of AdamW on a fixed batch (ids and targets from their own streams).
void Train(model::LanguageModel& model, ModelOptimizer& optimizer, double lr, int steps) {
  const std::vector<int32_t> ids = RandomIds(kBatch * kContext, 1), targets = RandomIds(kBatch * kContext, 2);
  for (int s = 0; s < steps; ++s) {
    ASSERT_TRUE(model.ForwardWithLoss(ids.data(), targets.data(), kBatch, kContext).ok());
    model.ZeroGrad();
    model.Backward();
    optimizer.Step(model, lr);
  }
}

TEST(Mup, AtTheBaseWidthItIsGpt2AndPlainAdamW) {
  auto mup = Make(Config(64, model::InitScheme::kMup, 64), 5);
  auto gpt2 = Make(Config(64, model::InitScheme::kGpt2Scaled, 0), 5);
  ASSERT_NE(mup, nullptr);
  ASSERT_NE(gpt2, nullptr);
  EXPECT_EQ(Weights(*mup), Weights(*gpt2));
  ModelOptimizer a(Adam(1e-3), *mup), b(Adam(1e-3), *gpt2);
  Train(*mup, a, 1e-3, 3);
  Train(*gpt2, b, 1e-3, 3);
  EXPECT_EQ(Weights(*mup), Weights(*gpt2));  // bit for bit
}

// Width 256 over a base of 64 (m = 4): sample stds of the groups against sigma, sigma / sqrt(m) (and the
// residual projections' extra 1 / sqrt(2 L)), sigma / m; the learning-rate scales 1, 1 / m, 1 / m. Each
// tensor has at least 97 * 256 = 24,832 samples, so a sample std is within 1% of the true one (relative
// standard error 1 / sqrt(2 n) < 0.5%; 3% leaves room and still tells 1 / sqrt(m) = 0.5 from 1).
TEST(Mup, GroupsHaveTheirInitStdAndLearningRateScale) {
  const model::ModelConfig config = Config(256, model::InitScheme::kMup, 64);
  auto model = Make(config, 7);
  ASSERT_NE(model, nullptr);
  const double sigma = 0.02, m = 4, residual = 1 / std::sqrt(2.0 * config.n_layers);
  int checked = 0;
  model->VisitParameters([&](const std::string& name, const model::Parameter& p) {
    if (p.value.rank() != 2) {
      EXPECT_EQ(model->LearningRateScale(name, p), 1.0) << name;
      return;
    }
    double want_std = sigma / std::sqrt(m), want_scale = 1 / m;
    if (name.find("embeddings") != std::string::npos) want_std = sigma, want_scale = 1;
    if (name == "lm_head.weight") want_std = sigma / m;
    if (name.find("output_proj") != std::string::npos || name.find("ffn.w2") != std::string::npos) {
      want_std *= residual;
    }
    double sum = 0, sum_sq = 0;
    const int64_t n = p.value.numel();
    for (int64_t i = 0; i < n; ++i) sum += p.data()[i], sum_sq += static_cast<double>(p.data()[i]) * p.data()[i];
    const double std = std::sqrt(sum_sq / n - (sum / n) * (sum / n));
    EXPECT_NEAR(std / want_std, 1.0, 0.03) << name;
    EXPECT_EQ(model->LearningRateScale(name, p), want_scale) << name;
    ++checked;
  });
  EXPECT_EQ(checked, 1 + 2 * 7 + 1);  // token embeddings, q k v o w1 w2 w3 per layer, LM head
}

// The first AdamW step from zero moments moves every weight by lr * g / (|g| + eps): at most the group's
// learning rate, and by nearly all of it where |g| >> eps. So the largest move in each tensor is its
// learning rate: lr / 4 for the blocks' matrices and the LM head at m = 4, lr for the embeddings.
TEST(Mup, TheOptimizerStepsEachGroupAtItsLearningRate) {
  auto model = Make(Config(256, model::InitScheme::kMup, 64), 9);
  ASSERT_NE(model, nullptr);
  const double lr = 1e-3;
  const auto before = Weights(*model);
  ModelOptimizer optimizer(Adam(lr), *model);
  Train(*model, optimizer, lr, 1);
  const auto after = Weights(*model);
  model->VisitParameters([&](const std::string& name, const model::Parameter& p) {
    double largest = 0;
    for (size_t i = 0; i < before.at(name).size(); ++i) {
      largest = std::max(largest, std::fabs(static_cast<double>(after.at(name)[i]) - before.at(name)[i]));
    }
    const double group_lr = lr * model->LearningRateScale(name, p);
    EXPECT_LE(largest, group_lr * (1 + 1e-3)) << name;  // fp32 rounding of w - lr * u
    EXPECT_GE(largest, group_lr * 0.99) << name;
  });
}

// The coordinate check (Tensor Programs V, section 7; the mup package's coord_check): widths 64, 128, 256,
// 512 at one learning rate (1e-2, tuned for none of them), 8 AdamW steps on one batch; the RMS change of the
// logits on that batch. Under muP it stays within a factor 1.5 across the 8x range of widths (measured:
// 0.88-1.00x of width 64's); under GPT2's init the output layer's update grows with its fan-in, and the
// logit change with it (measured: 1.9x, 3.5x, 3.2x at 128, 256, 512). Without muP's learning-rate scales
// (its init alone) the check fails too: 1.8x, 3.0x, 6.8x.
double LogitChange(const model::ModelConfig& config) {
  auto model = Make(config, 11);
  if (model == nullptr) return NAN;
  const std::vector<int32_t> ids = RandomIds(kBatch * kContext, 1);
  EXPECT_TRUE(model->Forward(ids.data(), kBatch, kContext).ok());
  const int64_t n = kBatch * kContext * config.vocab_rows();
  const std::vector<float> before(model->logits(), model->logits() + n);
  ModelOptimizer optimizer(Adam(1e-2), *model);
  Train(*model, optimizer, 1e-2, 8);
  EXPECT_TRUE(model->Forward(ids.data(), kBatch, kContext).ok());
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(model->logits()[i]) - before[i];
    sum_sq += d * d;
  }
  return std::sqrt(sum_sq / static_cast<double>(n));
}

TEST(Mup, CoordinateCheck) {
  std::vector<double> mup, sp;
  for (int64_t width : {64, 128, 256, 512}) {
    mup.push_back(LogitChange(Config(width, model::InitScheme::kMup, 64)));
    sp.push_back(LogitChange(Config(width, model::InitScheme::kGpt2Scaled, 0)));
    std::printf("width %3d: RMS logit change muP %.4f, GPT2 %.4f\n", static_cast<int>(width), mup.back(),
                sp.back());
  }
  for (size_t i = 1; i < mup.size(); ++i) {
    EXPECT_LT(mup[i] / mup[0], 1.5) << i;
    EXPECT_GT(mup[i] / mup[0], 1 / 1.5) << i;
  }
  EXPECT_GT(sp.back() / sp.front(), 2.0);
}

}  // namespace
}  // namespace lmf::experiments
