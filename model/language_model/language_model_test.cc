// Whole-model tests of LanguageModel:
// - for a tiny config of each reference architecture (and one with the remaining options: ReLU,
//   sinusoidal positions, multi-query attention, biases with RMSNorm; the post-norm, double-norm and
//   parallel block structures; the z-loss; QK-norm with RMSNorm and LayerNorm; a sliding window; attention
//   logit soft-capping; blocks that differ: a windowed GQA layer with SwiGLU and a global MQA layer with
//   QK-norm, soft-cap and GELU of another width, through the layer interfaces), the logits, the loss (and
//   z-loss term) and every parameter gradient match PyTorch
//   (fixtures from tools/model/reference.py);
// - the accounting formulas equal what a built model holds and runs;
// - bad batches are rejected with a message; initialisation follows each scheme; gradients accumulate.
#include "model/language_model/language_model.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/core/dispatch.h"
#include "model/accounting/accounting.h"
#include "kernels/testing/npz.h"
#include "model/testing/fixture.h"
#include "model/testing/moe_fixture.h"
#include "model/testing/poisoning_allocator.h"

namespace lmf::model {
namespace {

using kernels::testing::NpyArray;

using testing::FixturePath;
using testing::ReadFixture;

// The fixture's config (tools/model/reference.py's dict, as JSON) as a ModelConfig. Absent keys keep their
// defaults (the first fixtures predate some fields).
ModelConfig ConfigFromFixture(const std::string& text) {
  const absl::StatusOr<JsonValue> json = ParseJson(text);
  EXPECT_TRUE(json.ok()) << json.status();
  if (!json.ok()) return ModelConfig();
  const auto field = [](const JsonValue& object, const char* key) -> const JsonValue* { return object.Find(key); };
  const auto num = [&](const JsonValue& object, const char* key) {
    double value = 0;
    const JsonValue* v = field(object, key);
    if (v != nullptr) {
      EXPECT_TRUE(v->AsDouble(&value)) << key;
    }
    return value;
  };
  const auto str = [&](const JsonValue& object, const char* key) {
    const JsonValue* v = field(object, key);
    return v != nullptr ? v->text : std::string();
  };
  const auto flag = [&](const JsonValue& object, const char* key) {
    const JsonValue* v = field(object, key);
    return v != nullptr && v->boolean;
  };
  const JsonValue& j = *json;
  ModelConfig c;
  c.vocab_size = static_cast<int64_t>(num(j, "vocab_size"));
  c.context_length = static_cast<int64_t>(num(j, "context_length"));
  c.d_model = static_cast<int64_t>(num(j, "d_model"));
  c.n_layers = static_cast<int64_t>(num(j, "n_layers"));
  c.n_heads = static_cast<int64_t>(num(j, "n_heads"));
  c.n_kv_heads = static_cast<int64_t>(num(j, "n_kv_heads"));
  c.d_ff = static_cast<int64_t>(num(j, "d_ff"));
  c.norm_eps = num(j, "norm_eps");
  c.rope_theta = num(j, "rope_theta");
  c.norm = str(j, "norm") == "layernorm" ? NormKind::kLayerNorm : NormKind::kRMSNorm;
  c.ffn = testing::FfnKindFromName(str(j, "ffn"));
  const std::string pos = str(j, "positions");
  c.positions = pos == "rope"         ? PositionKind::kRoPE
                : pos == "learned"    ? PositionKind::kLearned
                : pos == "sinusoidal" ? PositionKind::kSinusoidal
                                      : PositionKind::kNone;
  const std::string placement = str(j, "norm_placement");  // absent in the first fixtures: pre
  c.norm_placement = placement == "post"     ? NormPlacement::kPost
                     : placement == "double" ? NormPlacement::kDouble
                                             : NormPlacement::kPre;
  c.parallel_block = flag(j, "parallel_block");
  c.parallel_shared_norm = flag(j, "parallel_shared_norm");
  c.z_loss = num(j, "z_loss");
  c.qk_norm = flag(j, "qk_norm");
  c.sliding_window = static_cast<int64_t>(num(j, "sliding_window"));
  c.attention_softcap = num(j, "attention_softcap");
  c.global_every = static_cast<int64_t>(num(j, "global_every"));
  c.final_logit_softcap = num(j, "final_logit_softcap");
  c.biases = flag(j, "biases");
  c.tied_embeddings = flag(j, "tied_embeddings");
  if (const JsonValue* moe = field(j, "moe"); moe != nullptr) {
    c.moe = testing::MoeSpecFromJson(*moe);
    c.first_k_dense = static_cast<int64_t>(num(j, "first_k_dense"));
  }
  if (const JsonValue* pattern = field(j, "layer_pattern"); pattern != nullptr) {
    for (const JsonValue& layer : pattern->array) {
      LayerSpec spec;
      AttentionSpec& a = spec.token_mixer.attention;
      a.n_heads = static_cast<int64_t>(num(layer, "n_heads"));
      a.n_kv_heads = static_cast<int64_t>(num(layer, "n_kv_heads"));
      a.window = static_cast<int64_t>(num(layer, "sliding_window"));
      a.softcap = num(layer, "attention_softcap");
      a.qk_norm = flag(layer, "qk_norm");
      spec.channel_mixer.feed_forward = {testing::FfnKindFromName(str(layer, "ffn")), static_cast<int64_t>(num(layer, "d_ff"))};
      c.layer_pattern.push_back(spec);
    }
  }
  return c;
}

struct Fixture {
  std::map<std::string, NpyArray> arrays;
  ModelConfig config;
  std::vector<int32_t> ids, targets;
  int64_t b = 0, t = 0;
};

Fixture LoadFixture(const std::string& name) {
  Fixture f;
  absl::StatusOr<std::map<std::string, NpyArray>> arrays = ReadFixture(FixturePath(name));
  EXPECT_TRUE(arrays.ok()) << arrays.status();
  if (!arrays.ok()) return f;
  f.arrays = std::move(*arrays);
  f.config = ConfigFromFixture(f.arrays.at("config_json").bytes);
  f.ids = f.arrays.at("ids").ToInt32();
  f.targets = f.arrays.at("targets").ToInt32();
  f.b = f.arrays.at("ids").shape[0];
  f.t = f.arrays.at("ids").shape[1];
  return f;
}

// Loads every "param/<name>" into the model; fails the test on a name or shape mismatch either way.
void LoadParameters(const Fixture& f, LanguageModel& model) {
  std::set<std::string> visited;
  model.VisitParameters([&](const std::string& name, const Parameter& p) {
    visited.insert(name);
    auto it = f.arrays.find("param/" + name);
    ASSERT_NE(it, f.arrays.end()) << "the fixture has no parameter " << name;
    ASSERT_EQ(it->second.numel(), p.value.numel()) << name;
    ASSERT_EQ(static_cast<int>(it->second.shape.size()), p.value.rank()) << name;
    for (int d = 0; d < p.value.rank(); ++d) ASSERT_EQ(it->second.shape[d], p.value.dim(d)) << name;
    const std::vector<float> values = it->second.ToFloat();
    std::copy(values.begin(), values.end(), p.data());
  });
  for (const auto& [key, array] : f.arrays) {
    if (key.rfind("param/", 0) == 0) {
      EXPECT_TRUE(visited.count(key.substr(6))) << "model lacks " << key;
    }
  }
}

// Tolerance: the reference is exact float64 (weights are float32 values); ours is fp32 with sums of at
// most a few hundred terms per element, a 2-ulp vectorised exp and float accumulation over 16 tokens for
// the weight gradients. Its error is a few float32 ulps of the tensor's scale, so we allow 2e-5 of the
// tensor's largest magnitude (~170 ulps at that scale); a wrong formula, sign, index or scale anywhere
// gives errors of 1e-2 of the scale or more.
constexpr double kRelativeToScale = 2e-5;

// `floor_scale` covers tensors whose exact value is ~0 (the key bias gradient: softmax ignores a constant
// added to every key score); their rounding error is set by the scale of the gradients around them, so
// the whole-model check floors the scale at 1% of the largest gradient (every nonzero gradient tensor in
// the fixtures is above 2% of it, so this loosens nothing else).
void ExpectClose(const std::string& what, const float* got, const std::vector<float>& want,
                 double floor_scale = 0) {
  double scale = floor_scale, worst = 0;
  int64_t worst_at = 0;
  for (size_t i = 0; i < want.size(); ++i) scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (err > worst) {
      worst = err;
      worst_at = static_cast<int64_t>(i);
    }
  }
  EXPECT_LE(worst, kRelativeToScale * scale + 1e-30)
      << what << ": max abs error " << worst << " at " << worst_at << " (got " << got[worst_at] << ", want "
      << want[worst_at] << "), scale " << scale;
}

double LargestGradient(const Fixture& f) {
  double largest = 0;
  for (const auto& [key, array] : f.arrays) {
    if (key.rfind("grad/", 0) != 0) continue;
    for (float g : array.ToFloat()) largest = std::max(largest, std::fabs(double{g}));
  }
  return largest;
}

// Every whole-model fixture of tools/model/reference.py: the reference architectures, the remaining
// options, and the block structures (post-norm, double norm, parallel).
const std::vector<std::string> kFixtures = {
    "gpt2_tiny",          "llama_tiny",           "variants_tiny", "post_tiny",
    "double_tiny",        "parallel_tiny",        "zloss_tiny",    "qknorm_tiny",
    "qknorm_ln_tiny",     "window_tiny",          "softcap_tiny",  "window_global_tiny",
    "final_softcap_tiny", "parallel_shared_tiny", "geglu_tiny",   "mixed_tiny",
    "moe_tiny",           "moe_sigmoid_tiny",
};

class PyTorchMatchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PyTorchMatchTest, LogitsLossAndEveryGradientMatchPyTorch) {
  const Fixture f = LoadFixture(GetParam());
  ASSERT_FALSE(f.arrays.empty());
  auto model = LanguageModel::Create(f.config, kernels::Context::Cpu());
  ASSERT_TRUE(model.ok()) << model.status();
  LoadParameters(f, **model);
  absl::StatusOr<double> loss = (*model)->ForwardWithLoss(f.ids.data(), f.targets.data(), f.b, f.t);
  ASSERT_TRUE(loss.ok()) << loss.status();
  ExpectClose("logits", (*model)->logits(), f.arrays.at("logits").ToFloat());
  const double want_loss = f.arrays.at("loss").ToDouble()[0];
  // The loss is a mean of B*T fp32 log-sum-exps of magnitude ~5: a few ulps of that.
  EXPECT_NEAR(*loss, want_loss, 1e-5 * std::fabs(want_loss)) << "loss";
  // The z-loss term (zloss_tiny): mean z * lse^2 from fp32 lse values, a few ulps of each.
  const auto z_term = f.arrays.find("z_term");
  const double want_z = z_term == f.arrays.end() ? 0.0 : z_term->second.ToDouble()[0];
  EXPECT_NEAR((*model)->z_loss_term(), want_z, 1e-5 * want_z) << "z-loss term";
  // The mixture-of-experts layers' auxiliary losses (moe_*): sums of fp32 router probabilities and lse
  // values, a few ulps of each; part of the objective whose gradients are checked below.
  const auto aux = f.arrays.find("aux_loss");
  const double want_aux = aux == f.arrays.end() ? 0.0 : aux->second.ToDouble()[0];
  EXPECT_NEAR((*model)->aux_loss(), want_aux, 1e-5 * want_aux) << "auxiliary losses";
  if (f.config.moe.has_value()) {
    EXPECT_GT(want_aux, 0) << "the MoE fixture should exercise its losses";
  }
  (*model)->ZeroGrad();
  (*model)->Backward();
  const double largest_gradient = LargestGradient(f);
  int checked = 0;
  (*model)->VisitParameters([&](const std::string& name, const Parameter& p) {
    ExpectClose("grad of " + name, p.grad_data(), f.arrays.at("grad/" + name).ToFloat(),
                1e-2 * largest_gradient);
    ++checked;
  });
  EXPECT_GT(checked, 10);
}

