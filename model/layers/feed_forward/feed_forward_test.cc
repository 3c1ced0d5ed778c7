// Tests of the dense feed-forward channel mixer through the layer checks (finite differences, micro-batches
// held at once, recomputation, declared bytes) for each kind; its numbers against PyTorch are checked at the
// model level (model/language_model's fixtures).
#include "model/layers/feed_forward/feed_forward.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/core/context.h"
#include "model/testing/layer_check.h"

namespace lmf::model {
namespace {

struct Case {
  std::string name;
  FeedForwardSpec spec;
  bool biases = false;
};

class FeedForwardChecks : public ::testing::TestWithParam<Case> {};

TEST_P(FeedForwardChecks, PassTheLayerChecks) {
  const Case& c = GetParam();
  ModelConfig model = Cs336Config(32, 16, /*d_model=*/12, 1, 2, c.spec.d_ff);
  model.biases = c.biases;
  const kernels::Context ctx = kernels::Context::Cpu();
  StepCounters counters;
  const FeedForward ffn(c.spec, model, ctx, kernels::DType::kF32, &counters);
  const testing::MixerUnderTest layer = testing::UnderTest(c.name, ffn, model.d_model, ctx);
  // ReLU's kink makes finite differences meaningless within eps of zero; its formula is checked against
  // PyTorch (variants_tiny) and the other checks below.
  if (c.spec.kind != FfnKind::kReLU) testing::ExpectGradientsMatchFiniteDifferences(layer, 2, 3, 21);
  testing::ExpectMicroBatchesIndependent(layer, 2, 5, 4, 22);
  testing::ExpectRecomputeIsExact(layer, 2, 5, 23);
  testing::ExpectSavedBytes(layer, 2, 5, FeedForward::SavedBytesPerToken(c.spec, kernels::DType::kF32));
  EXPECT_EQ(FeedForward::Parameters(c.spec, model), [&] {
    int64_t count = 0;
    ffn.VisitParameters("ffn", [&](const std::string&, const Parameter& p) { count += p.value.numel(); });
    return count;
  }()) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Kinds, FeedForwardChecks,
                         ::testing::Values(Case{"swiglu", {FfnKind::kSwiGLU, 20}},
                                           Case{"geglu_biases", {FfnKind::kGeGLU, 16}, true},
                                           Case{"gelu_biases", {FfnKind::kGELU, 24}, true},
                                           Case{"relu", {FfnKind::kReLU, 20}}),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace lmf::model
