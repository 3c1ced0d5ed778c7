// Incremental decoding with a KV cache (see kv_cache_decoder.h). Matrix-vector products go to OpenBLAS's
// sgemv; everything else is written out per element, in the model's formulas.
#include "experiments/sampling/kv_cache_decoder.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace lmf::experiments {
namespace {

float Gelu(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(u));
}

float Silu(float x) { return x / (1.0f + std::exp(-x)); }

// Rotates adjacent pairs (2i, 2i+1) of each head of `x` (heads * hs) to position `pos`.
void Rope(float* x, int64_t heads, int64_t hs, int64_t pos, double theta) {
  for (int64_t i = 0; i < hs / 2; ++i) {
    const double angle = static_cast<double>(pos) * std::pow(theta, -2.0 * static_cast<double>(i) / hs);
    const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
    for (int64_t h = 0; h < heads; ++h) {
      float* p = x + h * hs + 2 * i;
      const float x0 = p[0], x1 = p[1];
      p[0] = x0 * c - x1 * s;
      p[1] = x0 * s + x1 * c;
    }
  }
}

}  // namespace

KvCacheDecoder::KvCacheDecoder(const model::LanguageModel& model) : config_(model.config()) {
  model.VisitParameters([&](const std::string& name, const model::Parameter& p) { params_[name] = p.data(); });
  const int64_t c = config_.d_model, t = config_.context_length;
  if (config_.positions == model::PositionKind::kSinusoidal) {
    sinusoidal_.resize(t * c);
    for (int64_t p = 0; p < t; ++p) {
      for (int64_t i = 0; i < c / 2; ++i) {
        const double angle = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / c);
        sinusoidal_[p * c + 2 * i] = static_cast<float>(std::sin(angle));
        sinusoidal_[p * c + 2 * i + 1] = static_cast<float>(std::cos(angle));
      }
    }
  }
  k_cache_.assign(config_.n_layers, std::vector<float>(t * config_.kv_width()));
  v_cache_.assign(config_.n_layers, std::vector<float>(t * config_.kv_width()));
  x_.resize(c);
  h_.resize(c);
  qkv_.resize(config_.q_width() + 2 * config_.kv_width());
  attn_.resize(config_.q_width());
  scores_.resize(t);
  ff_a_.resize(config_.d_ff);
  ff_b_.resize(config_.d_ff);
  logits_.resize(config_.vocab_size);
}

const float* KvCacheDecoder::Param(const std::string& name) const {
  auto it = params_.find(name);
  return it == params_.end() ? nullptr : it->second;
}

void KvCacheDecoder::Norm(const std::string& prefix, const float* x, float* out) const {
  const int64_t c = config_.d_model;
  const float* w = Param(prefix + ".weight");
  LMF_CHECK(w != nullptr) << prefix;
  const float eps = static_cast<float>(config_.norm_eps);
  if (config_.norm == model::NormKind::kRMSNorm) {
    double sum_sq = 0;
    for (int64_t i = 0; i < c; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
    const float rstd = 1.0f / std::sqrt(static_cast<float>(sum_sq / c) + eps);
    for (int64_t i = 0; i < c; ++i) out[i] = x[i] * rstd * w[i];
  } else {
    const float* b = Param(prefix + ".bias");
    double sum = 0;
    for (int64_t i = 0; i < c; ++i) sum += x[i];
    const double mean = sum / c;
    double var = 0;
    for (int64_t i = 0; i < c; ++i) var += (x[i] - mean) * (x[i] - mean);
    const float rstd = 1.0f / std::sqrt(static_cast<float>(var / c) + eps);
    for (int64_t i = 0; i < c; ++i) out[i] = static_cast<float>(x[i] - mean) * rstd * w[i] + (b ? b[i] : 0.0f);
  }
}

void KvCacheDecoder::Linear(const std::string& prefix, int64_t rows, int64_t cols, const float* x, float* out) const {
  const float* w = Param(prefix + ".weight");
  LMF_CHECK(w != nullptr) << prefix;
  cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(rows), static_cast<int>(cols), 1.0f, w,
              static_cast<int>(cols), x, 1, 0.0f, out, 1);
  if (const float* b = Param(prefix + ".bias")) {
    for (int64_t i = 0; i < rows; ++i) out[i] += b[i];
  }
}