INSTANTIATE_TEST_SUITE_P(TinyConfigs, PyTorchMatchTest, ::testing::ValuesIn(kFixtures));

TEST(LanguageModelTest, AccountingEqualsWhatTheModelHoldsAndRuns) {
  for (const std::string& name : kFixtures) {
    const Fixture f = LoadFixture(name);
    auto model = LanguageModel::Create(f.config, kernels::Context::Cpu());
    ASSERT_TRUE(model.ok());
    EXPECT_EQ((*model)->parameter_count(), CountParameters(f.config).total()) << name;
    int64_t fixture_params = 0;
    for (const auto& [key, array] : f.arrays) {
      if (key.rfind("param/", 0) == 0) fixture_params += array.numel();
    }
    EXPECT_EQ(fixture_params, CountParameters(f.config).total()) << name << " (PyTorch's count)";
    (*model)->InitializeParameters(7);
    (*model)->ResetCounters();
    ASSERT_TRUE((*model)->ForwardWithLoss(f.ids.data(), f.targets.data(), f.b, f.t).ok());
    const double tokens = static_cast<double>(f.b * f.t);
    EXPECT_EQ((*model)->saved_activation_bytes(), CountActivationBytesPerToken(f.config).total() * f.b * f.t)
        << name;
    (*model)->Backward();
    const FlopsPerToken per_token = CountFlopsPerToken(f.config, f.t);
    EXPECT_DOUBLE_EQ((*model)->counters().matmul_flops, 3 * per_token.matmul_forward * tokens) << name;
    EXPECT_DOUBLE_EQ((*model)->counters().attention_flops, 3 * per_token.attention_forward * tokens) << name;
  }
}

