// Tests of the model as stage slices and of caller-owned activations:
// - a model run as two slices (layers [0, k) and [k, L)) with hidden states passed between them gives the
//   whole model's loss and every gradient bit for bit (tied embeddings: the two copies of the token table
//   summed, equal to fp32 rounding);
// - the activations of 4 micro-batches held at once, their backwards run in another order than their
//   forwards, give bit for bit the gradients of accumulating the micro-batches one by one in that order, and
//   the natural order's to fp32 rounding;
// - a layer's activations released after the forward and recomputed give the same gradients, bit for bit
//   (with noisy MoE gating too: the training forward's noise is drawn again);
// - the backward split into B (input gradients, weight gradients deferred) and W (the deferred work run
//   later, interleaved with other micro-batches' B as ZB-H1 does) gives the plain backward's input and
//   weight gradients bit for bit;
// - slices refuse what they cannot do, with messages.
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/core/context.h"
#include "model/language_model/language_model.h"

namespace lmf::model {
namespace {

using Grads = std::map<std::string, std::vector<float>>;

ModelConfig LlamaLike() {
  ModelConfig c = Cs336Config(/*vocab_size=*/61, /*context_length=*/16, /*d_model=*/32, /*n_layers=*/4,
                              /*n_heads=*/4, /*d_ff=*/64);
  c.n_kv_heads = 2;
  return c;
}

ModelConfig Gpt2LikeTied() { return Gpt2Config(/*vocab_size=*/59, /*context_length=*/16, /*d_model=*/32, 3, 4); }

// Blocks that differ: a windowed GQA attention with SwiGLU, then a global MQA attention with QK-norm and a
// GELU of another width.
ModelConfig Mixed() {
  ModelConfig c = LlamaLike();
  LayerSpec local, global;
  local.token_mixer.attention = AttentionSpec{4, 2, /*window=*/3, 0.0, false};
  local.channel_mixer.feed_forward = FeedForwardSpec{FfnKind::kSwiGLU, 48};
  global.token_mixer.attention = AttentionSpec{2, 1, 0, /*softcap=*/2.0, /*qk_norm=*/true};
  global.channel_mixer.feed_forward = FeedForwardSpec{FfnKind::kGELU, 80};
  c.layer_pattern = {local, global};
  return c;
}

std::vector<int32_t> RandomIds(const ModelConfig& c, int64_t n, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = static_cast<int32_t>(engine() % static_cast<uint64_t>(c.vocab_size));
  return ids;
}

std::unique_ptr<LanguageModel> Make(const ModelConfig& c, LayerRange range = {}) {
  absl::StatusOr<std::unique_ptr<LanguageModel>> model = LanguageModel::Create(c, kernels::Context::Cpu(),
                                                                               kernels::DType::kF32, range);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  (*model)->InitializeParameters(/*seed=*/5);
  (*model)->ZeroGrad();
  return *std::move(model);
}

void AddGrads(const LanguageModel& model, Grads& grads) {
  model.VisitParameters([&](const std::string& name, const Parameter& p) {
    std::vector<float>& g = grads[name];
    if (g.empty()) {
      g.assign(p.grad_data(), p.grad_data() + p.grad.numel());
    } else {
      for (size_t i = 0; i < g.size(); ++i) g[i] += p.grad_data()[i];  // a tied table's second copy
    }
  });
}

// The whole model's loss and gradients for one batch, and the same from two slices split after layer k.
void ExpectSlicesEqualWhole(const std::string& what, const ModelConfig& c, int64_t k) {
  const int64_t b = 2, t = 9, n = b * t;
  const std::vector<int32_t> ids = RandomIds(c, n, 1), targets = RandomIds(c, n, 2);
  std::unique_ptr<LanguageModel> whole = Make(c);
  std::unique_ptr<LanguageModel> first = Make(c, {0, k});
  std::unique_ptr<LanguageModel> second = Make(c, {k, c.n_layers});
  ASSERT_TRUE(whole && first && second);
  EXPECT_TRUE(first->has_embedding() && !first->has_head());
  EXPECT_TRUE(!second->has_embedding() && second->has_head());
  EXPECT_EQ(first->parameter_count() + second->parameter_count(),
            whole->parameter_count() + (c.tied_embeddings ? c.vocab_rows() * c.d_model : 0))
      << what << ": the slices hold every parameter once (and a tied head's copy of the token table)";

  const absl::StatusOr<double> loss = whole->ForwardWithLoss(ids.data(), targets.data(), b, t);
  ASSERT_TRUE(loss.ok()) << loss.status();
  whole->Backward();
  Grads want;
  AddGrads(*whole, want);

  Activations a = first->NewActivations(), s = second->NewActivations();
  ASSERT_TRUE(first->ForwardStage(StageInput{b, t, ids.data(), nullptr, nullptr}, a).ok());
  const absl::Status forward = second->ForwardStage(StageInput{b, t, nullptr, a.hidden_output(), targets.data()}, s);
  ASSERT_TRUE(forward.ok()) << forward;
  const double slice_loss = s.loss();
  EXPECT_EQ(std::memcmp(&*loss, &slice_loss, sizeof(double)), 0) << what << ": loss " << slice_loss << " vs " << *loss;
  std::vector<float> dhidden(static_cast<size_t>(n * c.d_model));
  second->BackwardStage(s, /*doutput=*/nullptr, dhidden.data());
  first->BackwardStage(a, dhidden.data(), /*dinput=*/nullptr);
  Grads got;
  AddGrads(*first, got);
  AddGrads(*second, got);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, grad] : want) {
    const std::vector<float>& g = got.at(name);
    if (c.tied_embeddings && name == "token_embeddings.weight") {
      // The whole model adds the head's and the embedding's contributions into one tensor in one order; the
      // slices sum two tensors: equal to a few fp32 ulps of the gradient's scale.
      double scale = 0, worst = 0;
      for (size_t i = 0; i < grad.size(); ++i) {
        scale = std::max(scale, std::fabs(double{grad[i]}));
        worst = std::max(worst, std::fabs(double{grad[i]} - g[i]));
      }
      EXPECT_LE(worst, 1e-6 * scale) << what << ": " << name;
    } else {
      EXPECT_EQ(g, grad) << what << ": the gradient of " << name;
    }
  }
}

