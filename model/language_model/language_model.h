// LanguageModel: a decoder-only transformer built from a ModelConfig: embedding (+ positions), n_layers
// blocks (each a token mixer and a channel mixer with their norms, per ModelConfig::layer(i)), the final norm
// and the LM head (tied to the token embedding or its own lm_head.weight), the optional final-logit
// soft-cap, with the fused softmax cross-entropy loss.
//
//   auto model = LanguageModel::Create(Cs336Config(...), kernels::Context::Cpu());   // StatusOr
//   (*model)->InitializeParameters(/*seed=*/1);
//   absl::StatusOr<double> loss = (*model)->ForwardWithLoss(ids, targets, B, T);    // ids/targets (B, T)
//   loss = (*model)->ForwardWithLoss(ids, targets, B, T, ForwardMode::Training(seed, step, first_token));
//   (*model)->ZeroGrad();  (*model)->Backward();                                     // grads accumulate
//   (*model)->VisitParameters([](const std::string& name, const Parameter& p) { ... });
//
// Training and evaluation: a forward evaluates unless given a training ForwardMode (layer.h); only a layer
// that draws random numbers (noisy top-k gating) tells them apart. A training forward's draws are keyed by
// the run's seed, the step and each token's index among the step's tokens, so RecomputeLayer repeats them.
//
// Activations per micro-batch: what a forward keeps for its backward lives in an Activations the caller owns
// (NewActivations), one per micro-batch in flight; the modules keep none. The calls above use one the model
// holds for convenience; the same calls taking an Activations hold any number at once (a pipeline schedule
// runs several forwards, then their backwards in any order; gradients accumulate either way).
//
// Stage slices: a model may hold only layers [first_layer, last_layer) (LayerRange). The slice that starts at
// layer 0 has the embedding and reads token ids; a later one reads hidden states (B*T, C) from the slice
// before it. The slice that ends at n_layers has the final norm, the LM head and the loss; an earlier one
// outputs hidden states, and its backward takes their gradient from the slice after it. The whole model is
// the slice that holds everything. Parameter names are the whole model's ("layers.7.attn.q_proj.weight"),
// so a checkpoint is the union of its stages'. With tied embeddings, a head-only slice holds its own copy of
// token_embeddings.weight (the pipeline sums the two copies' gradients, as Megatron's embedding group does).
//
// Devices and precision: the model lives on ctx.device (parameters, gradients, activations and scratch all
// come from ctx.allocator) and computes with activations of type `activations`: kF32 on any device whose
// backend runs the ops, kBF16 on CUDA (bf16 weights copies, activations and activation gradients; fp32
// master weights, parameter gradients, statistics and per-token losses; see Parameter). Token ids and
// targets are always passed in host memory and copied to the device; the loss comes back as a host double.
// Not thread-safe; the kernels use ctx's pool (CPU) or stream (CUDA).
//
// Incremental forward (generation), with the same layers and kernels, so on every device and dtype:
//   absl::StatusOr<KvCache> cache = model->NewKvCache(B);
//   model->Prefill(prompt, B, T, *cache);      // prompt (B, T) -> logits_tensor() (B, 1, V) at position T-1
//   model->DecodeStep(next, *cache);           // next (B): one token per sequence -> logits (B, 1, V)
// All sequences of a cache share one length. Prefill and DecodeStep use the model's own Activations, as a
// Forward of another shape does: Backward needs a new ForwardWithLoss after them (until then
// saved_activation_bytes() is 0). Parameters and gradients are not touched; counters() add their FLOPs.
#ifndef LMFORGE_MODEL_LANGUAGE_MODEL_LANGUAGE_MODEL_H_
#define LMFORGE_MODEL_LANGUAGE_MODEL_LANGUAGE_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/core/context.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "model/config/config.h"
#include "model/layers/block/block.h"
#include "model/layers/deferred_weight_grads.h"
#include "model/layers/embedding/embedding.h"
#include "model/layers/layer.h"
#include "model/layers/linear/linear.h"
#include "model/layers/moe/expert_exchange.h"
#include "model/layers/norm/norm.h"
#include "model/layers/parameter.h"