// A model whose embedding and LM head carry extra padding rows computes the same loss, the same logits
// for the real vocabulary and the same gradients as the unpadded one; padding rows get no gradient.
TEST(LanguageModelTest, PaddedVocabularyMatchesPyTorchAndLeavesPaddingUntouched) {
  for (const std::string name : {"gpt2_tiny", "llama_tiny"}) {  // tied and untied heads
    const Fixture f = LoadFixture(name);
    ModelConfig padded = f.config;
    const int64_t v = f.config.vocab_size, rows = v + 5, c = f.config.d_model;
    padded.padded_vocab_size = rows;
    auto model = LanguageModel::Create(padded, kernels::Context::Cpu());
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->parameter_count(), CountParameters(padded).total());
    (*model)->VisitParameters([&](const std::string& pname, const Parameter& p) {
      const std::vector<float> values = f.arrays.at("param/" + pname).ToFloat();
      if (p.value.numel() == static_cast<int64_t>(values.size())) {
        std::copy(values.begin(), values.end(), p.data());
        return;
      }
      ASSERT_EQ(p.value.dim(0), rows) << pname;  // the token table or the LM head: real rows, then padding
      std::copy(values.begin(), values.end(), p.data());
      for (int64_t i = v * c; i < rows * c; ++i) p.data()[i] = 0.25f * static_cast<float>((i % 7) - 3);
    });
    auto loss = (*model)->ForwardWithLoss(f.ids.data(), f.targets.data(), f.b, f.t);
    ASSERT_TRUE(loss.ok()) << loss.status();
    const double want_loss = f.arrays.at("loss").ToDouble()[0];
    EXPECT_NEAR(*loss, want_loss, 1e-5 * want_loss) << name;
    const std::vector<float> want_logits = f.arrays.at("logits").ToFloat();
    std::vector<float> real_logits;
    for (int64_t r = 0; r < f.b * f.t; ++r) {
      real_logits.insert(real_logits.end(), (*model)->logits() + r * rows, (*model)->logits() + r * rows + v);
    }
    ExpectClose(name + " logits of the real vocabulary", real_logits.data(), want_logits);
    EXPECT_EQ((*model)->saved_activation_bytes(), CountActivationBytesPerToken(padded).total() * f.b * f.t);
    (*model)->ZeroGrad();
    (*model)->Backward();
    const double largest_gradient = LargestGradient(f);
    (*model)->VisitParameters([&](const std::string& pname, const Parameter& p) {
      const std::vector<float> want = f.arrays.at("grad/" + pname).ToFloat();
      ExpectClose(name + " grad of " + pname, p.grad_data(), want, 1e-2 * largest_gradient);
      for (int64_t i = static_cast<int64_t>(want.size()); i < p.grad.numel(); ++i) {
        ASSERT_EQ(p.grad_data()[i], 0.0f) << name << " " << pname << " padding element " << i;
      }
    });
  }
}

