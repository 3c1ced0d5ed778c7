// The incremental forward (LanguageModel::Prefill + DecodeStep over a KvCache) against the full causal
// Forward, on the CPU in fp32: for each architecture variant (MHA/GQA/MQA; RoPE, learned, sinusoidal and
// no positions; RMSNorm/LayerNorm; SwiGLU/GELU/ReLU; biases; tied/untied head; padded vocabulary) and two
// sequences with different tokens, the logits of a prefilled prompt and of every decode step after it equal
// Forward's at the same positions; a model whose every layer is windowed decodes on past its context, each
// step equal to Forward over the newest context. Also: the cache refuses to grow past context_length (the
// models with a global layer or a position table) and other misuse
// with a status; decoding after a training step is right, and a training step after decoding equals one on
// a fresh model bit for bit, with the gradients untouched by the decoding; on NaN-filled memory the
// incremental forward computes the same logits bit for bit (no cache row past the length is read).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/core/allocator.h"
#include "kernels/core/context.h"
#include "model/language_model/language_model.h"
#include "model/testing/poisoning_allocator.h"

namespace lmf::model {
namespace {

constexpr int64_t kB = 2;

std::unique_ptr<LanguageModel> Make(const ModelConfig& config, uint64_t seed,
                                    const kernels::Context& ctx = kernels::Context::Cpu()) {
  absl::StatusOr<std::unique_ptr<LanguageModel>> m = LanguageModel::Create(config, ctx);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  (*m)->InitializeParameters(seed);
  // Norm gains and biases away from 1 and 0, so that a wrong or missing one shows in the logits.
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> jitter(-0.2f, 0.2f);
  (*m)->VisitParameters([&](const std::string&, const Parameter& p) {
    if (p.value.rank() == 1) {
      for (int64_t i = 0; i < p.value.numel(); ++i) p.data()[i] += jitter(rng);
    }
  });
  return std::move(*m);
}

// `count` ids in [0, V).
std::vector<int32_t> RandomIds(const ModelConfig& config, int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(count));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(config.vocab_size));
  return ids;
}

// Columns [0, T) of each row of (B, full_t) ids.
std::vector<int32_t> Prefix(const std::vector<int32_t>& ids, int64_t full_t, int64_t t) {
  std::vector<int32_t> out;
  for (int64_t b = 0; b < kB; ++b)
    out.insert(out.end(), ids.begin() + b * full_t, ids.begin() + b * full_t + t);
  return out;
}

// The largest |incremental - full| over every position from the prompt's last one to the end of the
// context, relative to the full logits' largest magnitude.
double IncrementalError(LanguageModel& model, const std::vector<int32_t>& ids, int64_t prompt) {
  const ModelConfig& config = model.config();
  const int64_t t = config.context_length, v = config.vocab_rows();
  EXPECT_TRUE(model.Forward(ids.data(), kB, t).ok());
  const std::vector<float> full(model.logits(), model.logits() + kB * t * v);
  double scale = 0;
  for (float x : full) scale = std::max(scale, std::fabs(static_cast<double>(x)));
  absl::StatusOr<KvCache> cache = model.NewKvCache(kB);
  EXPECT_TRUE(cache.ok()) << cache.status();
  if (!cache.ok()) return INFINITY;
  int64_t rows = 0;  // per sequence over the layers: the context, or a shorter window's ring
  for (int64_t i = 0; i < config.n_layers; ++i)
    rows += config.layer_window(i) > 0 ? std::min(config.layer_window(i), t) : t;
  EXPECT_EQ(cache->bytes(), 2 * kB * rows * config.kv_width() * 4);
  const std::vector<int32_t> prompt_ids = Prefix(ids, t, prompt);
  absl::Status status = model.Prefill(prompt_ids.data(), kB, prompt, *cache);
  EXPECT_TRUE(status.ok()) << status;
  double worst = 0;
  for (int64_t pos = prompt - 1; pos < t && status.ok(); ++pos) {
    if (pos >= prompt) {
      const int32_t next[kB] = {ids[pos], ids[t + pos]};
      status = model.DecodeStep(next, *cache);
      EXPECT_TRUE(status.ok()) << status;
    }
    EXPECT_EQ(cache->length(), pos + 1);
    EXPECT_EQ(model.logits_tensor().shape(), kernels::Shape({kB, 1, v}));
    for (int64_t b = 0; b < kB; ++b) {
      for (int64_t i = 0; i < v; ++i) {
        const double err = std::fabs(model.logits()[b * v + i] - full[(b * t + pos) * v + i]);
        if (!(err <= worst)) worst = err;  // NaN too
      }
    }
  }
  if (config.decodes_past_context()) {  // every layer a ring: decoding goes on (StreamsPastTheContext)
    EXPECT_EQ(cache->capacity(), std::numeric_limits<int32_t>::max());
    return worst / scale;
  }
  // Full: one more token is refused and the cache keeps its length.
  const int32_t more[kB] = {1, 2};
  const absl::Status full_status = model.DecodeStep(more, *cache);
  EXPECT_EQ(full_status.code(), absl::StatusCode::kFailedPrecondition) << full_status;
  EXPECT_EQ(full_status.message(), "the KV cache is full: it holds context_length=" + std::to_string(t) +
                                       " tokens per sequence; Prefill a shorter window to continue");
  EXPECT_EQ(cache->length(), t);
  return worst / scale;
}