TEST(LanguageModelStages, TwoSlicesGiveTheWholeModelsLossAndGradients) {
  for (int64_t k : {1, 2, 3}) ExpectSlicesEqualWhole("llama-like, split after layer " + std::to_string(k), LlamaLike(), k);
  ExpectSlicesEqualWhole("mixed blocks, split after layer 1", Mixed(), 1);
  ExpectSlicesEqualWhole("mixed blocks, split after layer 2", Mixed(), 2);
  ExpectSlicesEqualWhole("gpt2-like tied, split after layer 2", Gpt2LikeTied(), 2);
  ModelConfig post = LlamaLike();
  post.norm_placement = NormPlacement::kPost;
  ExpectSlicesEqualWhole("post-norm, split after layer 2", post, 2);
}

// A slice of three: the middle one reads and writes hidden states at both ends.
TEST(LanguageModelStages, ThreeSlicesGiveTheWholeModelsGradients) {
  const ModelConfig c = Mixed();
  const int64_t b = 2, t = 7, n = b * t;
  const std::vector<int32_t> ids = RandomIds(c, n, 3), targets = RandomIds(c, n, 4);
  std::unique_ptr<LanguageModel> whole = Make(c);
  std::vector<std::unique_ptr<LanguageModel>> stages;
  for (LayerRange range : {LayerRange{0, 1}, LayerRange{1, 3}, LayerRange{3, 4}}) stages.push_back(Make(c, range));
  ASSERT_TRUE(whole->ForwardWithLoss(ids.data(), targets.data(), b, t).ok());
  whole->Backward();
  Grads want, got;
  AddGrads(*whole, want);
  std::vector<Activations> acts;
  for (const auto& stage : stages) acts.push_back(stage->NewActivations());
  ASSERT_TRUE(stages[0]->ForwardStage({b, t, ids.data(), nullptr, nullptr}, acts[0]).ok());
  ASSERT_TRUE(stages[1]->ForwardStage({b, t, nullptr, acts[0].hidden_output(), nullptr}, acts[1]).ok());
  ASSERT_TRUE(stages[2]->ForwardStage({b, t, nullptr, acts[1].hidden_output(), targets.data()}, acts[2]).ok());
  std::vector<float> d2(static_cast<size_t>(n * c.d_model)), d1(d2.size());
  stages[2]->BackwardStage(acts[2], nullptr, d2.data());
  stages[1]->BackwardStage(acts[1], d2.data(), d1.data());
  stages[0]->BackwardStage(acts[0], d1.data(), nullptr);
  for (const auto& stage : stages) AddGrads(*stage, got);
  for (const auto& [name, grad] : want) EXPECT_EQ(got.at(name), grad) << name;
}