TEST(LanguageModelTest, CreateRejectsAnImpossibleConfig) {
  ModelConfig c = Gpt2Config(100, 16, 30, 2, 4);  // 4 heads do not divide 30
  auto model = LanguageModel::Create(c, kernels::Context::Cpu());
  ASSERT_FALSE(model.ok());
  EXPECT_NE(std::string(model.status().message()).find("n_heads=4 does not divide d_model=30"), std::string::npos);
}

TEST(LanguageModelTest, CreateRejectsPrecisionsTheCpuCannotRun) {
  const ModelConfig c = Gpt2Config(50, 8, 16, 1, 2);
  EXPECT_TRUE(LanguageModel::Create(c, kernels::Context::Cpu(), kernels::DType::kBF16).ok());  // dense: yes
  ModelConfig moe = c;  // the mixture of experts has no bf16 CPU path
  moe.moe = MoeSpec{};
  moe.moe->n_experts = 4, moe.moe->top_k = 2, moe.moe->d_expert = 8;
  ASSERT_TRUE(moe.Validate().ok()) << moe.Validate();
  auto bf16 = LanguageModel::Create(moe, kernels::Context::Cpu(), kernels::DType::kBF16);
  ASSERT_FALSE(bf16.ok());
  EXPECT_EQ(bf16.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bf16.status().message()).find("set run.precision=FP32"), std::string::npos)
      << bf16.status();
  auto f16 = LanguageModel::Create(c, kernels::Context::Cpu(), kernels::DType::kF16);
  ASSERT_FALSE(f16.ok());
  EXPECT_NE(std::string(f16.status().message()).find("activation dtype F16 is not supported"), std::string::npos)
      << f16.status();
  kernels::Context no_pool = kernels::Context::Cpu();
  no_pool.pool = nullptr;
  auto pool = LanguageModel::Create(c, no_pool);
  ASSERT_FALSE(pool.ok());
  EXPECT_NE(std::string(pool.status().message()).find("needs a thread pool"), std::string::npos) << pool.status();
}

