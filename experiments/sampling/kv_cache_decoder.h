// Incremental decoding with a key/value cache for a trained LanguageModel: each new token costs one pass
// over the weights (matrix-vector products) and attention over the cached keys and values, instead of a
// forward over the whole window. Reads the model's parameters by name (the model must outlive it) and
// follows the model's forward exactly (pre-norm blocks, RMSNorm/LayerNorm, SwiGLU/GELU/ReLU, RoPE/learned/
// sinusoidal/no positions, GQA, biases, tied head); kv_cache_decoder_test checks its logits against
// LanguageModel::Forward at every position. Belongs in model/ once the model grows an incremental forward.
//
// Cache per layer: K and V of shape (context_length, NKV * HS).
#ifndef LMFORGE_EXPERIMENTS_SAMPLING_KV_CACHE_DECODER_H_
#define LMFORGE_EXPERIMENTS_SAMPLING_KV_CACHE_DECODER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/config/config.h"
#include "model/language_model/language_model.h"

namespace lmf::experiments {

class KvCacheDecoder {
 public:
  explicit KvCacheDecoder(const model::LanguageModel& model);

  // Appends token `id` at the next position and returns the logits (V) predicting the token after it.
  // FailedPrecondition when the cache holds context_length tokens (Reset and re-feed a shorter window);
  // InvalidArgument for an id outside [0, V).
  absl::StatusOr<const float*> Step(int32_t id);

  void Reset() { length_ = 0; }
  int64_t length() const { return length_; }
  int64_t capacity() const { return config_.context_length; }

 private:
  const float* Param(const std::string& name) const;  // nullptr when the model has no such parameter
  void Norm(const std::string& prefix, const float* x, float* out) const;
  // out (rows) = W (rows, cols) x + bias (when present).
  void Linear(const std::string& prefix, int64_t rows, int64_t cols, const float* x, float* out) const;

  model::ModelConfig config_;
  std::map<std::string, const float*> params_;
  std::vector<float> sinusoidal_;  // (context_length, C) for sinusoidal positions
  std::vector<std::vector<float>> k_cache_, v_cache_;  // per layer (context_length, NKV * HS)
  int64_t length_ = 0;
  // Scratch for one token.
  std::vector<float> x_, h_, qkv_, attn_, scores_, ff_a_, ff_b_, logits_;
};

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_SAMPLING_KV_CACHE_DECODER_H_