namespace lmf::model {

class LanguageModel;

// The layers a model holds: [first, last), last = -1 meaning n_layers.
struct LayerRange {
  int64_t first = 0;
  int64_t last = -1;
};

// What one micro-batch's forward keeps for its backward, for one model (slice). Made by
// LanguageModel::NewActivations; sized by the first forward of a (B, T) and reused by the next of that shape.
// Move-only; used with the model that made it only, and destroyed before that model's allocator.
class Activations {
 public:
  Activations(Activations&&) = default;
  Activations& operator=(Activations&&) = default;

  int64_t batch() const { return b_; }
  int64_t length() const { return t_; }
  // Bytes kept for the backward (0 when there is nothing a Backward could use).
  int64_t bytes() const;
  // Frees layer i's activations (a layer of this slice, numbered as in the whole model) after the forward;
  // RecomputeLayer rebuilds them before the backward (activation recomputation).
  void ReleaseLayer(int64_t layer);

  // The slice's output: hidden states (B*T, C) for a slice without the head; logits (B, T, vocab_rows) for
  // one with it (their gradient after Backward, which reuses the buffer). On the model's device.
  const void* hidden_output() const;
  const kernels::Tensor& logits() const { return logits_; }
  // The last forward's mean cross-entropy and z-loss term (slices with the head and targets).
  double loss() const { return loss_; }
  double z_loss_term() const { return z_loss_term_; }
  // The sum over this slice's layers of their auxiliary losses in the last forward (a mixture of experts'
  // balancing loss and router z-loss): part of the objective whose gradients Backward computes, not of
  // loss().
  double aux_loss() const { return aux_loss_; }

 private:
  friend class LanguageModel;
  Activations() = default;

  const LanguageModel* model_ = nullptr;
  int64_t b_ = 0, t_ = 0;  // of the last training forward; 0 after Prefill / DecodeStep
  ForwardMode mode_;       // of the last forward (RecomputeLayer runs its layer in it again)
  bool have_loss_ = false;
  EmbeddingActivations embedding_;                       // the first slice's
  kernels::Tensor input_;                                // (B*T, C) a later slice's input (a copy)
  std::vector<std::unique_ptr<BlockActivations>> blocks_;  // this slice's layers
  NormActivations final_norm_;
  const void* head_input_ = nullptr;  // the LM head's input: the final norm's output, or the last block's
  kernels::Tensor targets_;           // (B*T) int32 on the device
  kernels::Tensor logits_;            // (B, T, vocab_rows) activation dtype; their gradient after Backward
  kernels::Tensor lse_;               // (B*T) fp32
  kernels::Tensor losses_;            // (B*T) fp32 per-token losses (not kept for the backward)
  std::vector<float> host_losses_;
  double loss_ = 0, z_loss_term_ = 0, aux_loss_ = 0;
};

// The state of B sequences that share one length, for LanguageModel's incremental forward: each layer's
// decode state (attention: keys and values (B, R, NKV, HS) in the activation dtype on the model's device, R =
// context_length, or the layer's sliding window where it is shorter: a ring of the last W positions, so a
// windowed model's cache does not grow with the context). Made by NewKvCache, filled by Prefill, extended by
// DecodeStep; used with the model that made it only, and destroyed before that model's allocator. Move-only.
class KvCache {
 public:
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;

  int64_t batch() const { return b_; }
  int64_t length() const { return length_; }  // tokens held per sequence
  // Positions it can hold per sequence: context_length, or for a model that decodes past its context
  // (ModelConfig::decodes_past_context: every layer windowed, no position table) 2^31 - 1 (positions are
  // int32 on the device).
  int64_t capacity() const { return capacity_; }
  int64_t bytes() const;  // device memory of the layers' states

 private:
  friend class LanguageModel;
  KvCache() = default;