// Four micro-batches' activations held at once, backwards in the order 2, 0, 3, 1.
TEST(LanguageModelStages, MicroBatchesHeldAtOnceEqualAccumulation) {
  for (const ModelConfig& c : {LlamaLike(), Mixed(), Gpt2LikeTied()}) {
    const int64_t b = 2, t = 8, n = b * t, micro_batches = 4;
    const std::vector<int> order = {2, 0, 3, 1};
    std::vector<std::vector<int32_t>> ids, targets;
    for (int m = 0; m < micro_batches; ++m) {
      ids.push_back(RandomIds(c, n, 10 + m));
      targets.push_back(RandomIds(c, n, 20 + m));
    }
    std::unique_ptr<LanguageModel> model = Make(c);
    // One micro-batch at a time (the model's own activations), in the backward order, then in order.
    std::vector<double> alone_loss(micro_batches);
    for (int m : order) {
      alone_loss[m] = *model->ForwardWithLoss(ids[m].data(), targets[m].data(), b, t);
      model->Backward();
    }
    Grads sequential;
    AddGrads(*model, sequential);
    model->ZeroGrad();
    for (int m = 0; m < micro_batches; ++m) {
      ASSERT_TRUE(model->ForwardWithLoss(ids[m].data(), targets[m].data(), b, t).ok());
      model->Backward();
    }
    Grads in_order;
    AddGrads(*model, in_order);
    model->ZeroGrad();
    // All forwards, then the backwards.
    std::vector<Activations> held;
    for (int m = 0; m < micro_batches; ++m) {
      held.push_back(model->NewActivations());
      const absl::StatusOr<double> loss = model->ForwardWithLoss(ids[m].data(), targets[m].data(), b, t, held[m]);
      ASSERT_TRUE(loss.ok()) << loss.status();
      EXPECT_EQ(std::memcmp(&*loss, &alone_loss[m], sizeof(double)), 0) << "micro-batch " << m;
    }
    int64_t bytes = 0;
    for (const Activations& a : held) bytes += a.bytes();
    EXPECT_EQ(bytes, micro_batches * held[0].bytes()) << "each micro-batch keeps its own";
    for (int m : order) model->Backward(held[m]);
    Grads together;
    AddGrads(*model, together);
    for (const auto& [name, grad] : sequential) {
      EXPECT_EQ(together.at(name), grad) << c.DebugString() << ": " << name;
      // Against the forwards' order: the same sums in another order, equal to fp32 rounding of the scale.
      double scale = 0, worst = 0;
      for (size_t i = 0; i < grad.size(); ++i) {
        scale = std::max(scale, std::fabs(double{in_order.at(name)[i]}));
        worst = std::max(worst, std::fabs(double{in_order.at(name)[i]} - grad[i]));
      }
      EXPECT_LE(worst, 1e-6 * scale + 1e-30) << name;
    }
    // A second backward of the same activations is a program error, as before.
    EXPECT_DEATH(model->Backward(held[0]), "needs a ForwardWithLoss first");
  }
}

