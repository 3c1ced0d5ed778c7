// Tests of the mixture-of-experts channel mixer: the layer checks (finite differences, micro-batches held at
// once, recomputation, declared bytes) for each router variant, with shared and fine-grained experts and
// with dropping; the dispatcher's sort and capacity; and the auxiliary-loss-free bias on a collapsed router.
#include "model/layers/moe/moe.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "base/json.h"
#include "gtest/gtest.h"
#include "kernels/core/context.h"
#include "model/layers/moe/dispatch.h"
#include "model/layers/moe/router.h"
#include "model/testing/fixture.h"
#include "model/testing/layer_check.h"
#include "model/testing/moe_fixture.h"

namespace lmf::model {
namespace {

struct Case {
  std::string name;
  MoeSpec spec;
  bool biases = false;
};

MoeSpec Spec(int64_t experts, int64_t top_k, int64_t d_expert, RouterKind router) {
  MoeSpec s;
  s.n_experts = experts, s.top_k = top_k, s.d_expert = d_expert, s.router = router;
  return s;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back({"softmax_topk", Spec(4, 2, 6, RouterKind::kSoftmaxTopK)});
  cases.push_back({"topk_softmax_gelu_biases", Spec(4, 2, 6, RouterKind::kTopKSoftmax), true});
  cases.back().spec.expert_kind = FfnKind::kGELU;
  cases.push_back({"sigmoid_normalized_scaled", Spec(6, 3, 4, RouterKind::kSigmoidTopK)});
  cases.back().spec.normalize_gates = true, cases.back().spec.route_scale = 2.5;
  cases.push_back({"grouped_shared_fine_grained", Spec(8, 2, 3, RouterKind::kSigmoidTopK)});
  cases.back().spec.n_groups = 4, cases.back().spec.topk_groups = 2, cases.back().spec.shared_d_ff = 5;
  cases.back().spec.normalize_gates = true;
  cases.push_back({"softmax_topk1_dropping_by_position", Spec(4, 1, 6, RouterKind::kSoftmaxTopK)});
  cases.back().spec.capacity_factor = 1.0;
  cases.push_back({"softmax_normalized_dropping_by_score", Spec(4, 2, 6, RouterKind::kSoftmaxTopK)});
  cases.back().spec.capacity_factor = 0.75, cases.back().spec.drop = DropPolicy::kByScore;
  cases.back().spec.normalize_gates = true;
  // Noisy gating in training: the noise is a function of the token's index, not of h, so finite differences
  // see the noisy layer's own gradient.
  cases.push_back({"noisy_topk_softmax_training", Spec(4, 2, 6, RouterKind::kTopKSoftmax)});
  cases.back().spec.noisy_gating = true;
  return cases;
}

class MoeChecks : public ::testing::TestWithParam<Case> {};

// The selection is piecewise constant in the input: finite differences are meaningful where no token's k-th
// and (k+1)-th scores (or an expert's capacity boundary) lie within the harness's eps = 1e-2 of each other.
// Seed 3 gives every case inputs and weights without such near-ties (of seeds 1-59, 80-90% do per case; the
// others fail at single entries whose numeric derivative jumps by the whole of an expert's output / 2 eps,
// a flip, while every other entry agrees). A wrong gradient term errs at every entry.
TEST_P(MoeChecks, PassTheLayerChecks) {
  const Case& c = GetParam();
  ModelConfig model = Cs336Config(32, 16, /*d_model=*/12, 1, 2, 16);
  model.biases = c.biases;
  const kernels::Context ctx = kernels::Context::Cpu();
  StepCounters counters;
  const MixtureOfExperts moe(c.spec, model, ctx, kernels::DType::kF32, &counters);
  // Training forwards (only the noisy case tells them from evaluation).
  const ForwardMode mode = ForwardMode::Training(/*seed=*/9, /*step=*/4, /*first_token=*/30);
  const testing::MixerUnderTest layer = testing::UnderTest(c.name, moe, model.d_model, ctx, mode);
  testing::ExpectGradientsMatchFiniteDifferences(layer, 2, 3, /*seed=*/3);
  testing::ExpectMicroBatchesIndependent(layer, 2, 5, 4, 22);
  testing::ExpectRecomputeIsExact(layer, 2, 5, 23);
  if (c.spec.capacity_factor == 0) {
    testing::ExpectSavedBytes(layer, 2, 5, MixtureOfExperts::SavedBytesPerToken(c.spec, model, kernels::DType::kF32));
  }
  int64_t count = 0;
  moe.VisitParameters("ffn", [&](const std::string&, const Parameter& p) { count += p.value.numel(); });
  EXPECT_EQ(MixtureOfExperts::Parameters(c.spec, model), count) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Variants, MoeChecks, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// The layer fixtures of tools/model/moe_reference.py: each router variant, shared and fine-grained experts,
// dropping by position and by score, both balancing-loss scopes, the router z-loss and the selection bias.
class PyTorchMatch : public ::testing::TestWithParam<std::string> {};

// Tolerance: the reference runs in float64 on the same fp32 inputs and weights; ours is fp32 with sums of
// at most C + F + E terms per element, so its error is a few fp32 ulps of each tensor's scale: 2e-5 of the
// scale (~170 ulps) passes it, while a wrong term, sign, gate or index errs by 1e-2 of the scale or more.
// An expert that no token reached has exactly zero gradients on both sides; tensors whose exact values are
// tiny have their scale floored at 1% of the largest gradient, as in the whole-model test.
void ExpectClose(const std::string& what, const float* got, const std::vector<float>& want, double floor_scale) {
  double scale = floor_scale, worst = 0;
  size_t worst_at = 0;
  for (float w : want) scale = std::max(scale, std::fabs(double{w}));
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(double{got[i]} - want[i]);
    if (err > worst) worst = err, worst_at = i;
  }
  EXPECT_LE(worst, 2e-5 * scale + 1e-30) << what << ": max error " << worst << " at " << worst_at << " (got "
                                         << got[worst_at] << ", want " << want[worst_at] << "), scale " << scale;
}

TEST_P(PyTorchMatch, ForwardLossesAndEveryGradient) {
  absl::StatusOr<std::map<std::string, kernels::testing::NpyArray>> read =
      testing::ReadFixture(testing::FixturePath(GetParam()));
  ASSERT_TRUE(read.ok()) << read.status();
  const std::map<std::string, kernels::testing::NpyArray>& f = *read;
  const absl::StatusOr<JsonValue> json = ParseJson(f.at("spec_json").bytes);
  ASSERT_TRUE(json.ok()) << json.status();
  const MoeSpec spec = testing::MoeSpecFromJson(*json);
  const std::vector<int64_t> shape = f.at("shape").ToInt64();
  const int64_t b = shape[0], t = shape[1], c = shape[2], n = b * t;
  ModelConfig model = Cs336Config(32, 16, c, 1, 2, 16);
  const JsonValue* biases = json->Find("biases");
  model.biases = biases != nullptr && biases->boolean;
  const kernels::Context ctx = kernels::Context::Cpu();
  StepCounters counters;
  const MixtureOfExperts moe(spec, model, ctx, kernels::DType::kF32, &counters);
  double largest_gradient = 0;
  int loaded = 0;
  moe.VisitParameters("moe", [&](const std::string& name, const Parameter& p) {
    const kernels::testing::NpyArray& value = f.at("param/" + name.substr(4));
    ASSERT_EQ(value.numel(), p.value.numel()) << name;
    const std::vector<float> values = value.ToFloat();
    std::copy(values.begin(), values.end(), p.data());
    for (float g : f.at("grad/" + name.substr(4)).ToFloat()) largest_gradient = std::max(largest_gradient, std::fabs(double{g}));
    ++loaded;
  });
  EXPECT_EQ(loaded, static_cast<int>(std::count_if(f.begin(), f.end(), [](const auto& entry) {
              return entry.first.rfind("param/", 0) == 0;
            })));
  moe.VisitBuffers("moe", [&](const std::string&, const kernels::Tensor& bias) {
    const std::vector<float> values = f.at("expert_bias").ToFloat();
    std::copy(values.begin(), values.end(), bias.data<float>());
  });
  const std::vector<float> h = f.at("h").ToFloat(), dout = f.at("dout").ToFloat();
  std::vector<float> out(h.size()), dh(h.size());
  ForwardMode mode;  // evaluation: the same as training for a layer without noise
  if (spec.noisy_gating) {  // a training forward; the reference drew the same standard normals from its key
    const std::vector<int64_t> key = f.at("noise_key").ToInt64();  // seed, step, layer, first token
    ASSERT_EQ(key.size(), 4u);
    mode = ForwardMode::Training(static_cast<uint64_t>(key[0]), key[1], key[3]);
    mode.layer = key[2];
    std::vector<float> noise(static_cast<size_t>(n * spec.n_experts));
    moe::GatingNoise(mode.seed, mode.step, mode.layer, mode.first_token, n, spec.n_experts, noise.data());
    ExpectClose("the gating noise", noise.data(), f.at("gating_noise").ToFloat(), 0);
  }
  std::unique_ptr<LayerActivations> saved = moe.NewActivations();
  moe.Forward(ctx, b, t, h.data(), out.data(), /*accumulate=*/false, *saved, mode);
  ExpectClose("out", out.data(), f.at("out").ToFloat(), 0);
  const MoeActivations& kept = StateAs<MoeActivations>(*saved);
  // Sums of n * E fp32 probabilities and lse values, each a few ulps off: 1e-5 relative.
  const double want_balance = f.at("balance_loss").ToDouble()[0], want_z = f.at("z_loss").ToDouble()[0];
  EXPECT_NEAR(kept.balance_loss, want_balance, 1e-5 * want_balance);
  EXPECT_NEAR(kept.z_loss, want_z, 1e-5 * want_z);
  EXPECT_EQ(kept.dropped(), f.at("dropped").ToInt64()[0]);
  Scratch scratch(&kernels::CpuAllocator::Default());
  moe.Backward(ctx, h.data(), *saved, dout.data(), dh.data(), scratch);
  ExpectClose("the input gradient", dh.data(), f.at("grad_h").ToFloat(), 0);
  moe.VisitParameters("moe", [&](const std::string& name, const Parameter& p) {
    ExpectClose("the gradient of " + name, p.grad_data(), f.at("grad/" + name.substr(4)).ToFloat(),
                1e-2 * largest_gradient);
  });
  EXPECT_EQ(n * spec.top_k, kept.dispatch.rows() + kept.dropped());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PyTorchMatch,
                         ::testing::Values("moe_layer_softmax_topk", "moe_layer_topk_softmax",
                                           "moe_layer_sigmoid_grouped_bias", "moe_layer_shared_fine_grained",
                                           "moe_layer_drop_position", "moe_layer_drop_score",
                                           "moe_layer_noisy_topk"));

// The noise is a function of (seed, step, layer, token index, expert) alone: a micro-batch that starts at
// token k draws rows k.. of the whole step's draw, bit for bit (what lets every parallel layout draw one
// process's noise); another seed, step or layer draws other numbers; the draws are standard normals.
TEST(MoeNoisyGating, NoiseIsAFunctionOfTheTokenIndex) {
  const int64_t n = 4096, e = 8, first = 640;
  std::vector<float> whole(static_cast<size_t>(n * e)), part(static_cast<size_t>((n - 100) * e));
  moe::GatingNoise(17, 3, 2, first, n, e, whole.data());
  moe::GatingNoise(17, 3, 2, first + 100, n - 100, e, part.data());
  EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + 100 * e));
  for (const auto& [seed, step, layer] : {std::tuple<uint64_t, int64_t, int64_t>{18, 3, 2}, {17, 4, 2}, {17, 3, 1}}) {
    std::vector<float> other(whole.size());
    moe::GatingNoise(seed, step, layer, first, n, e, other.data());
    int64_t same = 0;
    for (size_t i = 0; i < whole.size(); ++i) same += other[i] == whole[i];
    EXPECT_EQ(same, 0) << "seed " << seed << " step " << step << " layer " << layer;
  }
  // Mean and variance of 32768 draws: standard errors 0.0055 and 0.008; 5 of them allowed.
  double sum = 0, squares = 0;
  for (float v : whole) sum += v, squares += double{v} * v;
  const double mean = sum / static_cast<double>(whole.size());
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(squares / static_cast<double>(whole.size()) - mean * mean, 1.0, 0.04);
}