// fp32 on both sides; the sums run in other orders (the GEMMs see B rows instead of B*T and may block K
// differently, the attention kernel sees one query over S keys instead of a causal T x T tile, and a
// position row is added to one row instead of T), so logits of magnitude ~1-10 differ by a few ulps of the
// largest: measured at most 5e-7 of the largest logit for these configs. 1e-5 of it leaves room for other
// GEMM blockings and still fails for any wrong formula (a wrong position, a missing bias, an unrotated key
// or a key of the wrong head move logits by 1e-2 of the scale or more).
constexpr double kTolerance = 1e-5;

void ExpectIncrementalMatchesForward(const ModelConfig& config) {
  SCOPED_TRACE(config.DebugString());
  std::unique_ptr<LanguageModel> model = Make(config, 7);
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> ids = RandomIds(config, kB * config.context_length, 3);
  for (int64_t prompt : {int64_t{1}, int64_t{5}}) {
    SCOPED_TRACE("prompt " + std::to_string(prompt));
    EXPECT_LE(IncrementalError(*model, ids, prompt), kTolerance);
  }
}

// RMSNorm, SwiGLU, RoPE, grouped-query attention (6 heads, 2 kv heads), untied head.
ModelConfig LlamaStyle() {
  ModelConfig config = Cs336Config(/*vocab_size=*/97, /*context_length=*/12, /*d_model=*/48, /*n_layers=*/2,
                                   /*n_heads=*/6, /*d_ff=*/80);
  config.n_kv_heads = 2;
  return config;
}

TEST(LanguageModelDecode, MatchesForwardLlamaStyleRopeGqaSwiGluUntied) {
  ExpectIncrementalMatchesForward(LlamaStyle());
}

// LayerNorm, GELU, learned positions, biases, tied head, padded vocabulary, multi-head attention.
TEST(LanguageModelDecode, MatchesForwardGpt2StyleLearnedPositionsTiedPadded) {
  ModelConfig config = Gpt2Config(/*vocab_size=*/97, /*context_length=*/12, /*d_model=*/48, /*n_layers=*/2,
                                  /*n_heads=*/4);
  config.padded_vocab_size = 104;
  ExpectIncrementalMatchesForward(config);
}

// Sinusoidal positions, ReLU, LayerNorm, biases, multi-query attention, untied head.
TEST(LanguageModelDecode, MatchesForwardSinusoidalReluMqaBiases) {
  ModelConfig config = Cs336Config(61, 10, 32, 2, 4, 64);
  config.positions = PositionKind::kSinusoidal;
  config.ffn = FfnKind::kReLU;
  config.norm = NormKind::kLayerNorm;
  config.biases = true;
  config.n_kv_heads = 1;
  ExpectIncrementalMatchesForward(config);
}

// No positions at all (only the causal mask orders tokens), GELU, RMSNorm, tied head.
TEST(LanguageModelDecode, MatchesForwardWithoutPositions) {
  ModelConfig config = Cs336Config(61, 10, 32, 1, 2, 64);
  config.positions = PositionKind::kNone;
  config.ffn = FfnKind::kGELU;
  config.tied_embeddings = true;
  ExpectIncrementalMatchesForward(config);
}

// RoPE with a key/value bias and a larger theta, to check RoPE at the decode position with biases.
TEST(LanguageModelDecode, MatchesForwardRopeWithBiases) {
  ModelConfig config = LlamaStyle();
  config.biases = true;
  config.rope_theta = 500000;
  ExpectIncrementalMatchesForward(config);
}

// The block structures: post-norm (no final norm) on GPT-2's architecture, double norm and parallel blocks
// on Llama's.
ModelConfig PostNorm() {
  ModelConfig config = Gpt2Config(97, 12, 48, 2, 4);
  config.norm_placement = NormPlacement::kPost;
  return config;
}
ModelConfig DoubleNorm() {
  ModelConfig config = LlamaStyle();
  config.norm_placement = NormPlacement::kDouble;
  return config;
}
ModelConfig Parallel() {
  ModelConfig config = LlamaStyle();
  config.parallel_block = true;
  return config;
}