TEST(LanguageModelStages, RecomputedLayersGiveTheSameGradients) {
  for (ModelConfig c : {LlamaLike(), Mixed()}) {
    for (NormPlacement placement : {NormPlacement::kPre, NormPlacement::kPost, NormPlacement::kDouble}) {
      c.norm_placement = placement;
      const int64_t b = 2, t = 8, n = b * t;
      const std::vector<int32_t> ids = RandomIds(c, n, 7), targets = RandomIds(c, n, 8);
      std::unique_ptr<LanguageModel> model = Make(c);
      Grads want, got;
      Activations a = model->NewActivations();
      ASSERT_TRUE(model->ForwardWithLoss(ids.data(), targets.data(), b, t, a).ok());
      model->Backward(a);
      AddGrads(*model, want);
      model->ZeroGrad();
      ASSERT_TRUE(model->ForwardWithLoss(ids.data(), targets.data(), b, t, a).ok());
      const int64_t kept = a.bytes();
      for (int64_t layer : {1, 2}) a.ReleaseLayer(layer);
      EXPECT_LT(a.bytes(), kept) << "released layers free their activations";
      for (int64_t layer : {1, 2}) model->RecomputeLayer(layer, a);
      EXPECT_EQ(a.bytes(), kept);
      model->Backward(a);
      AddGrads(*model, got);
      for (const auto& [name, grad] : want) EXPECT_EQ(got.at(name), grad) << NormPlacementName(placement) << ": " << name;
    }
  }
}

// A mixture of experts in every layer (with a shared expert, biases and the balancing loss).
ModelConfig MoeModel() {
  ModelConfig c = Gpt2LikeTied();
  MoeSpec moe;
  moe.n_experts = 4;
  moe.top_k = 2;
  moe.d_expert = 16;
  moe.shared_d_ff = 16;
  moe.aux_loss = 0.01;
  c.moe = moe;
  return c;
}

// Three micro-batches through a slice: the plain backward of each in turn, against the split backward in
// ZB-H1's order B0 B1 W0 B2 W1 W2. B leaves the GEMM weight gradients alone (they are still zero after the
// first B) and W adds them: every gradient and every input gradient bit for bit.
void ExpectSplitBackwardEqualsBackward(const std::string& what, const ModelConfig& c, LayerRange range) {
  const int64_t b = 2, t = 8, n = b * t;
  std::unique_ptr<LanguageModel> model = Make(c, range);
  ASSERT_TRUE(model);
  std::unique_ptr<LanguageModel> before = range.first > 0 ? Make(c, {0, range.first}) : nullptr;
  const bool head = model->has_head();
  std::vector<std::vector<int32_t>> ids, targets;
  std::vector<std::vector<float>> hidden, doutput;  // the slice's input and its output's gradient
  for (int m = 0; m < 3; ++m) {
    ids.push_back(RandomIds(c, n, 30 + m));
    targets.push_back(RandomIds(c, n, 40 + m));
    if (before) {
      Activations a = before->NewActivations();
      ASSERT_TRUE(before->ForwardStage({b, t, ids[m].data(), nullptr, nullptr}, a).ok());
      const float* h = static_cast<const float*>(a.hidden_output());
      hidden.emplace_back(h, h + n * c.d_model);
    }
    std::vector<float> d(static_cast<size_t>(n * c.d_model));
    for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<float>(std::sin(0.37 * (i + 1) + m));
    doutput.push_back(std::move(d));
  }
  const auto input = [&](int m) {
    return StageInput{b, t, before ? nullptr : ids[m].data(), before ? hidden[m].data() : nullptr,
                      head ? targets[m].data() : nullptr};
  };
  const size_t hidden_floats = static_cast<size_t>(n * c.d_model);
  std::vector<std::vector<float>> want_dinput(3, std::vector<float>(hidden_floats));
  std::vector<std::vector<float>> got_dinput(3, std::vector<float>(hidden_floats));
  for (int m = 0; m < 3; ++m) {
    Activations a = model->NewActivations();
    ASSERT_TRUE(model->ForwardStage(input(m), a).ok()) << what;
    model->BackwardStage(a, head ? nullptr : doutput[m].data(), before ? want_dinput[m].data() : nullptr);
  }
  Grads want, got;
  AddGrads(*model, want);
  model->ZeroGrad();

  std::vector<Activations> held;
  std::vector<DeferredWeightGrads> deferred(3);
  for (int m = 0; m < 3; ++m) {
    held.push_back(model->NewActivations());
    ASSERT_TRUE(model->ForwardStage(input(m), held[m]).ok()) << what;
  }
  const auto backward_input = [&](int m) {
    model->BackwardStage(held[m], head ? nullptr : doutput[m].data(), before ? got_dinput[m].data() : nullptr,
                         &deferred[m]);
    EXPECT_FALSE(deferred[m].empty()) << what;
    EXPECT_GT(deferred[m].bytes(), 0) << what << ": the gradient copies W reads";
  };
  backward_input(0);
  Grads after_b;
  AddGrads(*model, after_b);
  std::vector<std::string> deferred_weights = {absl::StrCat("layers.", range.first, ".attn.output_proj.weight")};
  if (!before) deferred_weights.push_back("token_embeddings.weight");
  if (head && !c.tied_embeddings) deferred_weights.push_back("lm_head.weight");
  const std::string kept_gain = absl::StrCat("layers.", range.first, ".ln1.weight");
  ASSERT_TRUE(after_b.count(kept_gain)) << what;
  for (const std::string& name : deferred_weights) {
    ASSERT_TRUE(after_b.count(name)) << what << ": " << name;
    EXPECT_EQ(after_b.at(name), std::vector<float>(after_b.at(name).size(), 0.0f)) << what << ": B leaves " << name
                                                                                  << " to W";
  }
  EXPECT_NE(after_b.at(kept_gain), std::vector<float>(after_b.at(kept_gain).size(), 0.0f))
      << what << ": B computes " << kept_gain;
  backward_input(1);
  deferred[0].Run(model->context());
  backward_input(2);
  deferred[1].Run(model->context());
  deferred[2].Run(model->context());
  for (const DeferredWeightGrads& d : deferred) EXPECT_TRUE(d.empty() && d.bytes() == 0) << what;
  AddGrads(*model, got);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, grad] : want) EXPECT_EQ(got.at(name), grad) << what << ": " << name;
  for (int m = 0; m < 3; ++m) EXPECT_EQ(got_dinput[m], want_dinput[m]) << what << ": input gradient " << m;
}