// An evaluation forward of a noisy layer is the noise-free router's: the output, the input gradient and the
// router's gradient of the same layer without noisy gating, bit for bit, and no gradient for W_noise. A
// training forward routes on other logits, repeats itself exactly, and the tokens of a micro-batch that
// starts later in the step (first_token) take the experts and gates they take in the whole batch.
TEST(MoeNoisyGating, EvaluationIsNoiseFreeAndTrainingIsKeyedByTokenIndex) {
  MoeSpec spec = Spec(4, 2, 6, RouterKind::kTopKSoftmax);
  spec.noisy_gating = true;
  MoeSpec plain_spec = spec;
  plain_spec.noisy_gating = false;
  const ModelConfig model = Cs336Config(32, 16, /*d_model=*/8, 1, 2, 16);
  const kernels::Context ctx = kernels::Context::Cpu();
  StepCounters counters;
  const MixtureOfExperts noisy(spec, model, ctx, kernels::DType::kF32, &counters),
      plain(plain_spec, model, ctx, kernels::DType::kF32, &counters);
  const testing::MixerUnderTest layer = testing::UnderTest("noisy", noisy, model.d_model, ctx);
  testing::RandomizeParameters(layer, 7, 1.0);  // W_noise large enough that the noise changes the routing
  std::map<std::string, std::vector<float>> values;
  noisy.VisitParameters("ffn", [&](const std::string& name, const Parameter& p) {
    values[name].assign(p.data(), p.data() + p.value.numel());
  });
  plain.VisitParameters("ffn", [&](const std::string& name, const Parameter& p) {
    std::copy(values.at(name).begin(), values.at(name).end(), p.data());
  });
  const int64_t b = 4, t = 6, n = b * t, c = model.d_model;
  std::vector<float> h(static_cast<size_t>(n * c)), dout(h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    h[i] = std::sin(0.37f * static_cast<float>(i));
    dout[i] = std::cos(0.11f * static_cast<float>(i));
  }
  Scratch scratch(&kernels::CpuAllocator::Default());
  struct Result {
    std::vector<float> out, dh, logits, gates;
    std::vector<int32_t> experts;
  };
  const auto run = [&](const MixtureOfExperts& moe, int64_t rows_b, int64_t row0, const ForwardMode& mode) {
    Result r;
    r.out.resize(static_cast<size_t>(rows_b * t * c)), r.dh.resize(r.out.size());
    std::unique_ptr<LayerActivations> saved = moe.NewActivations();
    moe.Forward(ctx, rows_b, t, h.data() + row0 * c, r.out.data(), /*accumulate=*/false, *saved, mode);
    moe.Backward(ctx, h.data() + row0 * c, *saved, dout.data() + row0 * c, r.dh.data(), scratch);
    scratch.Reset();
    const MoeActivations& kept = StateAs<MoeActivations>(*saved);
    r.logits = kept.logits, r.gates = kept.gates, r.experts = kept.experts;
    return r;
  };
  const auto grad = [](const MixtureOfExperts& moe, const std::string& name) {
    std::vector<float> g;
    moe.VisitParameters("ffn", [&](const std::string& visited, const Parameter& p) {
      if (visited != name) return;
      g.assign(p.grad_data(), p.grad_data() + p.grad.numel());
      std::fill_n(p.grad_data(), p.grad.numel(), 0.0f);  // the next run's gradient alone
    });
    return g;
  };
  const Result eval = run(noisy, b, 0, ForwardMode()), reference = run(plain, b, 0, ForwardMode());
  EXPECT_EQ(eval.out, reference.out);
  EXPECT_EQ(eval.dh, reference.dh);
  EXPECT_EQ(grad(noisy, "ffn.router.weight"), grad(plain, "ffn.router.weight"));
  const std::vector<float> noise_grad = grad(noisy, "ffn.router.noise.weight");
  EXPECT_TRUE(std::all_of(noise_grad.begin(), noise_grad.end(), [](float g) { return g == 0; }));

  const ForwardMode training = ForwardMode::Training(/*seed=*/3, /*step=*/11, /*first_token=*/96);
  const Result trained = run(noisy, b, 0, training), again = run(noisy, b, 0, training);
  EXPECT_NE(trained.experts, eval.experts) << "the noise should change some token's experts";
  EXPECT_NE(grad(noisy, "ffn.router.noise.weight"), noise_grad) << "a training forward trains W_noise";
  EXPECT_EQ(trained.out, again.out);
  EXPECT_EQ(trained.logits, again.logits);
  ForwardMode later = training;
  later.first_token += 2 * t;  // sequences 2 and 3 alone
  const Result half = run(noisy, 2, 2 * t, later);
  for (int64_t i = 0; i < 2 * t * spec.top_k; ++i) {
    const size_t whole = static_cast<size_t>(2 * t * spec.top_k + i);
    EXPECT_EQ(half.experts[i], trained.experts[whole]) << i;
    EXPECT_NEAR(half.gates[i], trained.gates[whole], 1e-6) << i;
  }
}