  const LanguageModel* model_ = nullptr;
  int64_t b_ = 0, capacity_ = 0, length_ = 0;
  std::vector<std::unique_ptr<DecodeState>> layers_;
  kernels::Tensor position_;  // (1) int32 on the model's device: the position of the token being decoded
};

// One micro-batch's input to a slice: B sequences of T tokens; token ids (B, T) int32 in HOST memory for the
// first slice, or hidden states (B*T, C) in the activation dtype on the model's device (the previous slice's
// output, copied into the activations) for a later one; targets (B, T) int32 in host memory for the last
// slice to compute the loss (null: logits only).
struct StageInput {
  int64_t b = 0, t = 0;
  const int32_t* ids = nullptr;
  const void* hidden = nullptr;
  const int32_t* targets = nullptr;
};

class LanguageModel {
 public:
  // Fails with the config's Validate() message when the config cannot work, with InvalidArgument for a
  // layer range outside [0, n_layers] or empty, and with InvalidArgument naming the op or limit when ctx's
  // device cannot run it with `activations` (e.g. "precision BF16 runs on CUDA only", or a head size the CUDA
  // attention kernel lacks). Parameters start at zero; call InitializeParameters or load them through
  // VisitParameters (then RefreshComputeWeights). With `expert_exchange` (expert parallelism, kept by the
  // caller for the model's lifetime), each mixture-of-experts layer holds only this rank's block of its
  // experts and exchanges rows through it (model/layers/moe/expert_exchange.h); InvalidArgument when a
  // layer's experts do not divide over its ranks.
  static absl::StatusOr<std::unique_ptr<LanguageModel>> Create(const ModelConfig& config, kernels::Context ctx,
                                                               kernels::DType activations = kernels::DType::kF32,
                                                               LayerRange layers = {},
                                                               moe::ExpertExchange* expert_exchange = nullptr);
  ~LanguageModel();

  const ModelConfig& config() const { return config_; }
  const kernels::Context& context() const { return ctx_; }
  kernels::DType activation_dtype() const { return dtype_; }
  int64_t first_layer() const { return first_layer_; }
  int64_t last_layer() const { return last_layer_; }
  bool has_embedding() const { return first_layer_ == 0; }
  bool has_head() const { return last_layer_ == config_.n_layers; }

  // Draws every parameter per config().init from `seed`, by the kind its layer declared (init.h). Each
  // parameter's stream is seeded from (seed, its name), so the values do not depend on the visiting order,
  // and a slice draws what the whole model draws for its parameters. The values are drawn on the host (the
  // same on every device) and copied; the compute copies are refreshed.
  void InitializeParameters(uint64_t seed);
  // The factor on the optimizer's learning rate for a parameter of this model: muP's 1 / m for the
  // blocks' matrices and the LM head (InitScheme::kMup), 1 for everything else and every other scheme.
  double LearningRateScale(const std::string& name, const Parameter& p) const;
  // Rounds every parameter's fp32 master `value` into its `compute` copy: needed after writing `value`
  // only (loading weights, an update that skips the copy). A no-op for f32 activations (compute is value).
  void RefreshComputeWeights();

  Activations NewActivations() const;

  // The whole model (a slice holding the embedding and the head), with the caller's activations, in
  // evaluation. ids (B, T) int32 in host memory -> logits (B, T, V). InvalidArgument for T > context_length
  // or ids outside [0, V).
  absl::Status Forward(const int32_t* ids, int64_t b, int64_t t, Activations& activations);
  // Forward plus the mean cross-entropy against host targets (B, T) int32 in [0, V), in `mode` (training
  // forwards pass ForwardMode::Training). The mean is taken in double over the fp32 per-token losses. With
  // config.z_loss > 0 the training objective also has the z-loss term (activations.z_loss_term()); the
  // returned value is the cross-entropy alone.
  absl::StatusOr<double> ForwardWithLoss(const int32_t* ids, const int32_t* targets, int64_t b, int64_t t,
                                         Activations& activations, const ForwardMode& mode = ForwardMode());
  // Gradients of that forward's mean loss (cross-entropy plus the z-loss term), accumulated into every
  // parameter's grad. The logits buffer is reused for their gradient.
  void Backward(Activations& activations);

