// Accounting: for several experiment configs (GPT-2 and Llama styles, GQA and MQA, tied and untied, GELU,
// SwiGLU and ReLU), the parameter count equals the parameters a built LanguageModel holds, the listed
// matmuls add up to model/accounting's exact count, and that count equals the FLOPs the model's own
// counters record over a forward and backward pass, and the activation memory is what it saves. Also
// memory (fp32 and bf16 runs) and MFU arithmetic.
#include "scaling/accounting/account.h"

#include <string>
#include <vector>

#include "config/loader.h"
#include "gtest/gtest.h"
#include "kernels/core/context.h"
#include "kernels/core/dtype.h"
#include "model/accounting/accounting.h"
#include "model/language_model/language_model.h"

namespace lmf::scaling {
namespace {

const char* kBase = R"pb(
  optimizer { lr: 1e-3 }
  data { train_tokens: "unused.tok" }
  run { batch_size: 2 max_steps: 10 output_dir: "unused" }
)pb";

struct Case {
  std::string name;
  std::string model;
};

std::vector<Case> Cases() {
  return {
      {"llama_gqa", R"pb(model { d_model: 64 n_layers: 2 n_heads: 4 n_kv_heads: 2 vocab_size: 97 context_length: 16
                               ffn { kind: SWIGLU d_ff: 96 } positional { kind: ROPE } })pb"},
      {"llama_mqa_tied", R"pb(model { d_model: 48 n_layers: 3 n_heads: 6 n_kv_heads: 1 vocab_size: 50
                                    context_length: 12 tied_embeddings: true ffn { kind: SWIGLU d_ff: 128 } })pb"},
      {"gpt2", R"pb(model { d_model: 32 n_layers: 2 n_heads: 4 vocab_size: 64 context_length: 8 bias: true
                          tied_embeddings: true norm { kind: LAYERNORM } ffn { kind: GELU d_ff: 128 }
                          positional { kind: LEARNED } init { scheme: GPT2 } })pb"},
      {"relu_sinusoidal", R"pb(model { d_model: 32 n_layers: 1 n_heads: 2 vocab_size: 40 context_length: 10
                                     ffn { kind: RELU d_ff: 64 } positional { kind: SINUSOIDAL } })pb"},
  };
}

absl::StatusOr<config::Experiment> Load(const Case& c) {
  return config::LoadExperimentText(std::string(kBase) + c.model, c.name, {});
}

TEST(Account, CountsEqualWhatABuiltModelHoldsAndRuns) {
  for (const Case& c : Cases()) {
    auto e = Load(c);
    ASSERT_TRUE(e.ok()) << e.status();
    auto a = AccountExperiment(*e);
    ASSERT_TRUE(a.ok()) << a.status();
    auto model = model::LanguageModel::Create(a->model, kernels::Context::Cpu());
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->parameter_count(), a->params.total()) << c.name;
    int64_t visited = 0;
    (*model)->VisitParameters([&](const std::string&, const model::Parameter& p) { visited += p.value.numel(); });
    EXPECT_EQ(visited, a->params.total()) << c.name;

    // The listed matmuls are the model's matmuls: their forward FLOPs per token are the exact count's.
    const int64_t b = e->run().batch_size(), t = a->seq_len;
    double listed = 0;
    for (const MatmulCost& m : a->matmuls) listed += m.flops() * m.count;
    EXPECT_DOUBLE_EQ(listed / static_cast<double>(b * t), a->exact.matmul_forward) << c.name;

    // A forward and backward pass over one micro-batch runs exactly the counted FLOPs.
    (*model)->InitializeParameters(3);
    std::vector<int32_t> ids(b * t), targets(b * t);
    for (int64_t i = 0; i < b * t; ++i) {
      ids[i] = static_cast<int32_t>((i * 7) % a->model.vocab_size);
      targets[i] = static_cast<int32_t>((i * 11 + 1) % a->model.vocab_size);
    }
    (*model)->ResetCounters();
    ASSERT_TRUE((*model)->ForwardWithLoss(ids.data(), targets.data(), b, t).ok());
    EXPECT_EQ(static_cast<double>((*model)->saved_activation_bytes()), a->memory.activations) << c.name;
    (*model)->Backward();
    const double tokens = static_cast<double>(b * t);
    EXPECT_DOUBLE_EQ((*model)->counters().matmul_flops + (*model)->counters().attention_flops,
                     a->exact.training() * tokens)
        << c.name;
  }
}