TEST(MoeDispatch, SortsByExpertAndDropsOverCapacity) {
  MoeSpec spec = Spec(3, 1, 4, RouterKind::kSoftmaxTopK);
  // Tokens 0..5 choose experts 2, 0, 2, 2, 1, 2 with gates 0.1 .. 0.6.
  const std::vector<int32_t> experts = {2, 0, 2, 2, 1, 2};
  const std::vector<float> gates = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  moe::Dispatch d;
  moe::BuildDispatch(spec, 6, experts.data(), gates.data(), d);
  EXPECT_EQ(d.counts, (std::vector<int64_t>{1, 1, 4}));
  EXPECT_EQ(d.offsets, (std::vector<int64_t>{0, 1, 2, 6}));
  EXPECT_EQ(std::vector<int32_t>(d.row_assignment.begin(), d.row_assignment.begin() + 6),
            (std::vector<int32_t>{1, 4, 0, 2, 3, 5}));
  EXPECT_EQ(d.dropped, 0);
  // Capacity ceil(1.0 * 6 / 3) = 2: expert 2 keeps tokens 0 and 2 by position, 3 and 5 by score.
  spec.capacity_factor = 1.0;
  moe::BuildDispatch(spec, 6, experts.data(), gates.data(), d);
  EXPECT_EQ(d.counts, (std::vector<int64_t>{1, 1, 2}));
  EXPECT_EQ(d.dropped, 2);
  EXPECT_EQ(d.assignment_row, (std::vector<int32_t>{2, 0, 3, -1, 1, -1}));
  spec.drop = DropPolicy::kByScore;
  moe::BuildDispatch(spec, 6, experts.data(), gates.data(), d);
  EXPECT_EQ(d.assignment_row, (std::vector<int32_t>{-1, 0, -1, 2, 1, 3}));
}