// An allocator that claims to be on CUDA device 0 and must never be asked for memory: Create rejects the
// configs below before building anything.
class UnusableCudaAllocator final : public kernels::Allocator {
 public:
  void* Allocate(size_t) override {
    ADD_FAILURE() << "Create allocated memory for a model it should have rejected";
    std::abort();
  }
  void Deallocate(void*, size_t) override {}
  kernels::Device device() const override { return kernels::Device::Cuda(0); }
};

// Without a device: a CUDA context whose backend cannot run the model (a build without CUDA, or a kernel
// not yet moved into kernels/) is rejected naming the op; where the backend runs the ops, head sizes the
// CUDA attention lacks are rejected naming the head size (bf16: 64 and 128 only).
TEST(LanguageModelTest, CreateChecksTheCudaBackendBeforeBuilding) {
  UnusableCudaAllocator allocator;
  kernels::Context cuda;
  cuda.device = kernels::Device::Cuda(0);
  cuda.allocator = &allocator;
  ModelConfig c = Cs336Config(64, 16, 128, 1, 4, 96);  // head size 32
  auto model = LanguageModel::Create(c, cuda, kernels::DType::kBF16);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  bool all_ops = true;
  for (const char* op : {"embedding", "matmul", "attention", "residual", "cross_entropy", "rmsnorm", "swiglu",
                         "rope"}) {
    all_ops = all_ops && kernels::BackendSupports(op, cuda.device, kernels::DType::kBF16);
  }
  const std::string message(model.status().message());
  if (all_ops) {
    EXPECT_NE(message.find("head size 32"), std::string::npos) << message;
  } else {
    EXPECT_NE(message.find("no backend in this binary runs op"), std::string::npos) << message;
    EXPECT_NE(message.find("cuda:0 with BF16"), std::string::npos) << message;
  }
}