  // Any slice. The input names what this slice reads (ids or hidden) and, for the last slice, the targets;
  // `mode` as for ForwardWithLoss (the model sets mode.layer for each layer).
  absl::Status ForwardStage(const StageInput& input, Activations& activations,
                            const ForwardMode& mode = ForwardMode());
  // doutput (B*T, C): the gradient of this slice's hidden output, from the next slice (null for the last
  // slice, whose backward starts at its loss). dinput (B*T, C): written with the gradient of this slice's
  // hidden input, for the previous slice (null for the first slice, whose backward ends in the embedding).
  // With `deferred` (a zero-bubble schedule's split backward, B): the weight gradients that cost GEMMs (every
  // Linear's weight and bias, the experts', the LM head's) and the embedding tables' are queued there, not
  // computed; norm gains are. The caller runs deferred->Run(context()) later (W), keeping `activations`
  // alive and unchanged until then; the gradients are then bit for bit those of a backward without it. Not
  // with SetBackwardProgress (no part's gradients are final after B).
  void BackwardStage(Activations& activations, const void* doutput, void* dinput,
                     DeferredWeightGrads* deferred = nullptr);
  // Runs layer `layer`'s forward again from its saved input, into activations whose layer was Released:
  // the same values, bit for bit (activation recomputation; in the mode of the forward that made them).
  void RecomputeLayer(int64_t layer, Activations& activations);

  // The same calls on the model's own activations.
  absl::Status Forward(const int32_t* ids, int64_t b, int64_t t);
  absl::StatusOr<double> ForwardWithLoss(const int32_t* ids, const int32_t* targets, int64_t b, int64_t t,
                                         const ForwardMode& mode = ForwardMode());
  double z_loss_term() const { return own_.z_loss_term(); }
  double aux_loss() const { return own_.aux_loss(); }
  void Backward();
  // Sets every parameter gradient to zero (on the model's device); nothing to do when an optimizer step
  // zeroed them all in its own pass and no backward ran since (GradsZeroedByOptimizer).
  void ZeroGrad();
  // For an optimizer that has just set every parameter gradient to zero in its update's pass (AdamW's
  // zero_grads): the next ZeroGrad has nothing to do. Any backward ends this. Call it only right after such
  // an update: gradients written by other means before the next ZeroGrad would not be cleared by it.
  void GradsZeroedByOptimizer() { grads_zero_ = true; }

  // A cache for B sequences (InvalidArgument for B <= 0; a whole model only); empty until Prefill.
  absl::StatusOr<KvCache> NewKvCache(int64_t b) const;
  // ids (B, T) int32 in host memory, B == cache.batch(): the causal forward over positions [0, T), keeping
  // every layer's state in `cache` (which restarts: length T) -> logits_tensor() (B, 1, vocab_rows)
  // predicting position T. InvalidArgument as Forward, or for a cache of another batch size or model.
  absl::Status Prefill(const int32_t* ids, int64_t b, int64_t t, KvCache& cache);
  // ids (B) int32 in host memory: one token per sequence at position cache.length(), attending over the
  // cache -> logits_tensor() (B, 1, vocab_rows) predicting the next position; the cache grows by one.
  // FailedPrecondition for an empty cache (Prefill first) or a full one (length == capacity());
  // InvalidArgument for ids outside [0, V) or a cache of another model.
  absl::Status DecodeStep(const int32_t* ids, KvCache& cache);

  // The model's own activations' logits: (B, T, vocab_rows) after Forward / ForwardWithLoss (padding columns
  // are plain outputs of the LM head); (B, 1, vocab_rows) after Prefill / DecodeStep.
  // logits(): host floats, for f32 CPU models only (aborts otherwise); logits_tensor(): on the model's
  // device in the activation dtype, for any model.
  const float* logits() const;
  const kernels::Tensor& logits_tensor() const { return own_.logits(); }

