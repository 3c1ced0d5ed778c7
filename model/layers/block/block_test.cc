// Tests of the block in each structure (pre, post, double, parallel with two norms or one) over an attention
// token mixer and a feed-forward channel mixer, through the layer checks: finite differences, micro-batches
// held at once, recomputation (everything but the block's output released), declared bytes. Its numbers
// against PyTorch are checked at the model level (model/language_model's fixtures).
#include "model/layers/block/block.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/core/context.h"
#include "model/layers/attention/attention.h"
#include "model/layers/feed_forward/feed_forward.h"
#include "model/layers/mixers.h"
#include "model/testing/layer_check.h"

namespace lmf::model {
namespace {

// A block's activations behind the LayerActivations interface the checks take.
struct HeldBlock : LayerActivations {
  std::unique_ptr<BlockActivations> block;
  int64_t bytes() const override { return block->bytes(); }
  void Release() override { block->ReleaseAllButOutput(); }
};

// The block seen as a layer from its input x to its output: the checks' dout is d(output), their dh d(x).
testing::MixerUnderTest BlockUnderTest(const std::string& name, const Block& block, int64_t channels,
                                       const kernels::Context& ctx) {
  testing::MixerUnderTest t;
  t.name = name;
  t.channels = channels;
  t.new_activations = [&block] {
    auto held = std::make_unique<HeldBlock>();
    held->block = block.NewActivations();
    return held;
  };
  t.forward = [&block, ctx, channels](int64_t b, int64_t len, const float* x, float* out, LayerActivations& saved) {
    BlockActivations& acts = *StateAs<HeldBlock>(saved).block;
    block.Forward(ctx, b, len, x, acts, ForwardMode());
    std::memcpy(out, acts.output, static_cast<size_t>(b * len * channels) * sizeof(float));
  };
  t.backward = [&block, ctx, channels](const float* x, const LayerActivations& saved, const float* dout, float* dx,
                                       Scratch& scratch) {
    const BlockActivations& acts = *StateAs<HeldBlock>(saved).block;
    const size_t n = static_cast<size_t>(acts.b * acts.t * channels);
    std::memcpy(dx, dout, n * sizeof(float));  // updated in place: d(output) in, d(x) out
    block.Backward(ctx, x, acts, dx, scratch);
  };
  t.visit_parameters = [&block](const ParameterVisitor& visit) { block.VisitParameters("layers.0", visit); };
  return t;
}

struct Case {
  std::string name;
  NormPlacement placement = NormPlacement::kPre;
  bool parallel = false, shared_norm = false;
  NormKind norm = NormKind::kRMSNorm;
  FfnKind ffn = FfnKind::kSwiGLU;
  int64_t window = 0;
};

class BlockChecks : public ::testing::TestWithParam<Case> {};

TEST_P(BlockChecks, PassTheLayerChecks) {
  const Case& c = GetParam();
  ModelConfig model = Cs336Config(32, 16, /*d_model=*/16, /*n_layers=*/2, /*n_heads=*/4, /*d_ff=*/24);
  model.n_kv_heads = 2;
  model.norm_placement = c.placement;
  model.parallel_block = c.parallel;
  model.parallel_shared_norm = c.shared_norm;
  model.norm = c.norm;
  model.ffn = c.ffn;
  model.sliding_window = c.window;
  ASSERT_TRUE(model.Validate().ok()) << model.Validate();
  const kernels::Context ctx = kernels::Context::Cpu();
  StepCounters counters;
  const LayerSpec spec = model.layer(0);
  const Block block(model, MakeTokenMixer(spec.token_mixer, model, ctx, kernels::DType::kF32, &counters),
                    MakeChannelMixer(spec.channel_mixer, model, ctx, kernels::DType::kF32, &counters), ctx,
                    kernels::DType::kF32);
  const testing::MixerUnderTest layer = BlockUnderTest(c.name, block, model.d_model, ctx);
  testing::ExpectGradientsMatchFiniteDifferences(layer, /*b=*/2, /*t=*/4, /*seed=*/31);
  testing::ExpectMicroBatchesIndependent(layer, /*b=*/2, /*t=*/5, /*micro_batches=*/4, /*seed=*/32);
  testing::ExpectSavedBytes(layer, /*b=*/2, /*t=*/5,
                            CountLayerCost(model, spec, 5, kernels::DType::kF32).saved_bytes_per_token);
  // Recomputation keeps the block's output (the next block's input) and rebuilds the rest.
  const size_t n = static_cast<size_t>(2 * 5 * model.d_model);
  testing::RandomizeParameters(layer, 33, 0.3);
  std::vector<float> x(n), dout(n);
  for (size_t i = 0; i < n; ++i) x[i] = 0.1f * static_cast<float>(i % 17) - 0.8f, dout[i] = 0.05f * (i % 7);
  Scratch scratch(ctx.allocator);
  std::vector<float> dx_kept(n), dx_recomputed(n);
  for (int recompute = 0; recompute < 2; ++recompute) {
    testing::ZeroGradients(layer);
    std::unique_ptr<BlockActivations> acts = block.NewActivations();
    block.Forward(ctx, 2, 5, x.data(), *acts, ForwardMode());
    const void* output = acts->output;
    const std::vector<float> out(static_cast<const float*>(output), static_cast<const float*>(output) + n);
    if (recompute == 1) {
      acts->ReleaseAllButOutput();
      EXPECT_EQ(acts->bytes(), static_cast<int64_t>(n * sizeof(float)) +
                                   (c.placement == NormPlacement::kPost ? 2 * 5 * 4 * Norm::Statistics(c.norm) : 0))
          << c.name << ": only the output (post-norm: ln2's output and statistics) stays";
      EXPECT_EQ(std::memcmp(acts->output, out.data(), n * sizeof(float)), 0) << c.name << ": the output stays";
      block.Forward(ctx, 2, 5, x.data(), *acts, ForwardMode());
    }
    std::vector<float>& dx = recompute == 1 ? dx_recomputed : dx_kept;
    dx = dout;
    scratch.Reset();
    block.Backward(ctx, x.data(), *acts, dx.data(), scratch);
  }
  EXPECT_EQ(dx_recomputed, dx_kept) << c.name;
}

INSTANTIATE_TEST_SUITE_P(
    Structures, BlockChecks,
    ::testing::Values(Case{"pre"}, Case{"post_layernorm_gelu", NormPlacement::kPost, false, false,
                                        NormKind::kLayerNorm, FfnKind::kGELU},
                      Case{"double_geglu_window", NormPlacement::kDouble, false, false, NormKind::kRMSNorm,
                           FfnKind::kGeGLU, 2},
                      Case{"parallel_layernorm", NormPlacement::kPre, true, false, NormKind::kLayerNorm},
                      Case{"parallel_shared_norm", NormPlacement::kPre, true, true}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace lmf::model