// For f32 activations the compute copy is the master weights' memory, so RefreshComputeWeights changes
// nothing and writing `value` (as loading and the optimizer do) is all a CPU model needs.
TEST(LanguageModelTest, F32ComputeWeightsAliasTheMasterWeights) {
  const Fixture f = LoadFixture("llama_tiny");
  auto model = LanguageModel::Create(f.config, kernels::Context::Cpu());
  ASSERT_TRUE(model.ok());
  EXPECT_TRUE((*model)->context().device.is_cpu());
  EXPECT_EQ((*model)->activation_dtype(), kernels::DType::kF32);
  (*model)->InitializeParameters(5);
  std::vector<std::vector<float>> before;
  (*model)->VisitParameters([&](const std::string& name, const Parameter& p) {
    EXPECT_EQ(p.compute.dtype(), kernels::DType::kF32) << name;
    EXPECT_EQ(p.compute.data(), p.value.data()) << name;
    EXPECT_EQ(p.compute.shape(), p.value.shape()) << name;
    before.emplace_back(p.data(), p.data() + p.value.numel());
  });
  auto loss_before = (*model)->ForwardWithLoss(f.ids.data(), f.targets.data(), f.b, f.t);
  (*model)->RefreshComputeWeights();
  size_t i = 0;
  (*model)->VisitParameters([&](const std::string& name, const Parameter& p) {
    EXPECT_EQ(std::vector<float>(p.data(), p.data() + p.value.numel()), before[i++]) << name;
  });
  auto loss_after = (*model)->ForwardWithLoss(f.ids.data(), f.targets.data(), f.b, f.t);
  ASSERT_TRUE(loss_before.ok() && loss_after.ok());
  EXPECT_EQ(*loss_before, *loss_after);
  EXPECT_EQ((*model)->logits_tensor().data(), static_cast<const void*>((*model)->logits()));
}

TEST(LanguageModelTest, ForwardRejectsBadBatches) {
  auto model = LanguageModel::Create(Gpt2Config(50, 8, 16, 1, 2), kernels::Context::Cpu());
  ASSERT_TRUE(model.ok());
  std::vector<int32_t> ids(2 * 9, 1), targets(2 * 9, 1);
  absl::Status too_long = (*model)->Forward(ids.data(), 2, 9);
  EXPECT_NE(std::string(too_long.message()).find("sequence length 9 is longer than context_length=8"),
            std::string::npos)
      << too_long;
  ids[5] = 50;
  absl::Status bad_id = (*model)->Forward(ids.data(), 2, 8);
  EXPECT_NE(std::string(bad_id.message()).find("ids[0, 5] = 50 is outside the vocabulary [0, 50)"),
            std::string::npos)
      << bad_id;
  ids[5] = 3;
  targets[9] = -1;
  absl::StatusOr<double> bad_target = (*model)->ForwardWithLoss(ids.data(), targets.data(), 2, 8);
  ASSERT_FALSE(bad_target.ok());
  EXPECT_NE(std::string(bad_target.status().message()).find("targets[1, 1] = -1"), std::string::npos);
}

TEST(LanguageModelTest, ParameterGradientsAccumulateAcrossBackwardCalls) {
  const Fixture f = LoadFixture("llama_tiny");
  auto model = LanguageModel::Create(f.config, kernels::Context::Cpu());
  ASSERT_TRUE(model.ok());
  LoadParameters(f, **model);
  (*model)->ZeroGrad();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE((*model)->ForwardWithLoss(f.ids.data(), f.targets.data(), f.b, f.t).ok());
    (*model)->Backward();
  }
  (*model)->VisitParameters([&](const std::string& name, const Parameter& p) {
    std::vector<float> twice = f.arrays.at("grad/" + name).ToFloat();
    for (float& g : twice) g *= 2;
    ExpectClose("twice the grad of " + name, p.grad_data(), twice);
  });
}

