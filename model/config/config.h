// ModelConfig: the shape and the choices of a dense decoder-only transformer, as a plain struct.
//
// The experiment config (config/model.proto) is converted into this struct; the model is built only from a
// config that Validate() accepts, so impossible shapes fail at build time with a message naming the field,
// never by a crash later. Validate() is the one place of the rules on the model's shape: the experiment
// config's validation converts its model message and asks this struct, naming the fields by their config
// paths (config/model_conversion.h). Factories give the two reference architectures:
//   - Gpt2Config:  LayerNorm, GELU (tanh) MLP, learned absolute positions, biases, tied embeddings,
//                  GPT-2's scaled normal init.
//   - Cs336Config: the CS336 / Llama style: RMSNorm, SwiGLU, RoPE (adjacent pairs rotated), no biases,
//                  untied LM head, CS336's truncated-normal init.
#ifndef LMFORGE_MODEL_CONFIG_CONFIG_H_
#define LMFORGE_MODEL_CONFIG_CONFIG_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace lmf::model {

enum class NormKind { kRMSNorm, kLayerNorm };
// Where the norms sit in a block (f: the attention or the feed-forward):
//   kPre     x + f(norm(x)), then a final norm before the LM head (GPT-2, Llama)
//   kPost    norm(x + f(x)), no final norm: the last block's output is normed already (BERT, OPT-350m)
//   kDouble  x + norm'(f(norm(x))), then a final norm (Gemma 2's "sandwich"; norm' is a second norm per
//   branch)
enum class NormPlacement { kPre, kPost, kDouble };
// The feed-forward: W2 act(W1 x), or gated W2 (act(W1 x) * W3 x) with SiLU (SwiGLU) or GELU-tanh (GeGLU).
enum class FfnKind { kSwiGLU, kGELU, kReLU, kGeGLU };
enum class PositionKind { kRoPE, kLearned, kSinusoidal, kNone };
enum class InitScheme {
  // N(0, init_std) for every matrix and embedding; the projections that write into the residual stream
  // (attn.output_proj, ffn.w2) use init_std / sqrt(2 * n_layers); biases 0; norm gains 1.
  kGpt2Scaled,
  // Linear (out, in): truncated normal, std sqrt(2 / (in + out)), cut at +-3 std. Embeddings and LM head:
  // truncated normal N(0, 1) cut at +-3. Biases 0; norm gains 1.
  kCs336TruncatedNormal,
  // Maximal update parametrization for Adam (Tensor Programs V, Table 3) over kGpt2Scaled, with width
  // multiplier m = d_model / mup_base_d_model: embeddings N(0, init_std); the blocks' matrices
  // N(0, init_std / sqrt(m)) (residual projections also / sqrt(2 * n_layers)); the LM head N(0, init_std /
  // m);
  // biases 0, norm gains 1. The learning rates go with it (LanguageModel::LearningRateScale): 1 / m for the
  // blocks' matrices and the LM head, 1 for the rest. m = 1 is kGpt2Scaled. Untied embeddings only.
  kMup,
};

const char* NormKindName(NormKind kind);
const char* NormPlacementName(NormPlacement placement);
const char* FfnKindName(FfnKind kind);
const char* PositionKindName(PositionKind kind);
const char* InitSchemeName(InitScheme scheme);

// Query-key pairs of a causal sequence of t tokens: t (t + 1) / 2, or with a sliding window 0 < W < t,
// W (W + 1) / 2 + (t - W) W.
inline double CausalPairs(int64_t t, int64_t window) {
  const double n = static_cast<double>(t);
  if (window <= 0 || window >= t) return n * (n + 1) / 2;
  const double w = static_cast<double>(window);
  return w * (w + 1) / 2 + (n - w) * w;
}

// The layers of a block, each behind its interface (model/layers/layer.h): a token mixer, which mixes
// information across positions, and a channel mixer, which transforms each position alone. A spec names
// the kind and that kind's settings; model/layers/mixers.cc builds the layer from it.

// Softmax attention over n_heads query heads and n_kv_heads key/value heads (MHA when equal, GQA when
// n_kv_heads divides n_heads, MQA when 1), head size d_model / n_heads, causal; RoPE when the model's
// positions are rotary.
struct AttentionSpec {
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t window = 0;    // sliding window W: token t attends to (t - W, t]; 0: the whole causal prefix
  double softcap = 0.0;  // attention logit soft-cap c: scores s -> c tanh(s / c); 0: off
  bool qk_norm = false;  // the model's norm kind over each head's q and k before RoPE (Qwen3, Gemma 3)
};

struct TokenMixerSpec {
  enum class Kind { kAttention };
  Kind kind = Kind::kAttention;
  AttentionSpec attention;  // kAttention
};