TEST(MoeRouter, GroupLimitedRoutingPicksWithinTheBestGroups) {
  MoeSpec spec = Spec(6, 2, 4, RouterKind::kSigmoidTopK);
  spec.n_groups = 3, spec.topk_groups = 1;
  // Group scores (sum of the best two sigmoid scores): group 1 (experts 2, 3) wins although expert 0 alone
  // has the highest score.
  const std::vector<float> logits = {3.0f, -3.0f, 2.0f, 2.0f, 0.0f, 0.0f};
  std::vector<int32_t> experts(2);
  std::vector<float> gates(2);
  moe::Route(spec, 1, logits.data(), nullptr, experts.data(), gates.data());
  EXPECT_EQ(experts, (std::vector<int32_t>{2, 3}));
  spec.n_groups = 1, spec.topk_groups = 1;
  moe::Route(spec, 1, logits.data(), nullptr, experts.data(), gates.data());
  EXPECT_EQ(experts, (std::vector<int32_t>{0, 2}));
}

TEST(MoeRouter, BiasChangesTheSelectionNotTheGates) {
  MoeSpec spec = Spec(4, 1, 4, RouterKind::kSigmoidTopK);
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -1.0f};
  const std::vector<float> bias = {0.0f, 0.5f, 0.0f, 0.0f};
  std::vector<int32_t> experts(1);
  std::vector<float> gates(1);
  moe::Route(spec, 1, logits.data(), bias.data(), experts.data(), gates.data());
  EXPECT_EQ(experts[0], 1);
  EXPECT_FLOAT_EQ(gates[0], 1.0f / (1.0f + std::exp(-0.5f)));
}