// QK-norm (Qwen3) on the Llama style with GQA, and with LayerNorm, learned positions and biases.
ModelConfig QkNorm() {
  ModelConfig config = LlamaStyle();
  config.qk_norm = true;
  return config;
}
TEST(LanguageModelDecode, MatchesForwardQkNorm) {
  ExpectIncrementalMatchesForward(QkNorm());
  ModelConfig layer_norm = Gpt2Config(97, 12, 48, 2, 4);
  layer_norm.qk_norm = true;
  ExpectIncrementalMatchesForward(layer_norm);
}

// A sliding window of 4 over a context of 12: each layer's cache is a ring of 4 rows, which a prompt of 5
// (positions 1-4 kept, wrapping once) and decoding to the end of the context (two more wraps) refill.
ModelConfig Window() {
  ModelConfig config = LlamaStyle();
  config.sliding_window = 4;
  return config;
}
TEST(LanguageModelDecode, MatchesForwardSlidingWindow) {
  ExpectIncrementalMatchesForward(Window());
  ModelConfig interleaved = Window();  // layer 2 global: a full cache of 12 rows
  interleaved.global_every = 2;
  ExpectIncrementalMatchesForward(interleaved);
  ModelConfig wide = Window();  // a window as long as the context: no ring
  wide.sliding_window = 12;
  ExpectIncrementalMatchesForward(wide);
}

// The ring's memory: 4 rows per sequence and layer instead of 12 (the global layer keeps 12).
TEST(LanguageModelDecode, WindowedLayersCacheOnlyTheWindow) {
  const ModelConfig config = Window();
  std::unique_ptr<LanguageModel> model = Make(config, 1);
  ASSERT_NE(model, nullptr);
  absl::StatusOr<KvCache> cache = model->NewKvCache(kB);
  ASSERT_TRUE(cache.ok()) << cache.status();
  const int64_t per_row = 2 * config.kv_width() * 4;  // k and v, fp32
  EXPECT_EQ(cache->bytes(), kB * (4 + 4) * per_row);
  EXPECT_EQ(cache->capacity(), std::numeric_limits<int32_t>::max());  // every layer a ring: no end
  ModelConfig interleaved = config;
  interleaved.global_every = 2;
  model = Make(interleaved, 1);
  ASSERT_NE(model, nullptr);
  cache = model->NewKvCache(kB);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ(cache->bytes(), kB * (4 + 12) * per_row);
  EXPECT_EQ(cache->capacity(), 12);  // the global layer's positions end at the context
}

// A model whose every layer is windowed, with rotary or no positions, decodes past its context: its rings
// keep wrapping, and each token sees the last W keys of every layer at the offsets training saw. Two layers
// of window 4 give the last position a receptive field of 1 + 2 * 3 = 7 tokens, inside the context of 12, so
// at every position p (to four contexts) the decode step's logits equal Forward's last logits over the
// newest min(p + 1, 12) ids placed at positions from 0 (rotary scores depend only on the offsets).
TEST(LanguageModelDecode, StreamsPastTheContext) {
  ModelConfig no_positions = Window();
  no_positions.positions = PositionKind::kNone;
  ModelConfig qk_capped = Window();  // the decode step's other per-token pieces past the context
  qk_capped.qk_norm = true, qk_capped.attention_softcap = 1.0, qk_capped.final_logit_softcap = 2.0;
  for (const ModelConfig& config : {Window(), no_positions, qk_capped}) {
    SCOPED_TRACE(config.DebugString());
    ASSERT_TRUE(config.decodes_past_context());
    std::unique_ptr<LanguageModel> model = Make(config, 6);
    ASSERT_NE(model, nullptr);
    const int64_t t = config.context_length, len = 4 * t, v = config.vocab_rows(), prompt = 5;
    const std::vector<int32_t> ids = RandomIds(config, kB * len, 21);
    absl::StatusOr<KvCache> cache = model->NewKvCache(kB);
    ASSERT_TRUE(cache.ok()) << cache.status();
    const int64_t bytes = cache->bytes();
    const std::vector<int32_t> prompt_ids = Prefix(ids, len, prompt);
    ASSERT_TRUE(model->Prefill(prompt_ids.data(), kB, prompt, *cache).ok());
    double worst = 0, scale = 0;
    for (int64_t pos = prompt - 1; pos < len; ++pos) {
      if (pos >= prompt) {
        const int32_t next[kB] = {ids[pos], ids[len + pos]};
        const absl::Status status = model->DecodeStep(next, *cache);
        ASSERT_TRUE(status.ok()) << "position " << pos << ": " << status;
      }
      ASSERT_EQ(cache->length(), pos + 1);
      const std::vector<float> decoded(model->logits(), model->logits() + kB * v);
      const int64_t w = std::min(pos + 1, t);  // the newest w ids, at positions [0, w)
      std::vector<int32_t> window;
      for (int64_t b = 0; b < kB; ++b)
        window.insert(window.end(), ids.begin() + b * len + pos + 1 - w, ids.begin() + b * len + pos + 1);
      ASSERT_TRUE(model->Forward(window.data(), kB, w).ok());
      for (int64_t b = 0; b < kB; ++b) {
        for (int64_t i = 0; i < v; ++i) {
          const double want = model->logits()[(b * w + w - 1) * v + i];
          const double err = std::fabs(decoded[b * v + i] - want);
          scale = std::max(scale, std::fabs(want));
          if (!(err <= worst)) worst = err;  // NaN too
        }
      }
    }
    EXPECT_LE(worst, kTolerance * scale) << "max abs error " << worst << ", scale " << scale;
    EXPECT_EQ(cache->bytes(), bytes);  // four rows per layer and sequence throughout
  }
}