// The dense feed-forward: W2 act(W1 x), or gated W2 (act(W1 x) * W3 x), of hidden width d_ff.
struct FeedForwardSpec {
  FfnKind kind = FfnKind::kSwiGLU;
  int64_t d_ff = 0;
  bool gated() const { return kind == FfnKind::kSwiGLU || kind == FfnKind::kGeGLU; }  // has W3
};

// How a mixture of experts picks each token's experts and weighs their outputs (gates), from the router's
// fp32 logits z (E per token):
//   kSoftmaxTopK  p = softmax(z) over all E; the top k of p; gates p_j (Switch, GShard, DeepSeek-V2)
//   kTopKSoftmax  the top k of z; gates softmax over those k logits (Mixtral)
//   kSigmoidTopK  s = sigmoid(z); the top k of s; gates s_j (DeepSeek-V3, with normalize_gates)
enum class RouterKind { kSoftmaxTopK, kTopKSoftmax, kSigmoidTopK };
// Which of an expert's assignments beyond its capacity are dropped: the later tokens of the micro-batch
// (Switch, GShard), or those of the lowest gate (DeepSeek-V2's token dropping).
enum class DropPolicy { kByPosition, kByScore };
// Over which tokens the balancing loss's f_i and P_i are taken: the micro-batch, or each sequence with the
// loss averaged over the sequences (DeepSeek-V3's sequence-wise loss).
enum class BalanceScope { kMicroBatch, kSequence };

// A mixture of experts (model/layers/moe): a router sends each token to top_k of n_experts routed experts
// (each a feed-forward of expert_kind and hidden width d_expert) and sums their outputs weighted by the
// gates; shared experts (one feed-forward of width shared_d_ff: several shared experts of the same kind
// side by side are one wider one) see every token.
struct MoeSpec {
  int64_t n_experts = 0;  // E routed experts
  int64_t top_k = 0;      // experts per token
  int64_t d_expert = 0;   // each routed expert's hidden width (fine-grained experts: many narrow ones)
  FfnKind expert_kind = FfnKind::kSwiGLU;
  int64_t shared_d_ff = 0;  // width of the shared experts together; 0: none
  RouterKind router = RouterKind::kSoftmaxTopK;
  // Gates divided by their sum over the token's k experts (kSoftmaxTopK, kSigmoidTopK; kTopKSoftmax's sum
  // to 1 already), before route_scale.
  bool normalize_gates = false;
  double route_scale = 1.0;  // every gate times this (DeepSeek-V3: 2.5)
  // Group-limited routing (DeepSeek-V3's node-limited routing): the experts form n_groups groups of
  // consecutive experts; a group scores the sum of its two best selection scores (its best with one
  // expert); a token picks its experts within its topk_groups best groups. 1 and 1: off.
  int64_t n_groups = 1;
  int64_t topk_groups = 1;
  // Capacity: an expert takes at most ceil(capacity_factor * N * top_k / E) of a micro-batch's N tokens,
  // dropping the others per `drop` (a dropped assignment adds nothing; the residual carries the token).
  // 0: dropless.
  double capacity_factor = 0.0;
  DropPolicy drop = DropPolicy::kByPosition;
  // Switch/GShard balancing loss aux_loss * E * sum_i f_i P_i, f_i the share of the top-k assignments that
  // chose expert i, P_i the mean over tokens of expert i's probability: the full softmax over all E (the
  // sigmoid scores normalised over the E experts for kSigmoidTopK). 0: off.
  double aux_loss = 0.0;
  BalanceScope aux_loss_scope = BalanceScope::kMicroBatch;
  // Router z-loss (ST-MoE): router_z_loss * mean over tokens of logsumexp(z)^2. 0: off.
  double router_z_loss = 0.0;
  // DeepSeek-V3's auxiliary-loss-free balancing: a per-expert bias added to the selection scores (never to
  // the gates), updated once per optimizer step by bias_update_rate * sign(mean load - load).
  bool expert_bias = false;
  double bias_update_rate = 1e-3;
  // Noisy top-k gating (Shazeer et al. 2017, eq. 3-5): in training forwards the router selects, gates and
  // computes its losses from H = z + eps * softplus(h W_noise^T), W_noise (E, C) a second router matrix
  // trained with the first, eps ~ N(0, 1) per token and expert drawn by a counter-based hash of (run seed,
  // step, layer, the token's index among the step's tokens, expert) (moe::GatingNoise): a recomputed forward
  // draws the same noise, and data- and expert-parallel layouts draw what one process draws. Evaluation
  // forwards (validation loss, generation) route on z, without noise (ForwardMode, model/layers/layer.h).
  bool noisy_gating = false;

  bool gated_experts() const { return expert_kind == FfnKind::kSwiGLU || expert_kind == FfnKind::kGeGLU; }
};