TEST(LanguageModelTest, ThreadCountDoesNotChangeTheResult) {
  const Fixture f = LoadFixture("variants_tiny");
  std::vector<std::vector<float>> grads[2];
  double losses[2];
  for (int run = 0; run < 2; ++run) {
    ThreadPool pool(run == 0 ? 1 : 3);
    auto model = LanguageModel::Create(f.config, kernels::Context::Cpu(&pool));
    ASSERT_TRUE(model.ok());
    LoadParameters(f, **model);
    auto loss = (*model)->ForwardWithLoss(f.ids.data(), f.targets.data(), f.b, f.t);
    ASSERT_TRUE(loss.ok());
    losses[run] = *loss;
    (*model)->ZeroGrad();
    (*model)->Backward();
    (*model)->VisitParameters([&](const std::string&, const Parameter& p) {
      grads[run].emplace_back(p.grad_data(), p.grad_data() + p.grad.numel());
    });
  }
  // Work split differently over threads changes only summation order: a few ulps.
  EXPECT_NEAR(losses[0], losses[1], 1e-6 * std::fabs(losses[0]));
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) ExpectClose("gradient " + std::to_string(i), grads[1][i].data(), grads[0][i]);
}

// Nothing the model allocates (parameters, gradients, step state, workspace) is read before it is written:
// on poisoned memory it computes bit for bit what it computes on fresh memory, through two batch shapes
// (the second reallocates the step state) and two backwards (gradients accumulate onto ZeroGrad's zeros).
TEST(LanguageModelTest, NothingIsReadBeforeItIsWritten) {
  for (const std::string& name : kFixtures) {
    SCOPED_TRACE(name);
    const Fixture f = LoadFixture(name);
    testing::PoisoningAllocator poison;
    kernels::Context poisoned = kernels::Context::Cpu();
    poisoned.allocator = &poison;
    std::vector<double> losses[2];
    std::vector<std::vector<float>> results[2];
    for (int run = 0; run < 2; ++run) {
      auto model = LanguageModel::Create(f.config, run == 0 ? kernels::Context::Cpu() : poisoned);
      ASSERT_TRUE(model.ok());
      LoadParameters(f, **model);
      (*model)->ZeroGrad();
      for (const int64_t b : {f.b, int64_t{1}}) {  // the second shape: the first sequence alone
        auto loss = (*model)->ForwardWithLoss(f.ids.data(), f.targets.data(), b, f.t);
        ASSERT_TRUE(loss.ok());
        losses[run].push_back(*loss);
        results[run].emplace_back((*model)->logits(), (*model)->logits() + (*model)->logits_tensor().numel());
        (*model)->Backward();
      }
      (*model)->VisitParameters([&](const std::string&, const Parameter& p) {
        results[run].emplace_back(p.grad_data(), p.grad_data() + p.grad.numel());
      });
    }
    EXPECT_EQ(losses[0], losses[1]);
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i) {
      EXPECT_EQ(std::memcmp(results[0][i].data(), results[1][i].data(), results[0][i].size() * sizeof(float)), 0)
          << "tensor " << i << " (logits of the two shapes, then the gradients in visiting order)";
    }
  }
}

// Mean and standard deviation of a parameter, and its largest magnitude.
struct Moments {
  double mean = 0, std = 0, max_abs = 0;
};
Moments MomentsOf(const Parameter& p) {
  Moments m;
  const int64_t n = p.value.numel();
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum += p.data()[i];
    sq += static_cast<double>(p.data()[i]) * p.data()[i];
    m.max_abs = std::max(m.max_abs, std::fabs(static_cast<double>(p.data()[i])));
  }
  m.mean = sum / n;
  m.std = std::sqrt(sq / n - m.mean * m.mean);
  return m;
}

TEST(LanguageModelTest, Gpt2InitIsScaledNormal) {
  ModelConfig c = Gpt2Config(512, 64, 128, 8, 4);
  auto model = LanguageModel::Create(c, kernels::Context::Cpu());
  ASSERT_TRUE(model.ok());
  (*model)->InitializeParameters(3);
  (*model)->VisitParameters([&](const std::string& name, const Parameter& p) {
    const Moments m = MomentsOf(p);
    if (name.find(".bias") != std::string::npos) {
      EXPECT_EQ(m.max_abs, 0) << name;
    } else if (name.find("ln") != std::string::npos) {
      EXPECT_EQ(m.mean, 1) << name;
      EXPECT_EQ(m.std, 0) << name;
    } else {
      const bool residual = name.find("output_proj") != std::string::npos || name.find("w2") != std::string::npos;
      const double want = residual ? 0.02 / std::sqrt(16.0) : 0.02;
      // >= 16k draws: the sample std is within ~1% of the true one (3 sigma ~ 3/sqrt(2n)).
      EXPECT_NEAR(m.std, want, 0.03 * want) << name;
      EXPECT_NEAR(m.mean, 0, 0.03 * want) << name;
    }
  });
}