// Attention logit soft-capping at 1 (the prefill's causal kernel and the decode step's one-query call).
TEST(LanguageModelDecode, MatchesForwardSoftCap) {
  ModelConfig config = LlamaStyle();
  config.attention_softcap = 1.0;
  ExpectIncrementalMatchesForward(config);
}

// Final-logit soft-capping at 2 (the prefill's and each decode step's logits are capped as the forward's).
TEST(LanguageModelDecode, MatchesForwardFinalLogitSoftCap) {
  ModelConfig config = LlamaStyle();
  config.final_logit_softcap = 2.0;
  ExpectIncrementalMatchesForward(config);
}

TEST(LanguageModelDecode, MatchesForwardPostNorm) { ExpectIncrementalMatchesForward(PostNorm()); }
TEST(LanguageModelDecode, MatchesForwardDoubleNorm) { ExpectIncrementalMatchesForward(DoubleNorm()); }
TEST(LanguageModelDecode, MatchesForwardParallelBlocks) {
  ExpectIncrementalMatchesForward(Parallel());
  ModelConfig shared = Parallel();  // one norm for both branches (GPT-J, PaLM)
  shared.parallel_shared_norm = true;
  ExpectIncrementalMatchesForward(shared);
}

TEST(LanguageModelDecode, MisuseIsAStatus) {
  std::unique_ptr<LanguageModel> model = Make(LlamaStyle(), 1);
  std::unique_ptr<LanguageModel> other = Make(LlamaStyle(), 1);
  ASSERT_NE(model, nullptr);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(model->NewKvCache(0).status().message(), "KV cache batch size 0 must be positive");
  // A cache beyond the machine's memory is refused before anything is allocated (a terabyte and more here).
  const absl::StatusOr<KvCache> huge = model->NewKvCache(int64_t{1} << 40);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  const std::string message(huge.status().message());
  EXPECT_EQ(message.rfind("a KV cache of 1099511627776 sequences of 12 tokens would take ", 0), 0u)
      << message;
  EXPECT_NE(message.find(" GiB, more than half of this machine's "), std::string::npos) << message;
  absl::StatusOr<KvCache> cache = model->NewKvCache(kB);
  ASSERT_TRUE(cache.ok());
  EXPECT_EQ(cache->capacity(), 12);
  const int32_t next[kB] = {1, 2};
  EXPECT_EQ(model->DecodeStep(next, *cache).message(),
            "the KV cache is empty: Prefill a prompt before DecodeStep");
  const std::vector<int32_t> ids = RandomIds(model->config(), kB * 13, 5);
  absl::Status too_long = model->Prefill(ids.data(), kB, 13, *cache);
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument) << too_long;
  EXPECT_EQ(model->Prefill(ids.data(), 1, 3, *cache).message(),
            "batch size 1 does not match the KV cache's batch size 2");
  EXPECT_EQ(other->Prefill(ids.data(), kB, 3, *cache).message(), "the KV cache was made by another model");
  ASSERT_TRUE(model->Prefill(ids.data(), kB, 3, *cache).ok());
  const int32_t bad[kB] = {1, 97};
  EXPECT_EQ(model->DecodeStep(bad, *cache).message(), "ids[1] = 97 is outside the vocabulary [0, 97)");
  EXPECT_EQ(cache->length(), 3);
  // A prefill restarts the cache.
  ASSERT_TRUE(model->Prefill(ids.data(), kB, 2, *cache).ok());
  EXPECT_EQ(cache->length(), 2);
}