TEST(Account, SixNAndTotalsAndMemory) {
  auto e = Load(Cases()[0]);
  ASSERT_TRUE(e.ok());
  auto a = AccountExperiment(*e);
  ASSERT_TRUE(a.ok());
  const double n = static_cast<double>(a->params.total());
  EXPECT_DOUBLE_EQ(a->flops_per_token_6n, 6 * n);
  EXPECT_DOUBLE_EQ(a->flops_per_token_6n_attention, 6 * n + 6.0 * 2 * 16 * 64);
  EXPECT_EQ(a->tokens_per_step, 2 * 16);
  EXPECT_EQ(a->steps, 10);
  EXPECT_DOUBLE_EQ(a->total_flops, 320 * a->exact.training());
  EXPECT_EQ(a->memory.weights, 4.0 * static_cast<double>(a->params.total()));
  EXPECT_EQ(a->memory.gradients, 4.0 * static_cast<double>(a->params.total()));
  EXPECT_EQ(a->memory.optimizer, 2 * a->memory.gradients);
  // Arithmetic intensity: a square 1024^3 matmul in fp32 does 2*1024^3 FLOPs over 3*4*1024^2 bytes.
  MatmulCost square{"square", 1024, 1024, 1024, 1};
  EXPECT_DOUBLE_EQ(square.Intensity(4), 2.0 * 1024 / 12);
  EXPECT_DOUBLE_EQ(Mfu(*a, 1000, a->exact.training() * 4000), 0.25);
  const std::string table = FormatAccount(*a, 1000, 1e12);
  EXPECT_NE(table.find("non-embedding N"), std::string::npos);
  EXPECT_NE(table.find("MFU"), std::string::npos);
  EXPECT_EQ(table.find("above 100%"), std::string::npos) << table;
  // More tokens/s than the peak allows is flagged, not printed as a plain MFU of 400%.
  EXPECT_NE(FormatAccount(*a, 4000, a->exact.training() * 1000).find("MFU 400.0%"), std::string::npos);
  EXPECT_NE(
      FormatAccount(*a, 4000, a->exact.training() * 1000).find("(above 100%: more tokens/s than the peak"),
      std::string::npos);
}

// run.precision BF16: bf16 compute copies of the weights and bf16 activations (the norm statistics and
// log-sum-exps stay fp32), as the trainer's model::CountModelMemory counts them.
TEST(Account, Bf16RunsCountBf16CopiesAndActivations) {
  auto e = config::LoadExperimentText(std::string(kBase) + Cases()[0].model, "bf16",
                                      {"run.device=CUDA", "run.precision=BF16"});
  ASSERT_TRUE(e.ok()) << e.status();
  auto a = AccountExperiment(*e);
  ASSERT_TRUE(a.ok()) << a.status();
  const double n = static_cast<double>(a->params.total());
  EXPECT_EQ(a->memory.weights, 6 * n);
  EXPECT_EQ(a->memory.optimizer, 8 * n);
  const int64_t bf16_per_token = model::CountActivationBytesPerToken(a->model, kernels::DType::kBF16).total();
  EXPECT_EQ(a->memory.activations, static_cast<double>(bf16_per_token * 2 * 16));
  EXPECT_LT(bf16_per_token, model::CountActivationBytesPerToken(a->model).total());
}

TEST(Account, ImpossibleModelGetsTheValidationMessage) {
  auto e = config::ParseExperimentText(
      std::string(kBase) + R"pb(model { d_model: 30 n_layers: 1 n_heads: 4 vocab_size: 10 context_length: 4
                                         ffn { d_ff: 8 } })pb",
      "bad.textproto");
  ASSERT_TRUE(e.ok());
  auto a = AccountExperiment(*e);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("n_heads"), std::string::npos) << a.status();
}

}  // namespace
}  // namespace lmf::scaling