absl::StatusOr<const float*> KvCacheDecoder::Step(int32_t id) {
  const int64_t c = config_.d_model, v = config_.vocab_size, hs = config_.head_size();
  const int64_t nh = config_.n_heads, nkv = config_.n_kv_heads, group = nh / nkv;
  const int64_t qw = config_.q_width(), kvw = config_.kv_width(), f = config_.d_ff;
  if (id < 0 || id >= v) return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is outside [0, ", v, ")"));
  if (length_ >= config_.context_length) {
    return absl::FailedPreconditionError(
        absl::StrCat("the KV cache holds context_length=", config_.context_length, " tokens"));
  }
  const int64_t pos = length_;
  const float* table = Param("token_embeddings.weight");
  std::copy(table + static_cast<int64_t>(id) * c, table + (static_cast<int64_t>(id) + 1) * c, x_.begin());
  const float* positions = config_.positions == model::PositionKind::kLearned      ? Param("position_embeddings.weight")
                           : config_.positions == model::PositionKind::kSinusoidal ? sinusoidal_.data()
                                                                                   : nullptr;
  if (positions != nullptr) {
    for (int64_t i = 0; i < c; ++i) x_[i] += positions[pos * c + i];
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int64_t layer = 0; layer < config_.n_layers; ++layer) {
    const std::string prefix = absl::StrCat("layers.", layer);
    Norm(prefix + ".ln1", x_.data(), h_.data());
    float* q = qkv_.data();
    float* k = q + qw;
    float* vv = k + kvw;
    Linear(prefix + ".attn.q_proj", qw, c, h_.data(), q);
    Linear(prefix + ".attn.k_proj", kvw, c, h_.data(), k);
    Linear(prefix + ".attn.v_proj", kvw, c, h_.data(), vv);
    if (config_.positions == model::PositionKind::kRoPE) {
      Rope(q, nh, hs, pos, config_.rope_theta);
      Rope(k, nkv, hs, pos, config_.rope_theta);
    }
    float* k_cache = k_cache_[layer].data();
    float* v_cache = v_cache_[layer].data();
    std::copy(k, k + kvw, k_cache + pos * kvw);
    std::copy(vv, vv + kvw, v_cache + pos * kvw);
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t kv_head = h / group;
      const float* qh = q + h * hs;
      float max_score = -INFINITY;
      for (int64_t u = 0; u <= pos; ++u) {
        const float* ku = k_cache + u * kvw + kv_head * hs;
        float dot = 0;
        for (int64_t d = 0; d < hs; ++d) dot += qh[d] * ku[d];
        scores_[u] = dot * scale;
        max_score = std::max(max_score, scores_[u]);
      }
      double total = 0;
      for (int64_t u = 0; u <= pos; ++u) {
        scores_[u] = std::exp(scores_[u] - max_score);
        total += scores_[u];
      }
      float* out = attn_.data() + h * hs;
      std::fill(out, out + hs, 0.0f);
      for (int64_t u = 0; u <= pos; ++u) {
        const float weight = static_cast<float>(scores_[u] / total);
        const float* vu = v_cache + u * kvw + kv_head * hs;
        for (int64_t d = 0; d < hs; ++d) out[d] += weight * vu[d];
      }
    }
    Linear(prefix + ".attn.output_proj", c, qw, attn_.data(), h_.data());
    for (int64_t i = 0; i < c; ++i) x_[i] += h_[i];

    Norm(prefix + ".ln2", x_.data(), h_.data());
    Linear(prefix + ".ffn.w1", f, c, h_.data(), ff_a_.data());
    switch (config_.ffn) {
      case model::FfnKind::kSwiGLU:
        Linear(prefix + ".ffn.w3", f, c, h_.data(), ff_b_.data());
        for (int64_t i = 0; i < f; ++i) ff_a_[i] = Silu(ff_a_[i]) * ff_b_[i];
        break;
      case model::FfnKind::kGELU:
        for (int64_t i = 0; i < f; ++i) ff_a_[i] = Gelu(ff_a_[i]);
        break;
      case model::FfnKind::kReLU:
        for (int64_t i = 0; i < f; ++i) ff_a_[i] = std::max(ff_a_[i], 0.0f);
        break;
    }
    Linear(prefix + ".ffn.w2", c, f, ff_a_.data(), h_.data());
    for (int64_t i = 0; i < c; ++i) x_[i] += h_[i];
  }
  Norm("ln_final", x_.data(), h_.data());
  Linear(config_.tied_embeddings ? "token_embeddings" : "lm_head", v, c, h_.data(), logits_.data());
  ++length_;
  return logits_.data();
}

}  // namespace lmf::experiments