struct ChannelMixerSpec {
  enum class Kind { kFeedForward, kMoe };
  Kind kind = Kind::kFeedForward;
  FeedForwardSpec feed_forward;  // kFeedForward
  MoeSpec moe;                   // kMoe
};

// One block's layers; the norms around them and the block's structure are the model's (norm_placement,
// parallel_block).
struct LayerSpec {
  TokenMixerSpec token_mixer;
  ChannelMixerSpec channel_mixer;
};

const char* TokenMixerKindName(TokenMixerSpec::Kind kind);
const char* ChannelMixerKindName(ChannelMixerSpec::Kind kind);
const char* RouterKindName(RouterKind kind);
// One line, e.g. "moe(n_experts=8 top_k=2 ...)".
std::string MoeDebugString(const MoeSpec& spec);

// How Validate() names ModelConfig's members in its messages: given a member ("d_ff"), the name to print
// ("model.ffn.d_ff", its path in the experiment config), or nullopt for a member whose value the caller has
// already reported itself (a required config field left out): the rules that name it are skipped.
using ModelFieldNamer = std::function<std::optional<std::string>(std::string_view member)>;

struct ModelConfig {
  int64_t vocab_size = 0;      // V: token ids are in [0, V); the loss's softmax runs over these V logits
  // Rows of the token embedding and of the LM head (and columns of the logits), >= vocab_size; 0 means
  // vocab_size. Padding to a multiple of 64 (GPT-2: 50257 -> 50304) keeps the LM head GEMM fast; the
  // padding rows never receive gradient and their logits are excluded from the loss.
  int64_t padded_vocab_size = 0;
  int64_t context_length = 0;  // longest sequence; size of the learned position table
  int64_t d_model = 0;         // C
  int64_t n_layers = 0;
  int64_t n_heads = 0;         // NH query heads; head size HS = d_model / n_heads
  int64_t n_kv_heads = 0;      // key/value heads: n_heads (MHA), a divisor (GQA), 1 (MQA)
  int64_t d_ff = 0;            // hidden width of the feed-forward
  NormKind norm = NormKind::kRMSNorm;
  double norm_eps = 1e-5;
  NormPlacement norm_placement = NormPlacement::kPre;
  // x + attn(ln1(x)) + ffn(ln2(x)): attention and feed-forward read the same block input (GPT-NeoX: two
  // norms). Pre-norm only.
  bool parallel_block = false;
  // With parallel_block: one norm feeds both branches, x + attn(ln1(x)) + ffn(ln1(x)) (GPT-J, PaLM; no ln2).
  bool parallel_shared_norm = false;
  // QK-norm (Qwen3, Gemma 3): the model's norm kind over each head's HS channels of q and of k, after the
  // projection and before RoPE; one gain (and LayerNorm bias) of HS for q and one for k, shared by the heads.
  bool qk_norm = false;
  // Sliding-window attention (Mistral; Gemma 2's local layers): token t attends to the sliding_window
  // tokens (t - sliding_window, t]; 0: the whole causal prefix. Every layer but the global ones below.
  int64_t sliding_window = 0;
  // With a window: layers global_every, 2 global_every, ... (counting from 1) attend to the whole prefix
  // (Gemma 2: 2, Gemma 3: 6); 0: every layer has the window.
  int64_t global_every = 0;
  // Attention logit soft-capping (Gemma 2: 50): scaled scores s become softcap * tanh(s / softcap); 0: off.
  double attention_softcap = 0.0;
  // Final-logit soft-capping (Gemma 2: 30): the LM head's logits z become c tanh(z / c), c this value, before
  // the softmax, in training and generation alike (logits_tensor() holds the capped values); 0: off.
  double final_logit_softcap = 0.0;
  // z-loss coefficient: each token's training loss is lse - logit[target] + z_loss * lse^2 (PaLM: 1e-4), lse
  // the log of the softmax's normaliser. ForwardWithLoss still returns the cross-entropy; 0: off.
  double z_loss = 0.0;
  FfnKind ffn = FfnKind::kSwiGLU;
  PositionKind positions = PositionKind::kRoPE;
  double rope_theta = 10000.0;  // RoPE base; used only with PositionKind::kRoPE
  bool biases = false;          // biases on every linear layer (q, k, v, output, ffn)
  bool tied_embeddings = false; // LM head reads the token embedding matrix
  InitScheme init = InitScheme::kCs336TruncatedNormal;
  double init_std = 0.02;        // kGpt2Scaled and kMup
  int64_t mup_base_d_model = 0;  // kMup only: the width where kMup is kGpt2Scaled
  // Blocks that differ from one another (hybrid stacks, local and global layers, mixed feed-forwards):
  // layer i is layer_pattern[i % size]. Empty: every layer is the one the fields above describe
  // (n_heads, n_kv_heads, sliding_window with global_every, attention_softcap, qk_norm, ffn, d_ff).
  std::vector<LayerSpec> layer_pattern;
  // A mixture of experts as every layer's channel mixer but the first first_k_dense ones, which keep the
  // dense feed-forward of ffn and d_ff (DeepSeek's first_k_dense_replace). Unset: dense layers. Not with a
  // layer_pattern (whose entries name their own channel mixers).
  std::optional<MoeSpec> moe;
  int64_t first_k_dense = 0;