// The cache rows past its length, and every buffer the incremental forward allocates, are never read before
// they are written: on poisoned memory the prefill and every decode step give the same logits bit for bit.
TEST(LanguageModelDecode, NothingIsReadBeforeItIsWritten) {
  testing::PoisoningAllocator poison;
  kernels::Context poisoned = kernels::Context::Cpu();
  poisoned.allocator = &poison;
  for (const ModelConfig& config : {LlamaStyle(), Gpt2Config(97, 12, 48, 2, 4), PostNorm(), DoubleNorm(),
                                    Parallel(), QkNorm(), Window()}) {
    SCOPED_TRACE(config.DebugString());
    const std::vector<int32_t> ids = RandomIds(config, kB * config.context_length, 17);
    std::vector<float> logits[2];
    for (int run = 0; run < 2; ++run) {
      std::unique_ptr<LanguageModel> model = Make(config, 4, run == 0 ? kernels::Context::Cpu() : poisoned);
      ASSERT_NE(model, nullptr);
      absl::StatusOr<KvCache> cache = model->NewKvCache(kB);
      ASSERT_TRUE(cache.ok());
      const std::vector<int32_t> prompt = Prefix(ids, config.context_length, 3);
      ASSERT_TRUE(model->Prefill(prompt.data(), kB, 3, *cache).ok());
      for (int64_t pos = 3;; ++pos) {
        const int64_t v = config.vocab_rows();
        logits[run].insert(logits[run].end(), model->logits(), model->logits() + kB * v);
        if (pos == config.context_length) break;
        const int32_t next[kB] = {ids[pos], ids[config.context_length + pos]};
        ASSERT_TRUE(model->DecodeStep(next, *cache).ok());
      }
    }
    ASSERT_EQ(logits[0].size(), logits[1].size());
    EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)), 0);
  }
}

struct Step {
  double loss = 0;
  std::map<std::string, std::vector<float>> grads;
};

Step TrainStep(LanguageModel& model, const std::vector<int32_t>& ids, const std::vector<int32_t>& targets,
               int64_t b, int64_t t) {
  Step step;
  absl::StatusOr<double> loss = model.ForwardWithLoss(ids.data(), targets.data(), b, t);
  EXPECT_TRUE(loss.ok()) << loss.status();
  step.loss = loss.ok() ? *loss : NAN;
  model.ZeroGrad();
  model.Backward();
  model.VisitParameters([&](const std::string& name, const Parameter& p) {
    step.grads[name] = std::vector<float>(p.grad_data(), p.grad_data() + p.grad.numel());
  });
  return step;
}

// Decoding after a training step (other (B, T), step state and gradients in place) is as right as on a fresh
// model; it leaves the gradients as they were; and the next training step equals a fresh model's, bit for
// bit (the step state is rebuilt by the forward).
TEST(LanguageModelDecode, TrainingAndDecodingInterleave) {
  const ModelConfig config = LlamaStyle();
  std::unique_ptr<LanguageModel> model = Make(config, 9);
  std::unique_ptr<LanguageModel> fresh = Make(config, 9);
  ASSERT_NE(model, nullptr);
  ASSERT_NE(fresh, nullptr);
  const std::vector<int32_t> train_ids = RandomIds(config, 3 * 7, 11);
  const std::vector<int32_t> targets = RandomIds(config, 3 * 7, 12);
  const Step before = TrainStep(*model, train_ids, targets, 3, 7);
  EXPECT_LE(IncrementalError(*model, RandomIds(config, kB * config.context_length, 13), 4), kTolerance);
  EXPECT_EQ(model->saved_activation_bytes(), 0);  // nothing a Backward could use
  model->VisitParameters([&](const std::string& name, const Parameter& p) {
    EXPECT_EQ(std::memcmp(p.grad_data(), before.grads.at(name).data(), p.grad.nbytes()), 0) << name;
  });
  const Step after = TrainStep(*model, train_ids, targets, 3, 7);
  const Step reference = TrainStep(*fresh, train_ids, targets, 3, 7);
  EXPECT_EQ(std::memcmp(&after.loss, &reference.loss, sizeof(double)), 0)
      << after.loss << " vs " << reference.loss;
  for (const auto& [name, grad] : reference.grads) EXPECT_EQ(after.grads.at(name), grad) << name;
}

}  // namespace
}  // namespace lmf::model
