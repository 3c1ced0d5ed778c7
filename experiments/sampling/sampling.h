// Sampling the next token from a row of logits: temperature, then nucleus (top-p) truncation, then a draw
// from a counter-based generator (so a seed reproduces a generation). Temperature 0 is greedy (argmax).
// And the generation loop over a LanguageModel's incremental forward, stopping at a stop token or a token
// limit.
#ifndef LMFORGE_EXPERIMENTS_SAMPLING_SAMPLING_H_
#define LMFORGE_EXPERIMENTS_SAMPLING_SAMPLING_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "model/language_model/language_model.h"

namespace lmf::experiments {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy
  double top_p = 1.0;        // keep the smallest set of tokens whose probability reaches top_p
  uint64_t seed = 0;
};

// Draw number `draw` of the generator seeded with `seed`: uniform in [0, 1), 53 random bits (SplitMix64).
double Uniform(uint64_t seed, uint64_t draw);

// Draws a token id from logits (V) for draw number `draw` of the generator seeded with options.seed: the
// probabilities softmax(logits / temperature) taken most probable first (ties by id), the nucleus the
// shortest such prefix whose mass reaches top_p of the total, and the first token at which the running sum
// passes Uniform(seed, draw) times the nucleus's mass.
int32_t SampleToken(const float* logits, int64_t vocab_size, const SamplingOptions& options, uint64_t draw);

struct GenerateOptions {
  SamplingOptions sampling;
  int64_t max_new_tokens = 256;
  std::optional<int32_t> stop_token;  // e.g. <|endoftext|>; not included in the output
  // > 0: draw only ids below this (the tokenizer's vocabulary, when the model's is larger: padding rows or a
  // config sized generously could otherwise produce ids no tokenizer can decode).
  int64_t vocab_limit = 0;
};

// Continues `prompt` (at least one id) with up to max_new_tokens ids, decoding with the model's KV cache
// (LanguageModel::Prefill / DecodeStep, on the model's device and in its precision): the prompt's last
// context_length ids fill the cache, then each new id costs one incremental step. When the cache is full
// (context_length positions) it is refilled with the newest context_length / 2 ids (positions begin again at
// 0); a model that decodes past its context (ModelConfig::decodes_past_context: every layer windowed, rotary
// or no positions) keeps decoding from its rings instead, each token still seeing the last window of every
// layer. Each step's logits come
// to the host once (vocab_rows values, bf16 widened to f32) for sampling. `on_token` (may be empty) sees
// each new id as it is drawn.
absl::StatusOr<std::vector<int32_t>> Generate(model::LanguageModel& model, const std::vector<int32_t>& prompt,
                                              const GenerateOptions& options,
                                              const std::function<void(int32_t)>& on_token);

// Continues `prompt` num_samples (>= 1) times at once: the samples are the sequences of one batch, so the
// cache holds them all and each step is one batched forward (Generate is this with one sample). Sample s
// draws with seed options.sampling.seed + s: it is the generation Generate gives with that seed alone (the
// same draws on the same logits; only the GEMMs' rounding at another batch size could differ). Each sample
// ends at its stop token or at max_new_tokens; one that has ended rides along in the batch (its ids are
// dropped) until every sample has. `on_token` (may be empty) sees each new id with its sample's index.
absl::StatusOr<std::vector<std::vector<int32_t>>> GenerateSamples(
    model::LanguageModel& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
    int64_t num_samples, const std::function<void(int64_t sample, int32_t id)>& on_token);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_SAMPLING_SAMPLING_H_