  int64_t vocab_rows() const { return padded_vocab_size > 0 ? padded_vocab_size : vocab_size; }
  // The default layer's attention (without a layer_pattern, every layer's): head size, NH * HS, NKV * HS.
  int64_t head_size() const { return n_heads > 0 ? d_model / n_heads : 0; }
  int64_t q_width() const { return n_heads * head_size(); }
  int64_t kv_width() const { return n_kv_heads * head_size(); }
  bool gated_ffn() const { return ffn == FfnKind::kSwiGLU || ffn == FfnKind::kGeGLU; }  // has W3
  // Whether some layer of the default layers runs the dense feed-forward of ffn and d_ff.
  bool has_dense_ffn() const { return !moe.has_value() || first_k_dense > 0; }
  int64_t norms_per_block() const {
    return norm_placement == NormPlacement::kDouble ? 4 : parallel_block && parallel_shared_norm ? 1 : 2;
  }
  bool has_final_norm() const { return norm_placement != NormPlacement::kPost; }
  // kMup's width multiplier m = d_model / mup_base_d_model; 1 for the other schemes.
  double mup_width_multiplier() const {
    return init == InitScheme::kMup && mup_base_d_model > 0
               ? static_cast<double>(d_model) / static_cast<double>(mup_base_d_model)
               : 1.0;
  }
  // Layer i's (from 0) token and channel mixers: layer_pattern[i % size], or the default layer (the global
  // layers of sliding_window / global_every attend to the whole prefix).
  LayerSpec layer(int64_t i) const;
  // The distinct layers and how many of each (for counting without walking n_layers layers one by one): the
  // pattern's entries, or the default layer with and without its window.
  struct LayerGroup {
    LayerSpec spec;
    int64_t count = 0;
  };
  std::vector<LayerGroup> layer_groups() const;
  // Layer i's sliding window: 0 for a global attention layer.
  int64_t layer_window(int64_t i) const { return layer(i).token_mixer.attention.window; }
  // True when decoding may run past context_length: no position has an absolute embedding (RoPE or none)
  // and every layer attends over a window no longer than the context. Each decoded token then sees the last
  // W keys of every layer at the relative offsets training saw, so a stream of any length decodes with the
  // cache's rings (Mistral's rolling buffer); a learned or sinusoidal table, or a global layer, ends at the
  // context.
  bool decodes_past_context() const {
    if (positions != PositionKind::kRoPE && positions != PositionKind::kNone) return false;
    for (int64_t i = 0; i < n_layers; ++i) {
      if (layer_window(i) <= 0 || layer_window(i) > context_length) return false;
    }
    return n_layers > 0;
  }

  // Every rule on the model's shape this config breaks, one message per rule in the order of the members,
  // e.g. "n_kv_heads=3 does not divide n_heads=8 (each key/value head must serve the same number of query
  // heads)"; empty when the model can be built. Members are named by `namer` (null: by their own names);
  // enum values are written as a config writes them (ROPE, PRE, MUP).
  std::vector<std::string> Problems(const ModelFieldNamer& namer = nullptr) const;
  // OK, or InvalidArgument with one line "model config: <problem>" per problem of Problems(namer).
  absl::Status Validate(const ModelFieldNamer& namer = nullptr) const;
  // Validate() plus: a batch of sequences of length `seq_len` fits this model.
  absl::Status ValidateSequenceLength(int64_t seq_len) const;

  // One line, e.g. "d_model=768 n_layers=12 ... ffn=gelu positions=learned".
  std::string DebugString() const;
};

// GPT-2 style. GPT-2 small: Gpt2Config(50257, 1024, 768, 12, 12) (set padded_vocab_size = 50304 for speed),
// d_ff = 4 * d_model.
ModelConfig Gpt2Config(int64_t vocab_size, int64_t context_length, int64_t d_model, int64_t n_layers,
                       int64_t n_heads);
// CS336 / Llama style. CS336's TinyStories model: Cs336Config(10000, 256, 512, 4, 16, 1344).
// n_kv_heads defaults to n_heads (MHA).
ModelConfig Cs336Config(int64_t vocab_size, int64_t context_length, int64_t d_model, int64_t n_layers,
                        int64_t n_heads, int64_t d_ff, double rope_theta = 10000.0);

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_CONFIG_CONFIG_H_