// Truncating N(0, s) at +-3s leaves a std of 0.98658 s.
constexpr double kTruncatedStd = 0.986604;

TEST(LanguageModelTest, Cs336InitIsTruncatedNormalAndSeeded) {
  ModelConfig c = Cs336Config(512, 64, 128, 2, 4, 256);
  auto model = LanguageModel::Create(c, kernels::Context::Cpu());
  ASSERT_TRUE(model.ok());
  (*model)->InitializeParameters(5);
  (*model)->VisitParameters([&](const std::string& name, const Parameter& p) {
    const Moments m = MomentsOf(p);
    if (name.find("ln") != std::string::npos) return;
    const double sigma =
        name.find("embeddings") != std::string::npos ? 1.0 : std::sqrt(2.0 / (p.value.dim(0) + p.value.dim(1)));
    EXPECT_LE(m.max_abs, 3 * sigma * (1 + 1e-6)) << name;
    EXPECT_NEAR(m.std, kTruncatedStd * sigma, 0.04 * sigma) << name;
  });
  // Same seed, same weights; another seed, other weights.
  auto again = LanguageModel::Create(c, kernels::Context::Cpu());
  ASSERT_TRUE(again.ok());
  (*again)->InitializeParameters(5);
  std::vector<float> first, second;
  (*model)->VisitParameters([&](const std::string&, const Parameter& p) { first.push_back(p.data()[7]); });
  (*again)->VisitParameters([&](const std::string&, const Parameter& p) { second.push_back(p.data()[7]); });
  EXPECT_EQ(first, second);
  (*again)->InitializeParameters(6);
  second.clear();
  (*again)->VisitParameters([&](const std::string&, const Parameter& p) { second.push_back(p.data()[7]); });
  EXPECT_NE(first, second);
}

// A tied token table is the LM head's matrix too: under TRUNCATED_NORMAL it is drawn as the head is (std
// sqrt(2 / (V + C))), not as an embedding (std 1), so the first loss is that of near-uniform logits, as with an
// untied head. With the embedding's std 1 the logits' std would be ~sqrt(C) = 8 here and the loss ~46.
TEST(LanguageModelTest, ATiedTableStartsAsTheLmHeadSoTheFirstLossIsNearLogV) {
  constexpr int64_t kVocab = 512, kC = 64, kB = 4, kT = 32;
  std::vector<int32_t> ids(kB * kT), targets(kB * kT);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 37 + 11) % kVocab);
    targets[i] = static_cast<int32_t>((i * 101 + 5) % kVocab);
  }
  for (const bool tied : {false, true}) {
    ModelConfig c = Cs336Config(kVocab, kT, kC, 2, 4, 128);
    c.tied_embeddings = tied;
    auto model = LanguageModel::Create(c, kernels::Context::Cpu());
    ASSERT_TRUE(model.ok()) << model.status();
    (*model)->InitializeParameters(5);
    (*model)->VisitParameters([&](const std::string& name, const Parameter& p) {
      if (name != "token_embeddings.weight") return;
      const double sigma = tied ? std::sqrt(2.0 / (kVocab + kC)) : 1.0;
      EXPECT_NEAR(MomentsOf(p).std, kTruncatedStd * sigma, 0.04 * sigma) << "tied=" << tied;
    });
    absl::StatusOr<double> loss = (*model)->ForwardWithLoss(ids.data(), targets.data(), kB, kT);
    ASSERT_TRUE(loss.ok()) << loss.status();
    // Logits of std s ~ 0.47 (a head of std 0.059 over a unit-RMS C=64 state): ln V + s^2 / 2 ~ 6.35.
    EXPECT_NEAR(*loss, std::log(static_cast<double>(kVocab)), 0.5) << "tied=" << tied;
  }
}

}  // namespace
}  // namespace lmf::model