TEST(LanguageModelStages, SplitBackwardGivesTheBackwardsGradientsBitForBit) {
  ExpectSplitBackwardEqualsBackward("llama-like whole", LlamaLike(), {});
  ExpectSplitBackwardEqualsBackward("mixed blocks, first slice", Mixed(), {0, 2});
  ExpectSplitBackwardEqualsBackward("mixed blocks, middle slice", Mixed(), {1, 3});
  ExpectSplitBackwardEqualsBackward("mixed blocks, last slice", Mixed(), {2, 4});
  ExpectSplitBackwardEqualsBackward("gpt2-like tied whole (biases, learned positions)", Gpt2LikeTied(), {});
  ExpectSplitBackwardEqualsBackward("gpt2-like tied, head slice", Gpt2LikeTied(), {1, 3});
  ExpectSplitBackwardEqualsBackward("mixture of experts whole", MoeModel(), {});
  ModelConfig post = LlamaLike();
  post.norm_placement = NormPlacement::kPost;
  ExpectSplitBackwardEqualsBackward("post-norm whole", post, {});
}

// Noisy top-k gating in every layer: recomputation in a training forward draws the same noise (the mode is
// kept in the activations), so the gradients are bit for bit the unreleased forward's; the training loss is
// not the evaluation loss.
TEST(LanguageModelStages, RecomputedNoisyMoeLayersRepeatTheTrainingNoise) {
  ModelConfig c = LlamaLike();
  MoeSpec moe;
  moe.n_experts = 4, moe.top_k = 2, moe.d_expert = 16, moe.noisy_gating = true, moe.aux_loss = 0.01;
  c.moe = moe;
  const int64_t b = 2, t = 8, n = b * t;
  const std::vector<int32_t> ids = RandomIds(c, n, 7), targets = RandomIds(c, n, 8);
  std::unique_ptr<LanguageModel> model = Make(c);
  model->InitializeParameters(3);
  const ForwardMode training = ForwardMode::Training(/*seed=*/5, /*step=*/2, /*first_token=*/n);
  Grads want, got;
  Activations a = model->NewActivations();
  absl::StatusOr<double> trained = model->ForwardWithLoss(ids.data(), targets.data(), b, t, a, training);
  ASSERT_TRUE(trained.ok());
  model->Backward(a);
  AddGrads(*model, want);
  model->ZeroGrad();
  absl::StatusOr<double> evaluated = model->ForwardWithLoss(ids.data(), targets.data(), b, t, a);
  ASSERT_TRUE(evaluated.ok());
  EXPECT_NE(*trained, *evaluated) << "the training forward routes on noisy logits";
  ASSERT_TRUE(model->ForwardWithLoss(ids.data(), targets.data(), b, t, a, training).ok());
  for (int64_t layer : {1, 2}) a.ReleaseLayer(layer);
  for (int64_t layer : {1, 2}) model->RecomputeLayer(layer, a);
  model->Backward(a);
  AddGrads(*model, got);
  for (const auto& [name, grad] : want) EXPECT_EQ(got.at(name), grad) << name;
  EXPECT_GT(want.at("layers.2.ffn.router.noise.weight").size(), 0u);
}