  // Every parameter, by checkpoint name (see tools/model/reference.py), in a fixed order: embeddings,
  // layers.{first} .. layers.{last-1}, ln_final (not with post-norm), lm_head (untied only).
  void VisitParameters(const ParameterVisitor& visit) const;
  int64_t parameter_count() const;
  // Model state that is not a trained parameter (a mixture of experts' expert-selection bias, named
  // "layers.{i}.ffn.router.expert_bias"), fp32 on the model's device: a checkpoint saves and loads it with
  // the parameters. None for a dense model.
  void VisitBuffers(const BufferVisitor& visit) const;
  // What the backwards since the last EndStep counted for that state's update ("layers.{i}.ffn.router.
  // expert_load": the tokens routed to each expert); a data-parallel step sums them over the processes.
  void VisitStepCounts(const BufferVisitor& visit) const;
  // Once per optimizer step, after the update: each layer updates its state from the counts and clears them
  // (the auxiliary-loss-free bias moves toward balance). Nothing for a dense model.
  void EndStep();

  // Backward progress, for overlapping gradient communication with the backward (data parallelism's
  // buckets). During each backward, `ready` is called as soon as a part's gradients are final for that
  // backward: the head (final norm, untied LM head) first, then each block from the last to the first, then
  // the embeddings (the token and position tables; a tied table, which the head also reaches, is here).
  // Null: none. VisitPartParameters visits one part's parameters.
  struct ModelPart {
    enum Kind { kHead, kBlock, kEmbedding };
    Kind kind = kHead;
    int64_t layer = -1;  // kBlock: the layer, numbered as in the whole model
  };
  void SetBackwardProgress(std::function<void(const ModelPart& part)> ready) { backward_progress_ = std::move(ready); }
  void VisitPartParameters(const ModelPart& part, const ParameterVisitor& visit) const;

  // Bytes the model's own activations keep for the backward.
  int64_t saved_activation_bytes() const { return own_.bytes(); }
  // FLOPs run since the last ResetCounters (matmuls and the causal attention products).
  const StepCounters& counters() const { return counters_; }
  void ResetCounters() { counters_ = StepCounters(); }

 private:
  LanguageModel(const ModelConfig& config, kernels::Context ctx, kernels::DType dtype, LayerRange layers,
                moe::ExpertExchange* expert_exchange);
  absl::Status CheckBatch(const int32_t* tokens, const char* what, int64_t b, int64_t t) const;
  absl::Status CheckStageInput(const StageInput& input) const;
  absl::Status CheckActivations(const Activations& activations) const;
  void EnsureLogits(Activations& activations, int64_t b, int64_t t) const;
  absl::Status CheckCache(const KvCache& cache, int64_t b) const;
  // The embedding (or the copied hidden input) and this slice's blocks -> the last block's output (B*T, C);
  // with `cache`, each layer's state is written into it.
  const void* RunBlocks(const StageInput& input, Activations& activations, KvCache* cache,
                        const ForwardMode& mode = ForwardMode());
  // Block i's input: the previous block's output, or the slice's input.
  const void* LayerInput(const Activations& activations, int64_t layer) const;
  // The LM head's input for the last block's output x (n, C): the final norm's output, or x itself for a
  // post-norm model (its blocks end in a norm).
  const void* FinalNorm(int64_t n, const void* x, Activations& activations) const;
  // config.final_logit_softcap over the first `rows` rows of the logits, in place (nothing when it is 0).
  void CapLogits(Activations& activations, int64_t rows) const;
  absl::Status ComputeLoss(const int32_t* targets, Activations& activations) const;
  kernels::CrossEntropyParams LossParams(Activations& activations) const;
  const Parameter& head_table() const;

  ModelConfig config_;
  kernels::Context ctx_;
  kernels::DType dtype_;
  int64_t first_layer_ = 0, last_layer_ = 0;
  StepCounters counters_;
  std::function<void(const ModelPart&)> backward_progress_;
  std::optional<Embedding> embedding_;              // the first slice only
  std::vector<std::unique_ptr<Block>> blocks_;      // layers [first_layer_, last_layer_)
  std::optional<Norm> final_norm_;                  // the last slice, not for post-norm
  std::optional<Parameter> tied_table_;             // a head-only slice's copy of the tied token table
  std::unique_ptr<Linear> lm_head_;                 // the last slice
  Activations own_;
  bool grads_zero_ = false;                         // every parameter gradient is known to be zero
  kernels::Tensor dresidual_;                       // (N, C) the residual gradient between blocks
  Scratch scratch_;
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LANGUAGE_MODEL_LANGUAGE_MODEL_H_
