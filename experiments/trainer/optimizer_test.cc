// The trainer's optimizer is model/optimizer's AdamW (checked against torch.optim.AdamW with clip_grad_norm_
// on PyTorch fixtures) configured from the experiment's optimizer message: three clipped steps equal those of
// the model's AdamW with the same settings, bit for bit, and decay_vectors reaches it (norm gains move by the
// decay). Also: gradient accumulation's mean is folded into the step exactly, the state round-trips through
// safetensors (through host copies, the path every device takes), and a non-finite gradient changes nothing.
#include "experiments/trainer/optimizer.h"

#include <cmath>
#include <random>
#include <cstring>
#include <vector>

#include "experiments/checkpoint/safetensors.h"
#include "gtest/gtest.h"
#include "model/config/config.h"
#include "model/optimizer/adamw.h"

namespace lmf::experiments {
namespace {

std::unique_ptr<model::LanguageModel> Make() {
  model::ModelConfig config = model::Cs336Config(67, 16, 32, 2, 4, 88);
  config.n_kv_heads = 2;
  auto m = model::LanguageModel::Create(config, kernels::Context::Cpu());
  EXPECT_TRUE(m.ok()) << m.status();
  (*m)->InitializeParameters(3);
  return *std::move(m);
}

config::OptimizerConfig Config() {
  config::OptimizerConfig c;
  c.set_lr(1e-2);
  c.mutable_adamw()->set_beta1(0.9);
  c.mutable_adamw()->set_beta2(0.95);
  c.mutable_adamw()->set_eps(1e-8);
  c.mutable_adamw()->set_weight_decay(0.1);
  c.mutable_adamw()->set_decay_vectors(false);
  c.set_grad_clip(0.5);
  return c;
}

void Batch(std::vector<int32_t>* ids, std::vector<int32_t>* targets) {
  std::mt19937 rng(17);
  ids->resize(2 * 16);
  targets->resize(2 * 16);
  for (auto& x : *ids) x = rng() % 67;
  for (auto& x : *targets) x = rng() % 67;
}

// Three steps of the trainer's optimizer and of model::AdamW set up by hand from the same weights and batch;
// decay_vectors picks the weight-decay groups (false: matrices only, nanoGPT's; true: every parameter,
// torch's single group).
std::vector<float> ExpectEqualsTheModelsAdamW(bool decay_vectors) {
  auto ours = Make();
  auto theirs = Make();
  std::vector<int32_t> ids, targets;
  Batch(&ids, &targets);
  config::OptimizerConfig config = Config();
  config.mutable_adamw()->set_decay_vectors(decay_vectors);
  ModelOptimizer optimizer(config, *ours);
  model::AdamWConfig reference_config;
  reference_config.beta1 = 0.9;
  reference_config.beta2 = 0.95;
  reference_config.eps = 1e-8;
  reference_config.weight_decay = 0.1;
  reference_config.decay_vectors = decay_vectors;
  reference_config.max_grad_norm = 0.5;
  model::AdamW reference(reference_config, *theirs);
  for (int step = 0; step < 3; ++step) {
    ours->ZeroGrad();
    EXPECT_TRUE(ours->ForwardWithLoss(ids.data(), targets.data(), 2, 16).ok());
    ours->Backward();
    const double norm = optimizer.Step(*ours, 1e-2);
    auto result = model::TrainStep(*theirs, reference, ids.data(), targets.data(), 2, 16, 1e-2);
    EXPECT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(norm, result->grad_norm) << step;
  }
  EXPECT_EQ(optimizer.step(), 3);
  std::vector<std::pair<std::string, const float*>> a;
  ours->VisitParameters([&](const std::string& name, const model::Parameter& p) { a.push_back({name, p.data()}); });
  size_t i = 0;
  std::vector<float> gain;  // layers.0.ln1.weight after the steps
  theirs->VisitParameters([&](const std::string& name, const model::Parameter& p) {
    EXPECT_EQ(a[i].first, name);
    EXPECT_EQ(std::memcmp(a[i].second, p.data(), p.value.nbytes()), 0) << name;
    if (name == "layers.0.ln1.weight") gain.assign(p.data(), p.data() + p.value.numel());
    ++i;
  });
  return gain;
}

TEST(ModelOptimizer, EqualsTheModelsTorchCheckedAdamW) { ExpectEqualsTheModelsAdamW(/*decay_vectors=*/false); }

// With decay_vectors, the norm gains are decayed too: at lr 1e-2 and weight decay 0.1 a gain of 1 moves by
// about 1e-3 per step, so a flag that does not reach the optimizer leaves them where the other run has them.
TEST(ModelOptimizer, DecayVectorsDecaysNormGains) {
  const std::vector<float> kept = ExpectEqualsTheModelsAdamW(/*decay_vectors=*/false);
  const std::vector<float> decayed = ExpectEqualsTheModelsAdamW(/*decay_vectors=*/true);
  ASSERT_EQ(kept.size(), decayed.size());
  ASSERT_FALSE(kept.empty());
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_GT(std::fabs(kept[i] - decayed[i]), 1e-4) << i;
}

std::vector<float> AllWeights(const model::LanguageModel& model) {
  std::vector<float> out;
  model.VisitParameters([&](const std::string&, const model::Parameter& p) {
    out.insert(out.end(), p.data(), p.data() + p.value.numel());
  });
  return out;
}

TEST(ModelOptimizer, AccumulatedSumOfTwoMicroBatchesStepsLikeTheirMean) {
  // The same batch twice accumulates 2g; Step(.., 2) must then step like Step(.., 1) on g: the same norm
  // and the same weights. Not bit for bit: the second backward's GEMMs add into the first's gradients inside
  // their K loop, which rounds differently from g + g, so allow a few fp32 ulps (relative 1e-6 on the norm,
  // 1e-6 absolute on weights of size ~1).
  auto once = Make();
  auto twice = Make();
  std::vector<int32_t> ids, targets;
  Batch(&ids, &targets);
  ModelOptimizer a(Config(), *once), b(Config(), *twice);
  for (int step = 0; step < 2; ++step) {
    once->ZeroGrad();
    ASSERT_TRUE(once->ForwardWithLoss(ids.data(), targets.data(), 2, 16).ok());
    once->Backward();
    twice->ZeroGrad();
    for (int micro = 0; micro < 2; ++micro) {
      ASSERT_TRUE(twice->ForwardWithLoss(ids.data(), targets.data(), 2, 16).ok());
      twice->Backward();
    }
    const double norm_once = a.Step(*once, 1e-2, 1);
    EXPECT_NEAR(b.Step(*twice, 1e-2, 2), norm_once, 1e-6 * norm_once) << step;
  }
  const std::vector<float> wa = AllWeights(*once), wb = AllWeights(*twice);
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i) ASSERT_NEAR(wa[i], wb[i], 1e-6) << i;
}

TEST(ModelOptimizer, StateRoundTripsThroughSafetensors) {
  auto model = Make();
  std::vector<int32_t> ids, targets;
  Batch(&ids, &targets);
  ModelOptimizer optimizer(Config(), *model);
  model->ZeroGrad();
  ASSERT_TRUE(model->ForwardWithLoss(ids.data(), targets.data(), 2, 16).ok());
  model->Backward();
  optimizer.Step(*model, 1e-2);
  SafetensorsWriter writer;
  const HostTensors state = optimizer.StateTensors();
  for (const NamedTensor& t : state.tensors) writer.AddF32(t.name, t.shape, t.data);
  EXPECT_EQ(state.tensors.size(), 2u * 21);  // exp_avg and exp_avg_sq of 21 parameters
  auto reader = SafetensorsReader::FromBytes(writer.Serialize(), "optimizer.safetensors");
  ASSERT_TRUE(reader.ok());
  ModelOptimizer restored(Config(), *model);
  ASSERT_TRUE(restored.Restore(*reader, 1).ok());
  EXPECT_EQ(restored.step(), 1);
  const HostTensors restored_state = restored.StateTensors();
  ASSERT_EQ(restored_state.tensors.size(), state.tensors.size());
  for (const NamedTensor& t : restored_state.tensors) {
    auto saved = reader->ReadFloat(t.name);
    ASSERT_TRUE(saved.ok());
    EXPECT_EQ(std::memcmp(saved->data(), t.data, saved->size() * 4), 0) << t.name;
  }
  auto partial = SafetensorsReader::FromBytes(SafetensorsWriter().Serialize(), "empty.safetensors");
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(restored.Restore(*partial, 1).message(), "empty.safetensors: no tensor named \"layers.0.attn.k_proj.weight.exp_avg\"");
}

TEST(ModelOptimizer, NonFiniteGradientChangesNothing) {
  auto model = Make();
  ModelOptimizer optimizer(Config(), *model);
  model->ZeroGrad();
  std::vector<float> before;
  model->VisitParameters([&](const std::string&, const model::Parameter& p) {
    before.insert(before.end(), p.data(), p.data() + p.value.numel());
  });
  bool first = true;
  model->VisitParameters([&](const std::string&, const model::Parameter& p) {
    if (first) p.grad_data()[0] = NAN;
    first = false;
  });
  EXPECT_TRUE(std::isnan(optimizer.Step(*model, 1e-2)));
  EXPECT_EQ(optimizer.step(), 0);
  size_t k = 0;
  model->VisitParameters([&](const std::string&, const model::Parameter& p) {
    for (int64_t j = 0; j < p.value.numel(); ++j, ++k) ASSERT_EQ(p.data()[j], before[k]);
  });
}

}  // namespace
}  // namespace lmf::experiments