TEST(LanguageModelStages, SlicesRefuseWhatTheyCannotDo) {
  const ModelConfig c = LlamaLike();
  for (LayerRange bad : {LayerRange{2, 2}, LayerRange{-1, 2}, LayerRange{3, 5}, LayerRange{4, -1}}) {
    absl::StatusOr<std::unique_ptr<LanguageModel>> model =
        LanguageModel::Create(c, kernels::Context::Cpu(), kernels::DType::kF32, bad);
    ASSERT_FALSE(model.ok()) << bad.first << ", " << bad.last;
    EXPECT_NE(std::string(model.status().message()).find("not a non-empty range of the model's n_layers=4"),
              std::string::npos)
        << model.status();
  }
  std::unique_ptr<LanguageModel> first = Make(c, {0, 2}), second = Make(c, {2, 4});
  const std::vector<int32_t> ids = RandomIds(c, 16, 1);
  Activations a = first->NewActivations(), s = second->NewActivations();
  absl::Status status = first->ForwardStage({2, 8, ids.data(), nullptr, ids.data()}, a);
  EXPECT_NE(std::string(status.message()).find("targets given to layers [0, 2), which has no LM head"),
            std::string::npos)
      << status;
  status = second->ForwardStage({2, 8, ids.data(), nullptr, nullptr}, s);
  EXPECT_NE(std::string(status.message()).find("layers [2, 4) reads hidden states; none given"), std::string::npos)
      << status;
  status = second->ForwardStage({2, 8, nullptr, nullptr, nullptr}, a);
  EXPECT_NE(std::string(status.message()).find("made by another model"), std::string::npos) << status;
  const absl::StatusOr<KvCache> cache = first->NewKvCache(2);
  ASSERT_FALSE(cache.ok());
  EXPECT_NE(std::string(cache.status().message()).find("decoding needs the whole model"), std::string::npos)
      << cache.status();
}

// The backward reports each part as it finishes it (head, blocks last to first, embeddings), and the parts
// hold every parameter once.
TEST(BackwardProgress, PartsInOrderAndEveryParameterOnce) {
  for (const ModelConfig& c : {LlamaLike(), Gpt2LikeTied()}) {
    std::unique_ptr<LanguageModel> m = Make(c);
    std::vector<std::string> order;
    std::map<std::string, int> seen;
    m->SetBackwardProgress([&](const LanguageModel::ModelPart& part) {
      order.push_back(part.kind == LanguageModel::ModelPart::kHead    ? "head"
                      : part.kind == LanguageModel::ModelPart::kBlock ? std::to_string(part.layer)
                                                                       : "embedding");
      m->VisitPartParameters(part, [&](const std::string& name, const Parameter&) { ++seen[name]; });
    });
    const std::vector<int32_t> ids = RandomIds(c, 2 * 5, 1), targets = RandomIds(c, 2 * 5, 2);
    ASSERT_TRUE(m->ForwardWithLoss(ids.data(), targets.data(), 2, 5).ok());
    m->Backward();
    std::vector<std::string> want = {"head"};
    for (int64_t i = c.n_layers; i-- > 0;) want.push_back(std::to_string(i));
    want.push_back("embedding");
    EXPECT_EQ(order, want);
    int params = 0;
    m->VisitParameters([&](const std::string& name, const Parameter&) {
      ++params;
      EXPECT_EQ(seen[name], 1) << name;
    });
    EXPECT_EQ(static_cast<int>(seen.size()), params);
  }
}

}  // namespace
}  // namespace lmf::model
