// Tests of AdamW + clipping on the model: three training steps of llama_tiny match torch.optim.AdamW with
// clip_grad_norm_ (fixture from tools/model/reference.py), steps that zero the gradients in AdamW's pass
// match steps that keep them bit for bit, and a bad config is rejected.
#include "model/optimizer/adamw.h"

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/testing/npz.h"
#include "model/testing/fixture.h"

namespace lmf::model {
namespace {

using testing::FixturePath;
using testing::ReadFixture;

TEST(AdamWTest, ThreeClippedStepsMatchTorch) {
  auto arrays = ReadFixture(FixturePath("adamw_llama_tiny"));
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  const auto& a = *arrays;
  // llama_tiny of tools/model/reference.py.
  ModelConfig config = Cs336Config(67, 16, 32, 2, 4, 88);
  config.n_kv_heads = 2;
  const kernels::Context ctx = kernels::Context::Cpu();
  auto model = LanguageModel::Create(config, ctx);
  ASSERT_TRUE(model.ok());
  (*model)->VisitParameters([&](const std::string& name, const Parameter& p) {
    const std::vector<float> v = a.at("param/" + name).ToFloat();
    ASSERT_EQ(static_cast<int64_t>(v.size()), p.value.numel()) << name;
    std::copy(v.begin(), v.end(), p.data());
  });
  AdamWConfig adamw;  // the fixture's: lr 1e-2, betas (0.9, 0.95), eps 1e-8, wd 0.1 on matrices, clip 0.5
  adamw.beta1 = 0.9;
  adamw.beta2 = 0.95;
  adamw.eps = 1e-8;
  adamw.weight_decay = 0.1;
  adamw.max_grad_norm = 0.5;
  ASSERT_TRUE(adamw.Validate().ok());
  AdamW optimizer(adamw, **model);
  const std::vector<int32_t> ids = a.at("ids").ToInt32(), targets = a.at("targets").ToInt32();
  const std::vector<double> losses = a.at("losses").ToDouble(), norms = a.at("grad_norms").ToDouble();
  for (int step = 0; step < 3; ++step) {
    auto result = TrainStep(**model, optimizer, ids.data(), targets.data(), 2, 8, 1e-2);
    ASSERT_TRUE(result.ok()) << result.status();
    // fp32 against float64: a few ulps of the loss and of the norm (a sum of 27k squares).
    EXPECT_NEAR(result->loss, losses[step], 1e-5 * losses[step]) << "step " << step;
    EXPECT_NEAR(result->grad_norm, norms[step], 1e-5 * norms[step]) << "step " << step;
  }
  EXPECT_EQ(optimizer.step(), 3);
  // Each AdamW update moves a weight by about lr = 1e-2 in the direction m / (sqrt(v) + eps). Our fp32
  // gradients carry an absolute error of at most delta = 2e-5 of their tensor's largest gradient (the bound
  // the whole-model test enforces), so an element with gradient g gets a direction off by up to delta / |g|
  // per step: we allow 2e-5 + 3 * lr * delta / |g| (capped at the 3 steps' largest possible move). For the
  // bulk of the weights that is ~2e-5, a fraction of one step, so a wrong bias correction, decay or clipping
  // is caught. Exact zero gradients (embedding rows of tokens not in the batch) are exact in both: 2e-5.
  auto first_grads = ReadFixture(FixturePath("llama_tiny"));
  ASSERT_TRUE(first_grads.ok()) << first_grads.status();
  const double lr = 1e-2;
  (*model)->VisitParameters([&](const std::string& name, const Parameter& p) {
    const std::vector<float> want = a.at("final/" + name).ToFloat();
    const std::vector<float> grad = first_grads->at("grad/" + name).ToFloat();
    double scale = 0;
    for (float g : grad) scale = std::max(scale, std::fabs(double{g}));
    const double delta = 2e-5 * scale;
    int64_t failures = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double err = std::fabs(double{p.data()[i]} - want[i]);
      double tolerance = 2e-5;
      if (grad[i] != 0) tolerance += std::min(3 * lr * 1.01, 3 * lr * delta / std::fabs(double{grad[i]}));
      if (err > tolerance && failures++ < 3) {
        ADD_FAILURE() << name << "[" << i << "]: got " << p.data()[i] << ", want " << want[i] << " (gradient "
                      << grad[i] << ", tolerance " << tolerance << ")";
      }
    }
  });
  int state_tensors = 0;
  optimizer.VisitState([&](const std::string&, const kernels::Tensor&) { ++state_tensors; });
  // token_embeddings, 2 layers x (ln1, q, k, v, output, ln2, w1, w3, w2), ln_final, lm_head = 21.
  EXPECT_EQ(state_tensors, 2 * 21);
}

// The weights of `model`, by name.
std::map<std::string, std::vector<float>> Weights(const LanguageModel& model, bool grads) {
  std::map<std::string, std::vector<float>> out;
  model.VisitParameters([&](const std::string& name, const Parameter& p) {
    const float* x = grads ? p.grad_data() : p.data();
    out[name].assign(x, x + p.value.numel());
  });
  return out;
}

// TrainStep leaves the gradients zero (AdamW zeroes them in its pass, GradsAfterStep::kZeroed) and its next
// ZeroGrad skips the memset: three steps give the same weights, bit for bit, as ZeroGrad, forward, backward
// and a step that keeps the gradients; after each such step the gradients are the backward's, not zero.
TEST(AdamWTest, StepsThatZeroTheGradientsMatchStepsThatKeepThemBitForBit) {
  const ModelConfig config = Gpt2Config(67, 16, 32, 2, 4);
  const kernels::Context ctx = kernels::Context::Cpu();
  auto zeroing = LanguageModel::Create(config, ctx), keeping = LanguageModel::Create(config, ctx);
  ASSERT_TRUE(zeroing.ok() && keeping.ok());
  (*zeroing)->InitializeParameters(3);
  (*keeping)->InitializeParameters(3);
  AdamWConfig adamw;
  adamw.max_grad_norm = 0.5;  // clipping on: the zeroing pass must read every gradient after the norm
  AdamW zeroing_optimizer(adamw, **zeroing), keeping_optimizer(adamw, **keeping);
  std::vector<int32_t> ids(2 * 8), targets(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i * 7 % 67), targets[i] = ids[i] ^ 1;
  for (int step = 0; step < 3; ++step) {
    auto result = TrainStep(**zeroing, zeroing_optimizer, ids.data(), targets.data(), 2, 8, 1e-2);
    ASSERT_TRUE(result.ok()) << result.status();
    for (const auto& [name, g] : Weights(**zeroing, /*grads=*/true))
      EXPECT_EQ(g, std::vector<float>(g.size(), 0.0f)) << name << " after step " << step;
    (*keeping)->ZeroGrad();
    auto loss = (*keeping)->ForwardWithLoss(ids.data(), targets.data(), 2, 8,
                                           ForwardMode::Training(0, keeping_optimizer.step(), 0));
    ASSERT_TRUE(loss.ok()) << loss.status();
    (*keeping)->Backward();
    const auto grads = Weights(**keeping, /*grads=*/true);
    const double norm = keeping_optimizer.Step(**keeping, 1e-2);
    EXPECT_EQ(result->loss, *loss) << "step " << step;
    EXPECT_EQ(result->grad_norm, norm) << "step " << step;
    EXPECT_EQ(Weights(**keeping, /*grads=*/true), grads) << "GradsAfterStep::kKept leaves the gradients";
    EXPECT_EQ(Weights(**zeroing, /*grads=*/false), Weights(**keeping, /*grads=*/false)) << "step " << step;
  }
}

TEST(AdamWTest, RejectsBadHyperparameters) {
  AdamWConfig c;
  c.beta2 = 1.0;
  EXPECT_NE(std::string(c.Validate().message()).find("beta2=1 must be in [0, 1)"), std::string::npos);
  c = AdamWConfig();
  c.eps = 0;
  EXPECT_FALSE(c.Validate().ok());
}

}  // namespace
}  // namespace lmf::model
