// Tests of AdamW + clipping on the model: three training steps of llama_tiny match torch.optim.AdamW with
// clip_grad_norm_ (fixture from tools/model/reference.py), and a bad config is rejected.
#include "model/optimizer/adamw.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "model/testing/npz.h"

namespace lmf::model {
namespace {

std::string FixturePath(const std::string& name) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || workspace == nullptr) return "model/testdata/" + name + ".npz";
  return std::string(srcdir) + "/" + workspace + "/model/testdata/" + name + ".npz";
}

TEST(AdamWTest, ThreeClippedStepsMatchTorch) {
  auto arrays = testing::ReadNpz(FixturePath("adamw_llama_tiny"));
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  const auto& a = *arrays;
  // llama_tiny of tools/model/reference.py.
  ModelConfig config = Cs336Config(67, 16, 32, 2, 4, 88);
  config.n_kv_heads = 2;
  const kernels::Context ctx = kernels::Context::Cpu();
  auto model = LanguageModel::Create(config, ctx);
  ASSERT_TRUE(model.ok());
  (*model)->VisitParameters([&](const std::string& name, const Parameter& p) {
    const std::vector<float> v = a.at("param/" + name).AsFloats();
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
  AdamW optimizer(adamw);
  const std::vector<int32_t> ids = a.at("ids").AsInt32(), targets = a.at("targets").AsInt32();
  const std::vector<double> losses = a.at("losses").AsDoubles(), norms = a.at("grad_norms").AsDoubles();
  for (int step = 0; step < 3; ++step) {
    auto result = TrainStep(ctx, **model, optimizer, ids.data(), targets.data(), 2, 8, 1e-2);
    ASSERT_TRUE(result.ok()) << result.status();
    // fp32 against float64: a few ulps of the loss and of the norm (a sum of 27k squares).
    EXPECT_NEAR(result->loss, losses[step], 1e-5 * losses[step]) << "step " << step;
    EXPECT_NEAR(result->grad_norm, norms[step], 1e-5 * norms[step]) << "step " << step;
  }
  EXPECT_EQ(optimizer.step(), 3);
  // Each AdamW update moves a weight by about lr = 1e-2 in the direction m / (sqrt(v) + eps), which fp32
  // gradients (1e-5 relative to their tensor's scale) reproduce to ~1e-5 for gradients well above that
  // error: after 3 steps those weights agree to ~1e-6 absolute. We allow 2e-5, a fraction of any step, so a
  // wrong bias correction, decay or clipping is caught. Elements whose gradient is below 1e-4 of their
  // tensor's scale are ill-conditioned (their fp32 rounding is comparable to the gradient and to eps) and
  // only checked to move no more than the 3 steps allow; they must be rare. (Exact zeros, the embedding
  // rows of tokens not in the batch, are exact in both and checked strictly.)
  auto first_grads = testing::ReadNpz(FixturePath("llama_tiny"));
  ASSERT_TRUE(first_grads.ok()) << first_grads.status();
  int64_t ill_conditioned = 0, total = 0;
  (*model)->VisitParameters([&](const std::string& name, const Parameter& p) {
    const std::vector<float> want = a.at("final/" + name).AsFloats();
    const std::vector<float> start = a.at("param/" + name).AsFloats();
    const std::vector<float> grad = first_grads->at("grad/" + name).AsFloats();
    double scale = 0;
    for (float g : grad) scale = std::max(scale, std::fabs(double{g}));
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double err = std::fabs(double{p.data()[i]} - want[i]);
      ++total;
      if (grad[i] != 0 && std::fabs(grad[i]) < 1e-4 * scale) {
        ++ill_conditioned;
        EXPECT_LE(std::fabs(double{p.data()[i]} - start[i]), 3 * 1e-2 * 1.01) << name << "[" << i << "]";
      } else {
        worst = std::max(worst, err);
      }
    }
    EXPECT_LE(worst, 2e-5) << name;
  });
  EXPECT_LT(ill_conditioned, total / 200) << ill_conditioned << " of " << total;
  int state_tensors = 0;
  optimizer.VisitState([&](const std::string&, const kernels::Tensor&) { ++state_tensors; });
  // token_embeddings, 2 layers x (ln1, q, k, v, output, ln2, w1, w3, w2), ln_final, lm_head = 21.
  EXPECT_EQ(state_tensors, 2 * 21);
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
