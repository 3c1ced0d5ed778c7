// Test-only: the two small configs the model's CUDA tests run (head size 64, which every CUDA attention
// kernel supports), so the training-path and the decoding-path GPU tests check the same architectures, and
// the block structures (post-norm, double norm, parallel) and QK-norm on them, which the F32 and bf16
// comparisons and the f32 decode comparison also run.
//   GPT-2-like: LayerNorm, GELU, learned positions, biases, tied head, padded vocabulary. init_std 0.1
//   (GPT-2's
//     is 0.02) makes the blocks' contributions comparable to the embeddings and the attention non-uniform,
//     so that every op visibly moves the logits and gradients compared.
//   Llama-like: RMSNorm, SwiGLU, RoPE, grouped-query attention (4 heads, 2 kv heads), untied head.
#ifndef LMFORGE_MODEL_TESTING_CUDA_CONFIGS_H_
#define LMFORGE_MODEL_TESTING_CUDA_CONFIGS_H_

#include <cstdint>
#include <vector>

#include "model/config/config.h"

namespace lmf::model::testing {

inline ModelConfig Gpt2Like() {
  ModelConfig c = Gpt2Config(/*vocab_size=*/301, /*context_length=*/64, /*d_model=*/128, /*n_layers=*/2,
                             /*n_heads=*/2);
  c.padded_vocab_size = 320;
  c.init_std = 0.1;
  return c;
}

inline ModelConfig LlamaLike() {
  ModelConfig c = Cs336Config(/*vocab_size=*/250, /*context_length=*/64, /*d_model=*/256, /*n_layers=*/2,
                              /*n_heads=*/4, /*d_ff=*/352);
  c.n_kv_heads = 2;
  c.padded_vocab_size = 256;
  return c;
}

struct NamedConfig {
  const char* name;
  ModelConfig config;
};

inline std::vector<NamedConfig> CudaTestConfigs() {
  return {{"gpt2_like", Gpt2Like()}, {"llama_like", LlamaLike()}};
}

// CudaTestConfigs() and, one layer deep (the structure is per block), GPT-2-like post-norm (no final
// norm) with attention logits soft-capped at 1, Llama-like with Gemma's pieces: GeGLU, double norm with
// QK-norm (Gemma 3's pair) and the final logits soft-capped at 2 (Gemma 2's cap), and Llama-like parallel
// blocks with one shared norm (PaLM's) and a sliding window of 24 (of the 64 positions).
inline std::vector<NamedConfig> CudaTestConfigsWithBlockStructures() {
  std::vector<NamedConfig> configs = CudaTestConfigs();
  ModelConfig post = Gpt2Like(), sandwich = LlamaLike(), parallel = LlamaLike();
  post.norm_placement = NormPlacement::kPost;
  post.attention_softcap = 1.0;
  sandwich.norm_placement = NormPlacement::kDouble;
  sandwich.qk_norm = true;
  sandwich.final_logit_softcap = 2.0;
  sandwich.ffn = FfnKind::kGeGLU;
  parallel.parallel_block = true;
  parallel.parallel_shared_norm = true;
  parallel.sliding_window = 24;
  for (ModelConfig* c : {&post, &sandwich, &parallel}) c->n_layers = 1;
  configs.push_back({"gpt2_like_post_norm_softcap_1", post});
  configs.push_back({"llama_like_geglu_double_norm_qk_norm_final_softcap_2", sandwich});
  configs.push_back({"llama_like_parallel_shared_norm_window_24", parallel});
  return configs;
}

// The first `count` ids in [0, config.vocab_size) of one fixed 64-bit LCG stream: the token inputs (and
// targets) of the model's CUDA tests.
inline std::vector<int32_t> CudaTestIds(const ModelConfig& config, int64_t count) {
  std::vector<int32_t> ids;
  uint64_t state = 0x2545f4914f6cdd1dull;
  for (int64_t i = 0; i < count; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    ids.push_back(static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(config.vocab_size)));
  }
  return ids;
}

}  // namespace lmf::model::testing

#endif  // LMFORGE_MODEL_TESTING_CUDA_CONFIGS_H_