// A router that sends every token to expert 0 (a large positive weight column on a positive input): the
// auxiliary-loss-free bias, updated after each step, moves the load toward balance.
TEST(MoeExpertBias, MovesACollapsedRouterTowardBalance) {
  MoeSpec spec = Spec(4, 1, 4, RouterKind::kSigmoidTopK);
  spec.expert_bias = true, spec.bias_update_rate = 0.05;
  ModelConfig model = Cs336Config(32, 16, /*d_model=*/8, 1, 2, 16);
  const kernels::Context ctx = kernels::Context::Cpu();
  StepCounters counters;
  const MixtureOfExperts moe(spec, model, ctx, kernels::DType::kF32, &counters);
  const testing::MixerUnderTest layer = testing::UnderTest("bias", moe, model.d_model, ctx);
  testing::RandomizeParameters(layer, 5, 0.5);
  moe.VisitParameters("ffn", [&](const std::string& name, const Parameter& p) {
    if (name == "ffn.router.weight") {
      for (int64_t i = 0; i < model.d_model; ++i) p.data()[i] = 2.0f;  // expert 0's row
    }
  });
  // Inputs of mean 1 (expert 0's logit about 16) that differ from token to token, so that the other
  // experts' scores order the tokens differently.
  const int64_t b = 4, t = 8, n = b * t;
  std::vector<float> h(static_cast<size_t>(n * model.d_model)), out(h.size()), dh(h.size()), dout(h.size(), 0.01f);
  for (size_t i = 0; i < h.size(); ++i) h[i] = 1.0f + std::sin(1.7f * static_cast<float>(i * i % 101));
  Scratch scratch(&kernels::CpuAllocator::Default());
  const auto max_load = [&] {
    std::unique_ptr<LayerActivations> saved = moe.NewActivations();
    layer.forward(b, t, h.data(), out.data(), *saved);
    layer.backward(h.data(), *saved, dout.data(), dh.data(), scratch);
    scratch.Reset();
    float most = 0;
    moe.VisitStepCounts("ffn", [&](const std::string& name, const kernels::Tensor& load) {
      if (name != "ffn.router.expert_load") return;
      for (int64_t i = 0; i < spec.n_experts; ++i) most = std::max(most, load.data<float>()[i]);
    });
    moe.EndStep();
    return most;
  };
  const float first = max_load();
  EXPECT_GE(first, 0.9 * n) << "the router should start collapsed on one expert";
  float last = first;
  for (int step = 0; step < 60; ++step) last = max_load();
  EXPECT_LE(last, 0.5 * n) << "the bias should spread the load: the busiest expert still takes " << last << " of "
                           << n;
}

}  // namespace
}  // namespace lmf::model
