// LanguageModel: the dense decoder-only transformer built from a ModelConfig: embedding (+ positions),
// n_layers blocks, the final norm and the LM head (tied to the token embedding or its own lm_head.weight),
// the optional final-logit soft-cap, with the fused softmax cross-entropy loss.
//
//   auto model = LanguageModel::Create(Cs336Config(...), kernels::Context::Cpu());   // StatusOr
//   (*model)->InitializeParameters(/*seed=*/1);
//   absl::StatusOr<double> loss = (*model)->ForwardWithLoss(ids, targets, B, T);    // ids/targets (B, T)
//   (*model)->ZeroGrad();  (*model)->Backward();                                     // grads accumulate
//   (*model)->VisitParameters([](const std::string& name, const Parameter& p) { ... });
//
// Devices and precision: the model lives on ctx.device (parameters, gradients, step state and workspace all
// come from ctx.allocator) and computes with activations of type `activations`: kF32 on any device whose
// backend runs the ops, kBF16 on CUDA (bf16 weights copies, activations and activation gradients; fp32
// master weights, parameter gradients, statistics and per-token losses; see Parameter). Token ids and
// targets are always passed in host memory and copied to the device; the loss comes back as a host double.
//
// The model owns its step state (everything the forward keeps for the backward) and a backward workspace,
// both sized on the first forward of a given (B, T). Not thread-safe; the kernels use ctx's pool (CPU) or
// stream (CUDA).
//
// Incremental forward (generation), with the same modules and kernels, so on every device and dtype:
//   absl::StatusOr<KvCache> cache = model->NewKvCache(B);
//   model->Prefill(prompt, B, T, *cache);      // prompt (B, T) -> logits_tensor() (B, 1, V) at position T-1
//   model->DecodeStep(next, *cache);           // next (B): one token per sequence -> logits (B, 1, V)
// All sequences of a cache share one length. Prefill and DecodeStep replace the step state (the modules'
// saved activations and the logits) as a Forward of another shape does: Backward needs a new
// ForwardWithLoss after them (until then saved_activation_bytes() is 0). Parameters, gradients and the
// backward workspace are not touched; counters() add their FLOPs.
#ifndef LMFORGE_MODEL_LANGUAGE_MODEL_LANGUAGE_MODEL_H_
#define LMFORGE_MODEL_LANGUAGE_MODEL_LANGUAGE_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/core/context.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "model/config/config.h"
#include "model/layers/attention.h"
#include "model/layers/block.h"
#include "model/layers/embedding.h"
#include "model/layers/linear.h"
#include "model/layers/norm.h"
#include "model/layers/parameter.h"

namespace lmf::model {

class LanguageModel;

// The keys and values of B sequences that share one length, for LanguageModel's incremental forward: per
// layer K and V (B, R, NKV, HS) in the activation dtype on the model's device (from ctx.allocator), R =
// context_length, or the layer's sliding window where it is shorter (a ring of the last W positions: a
// windowed model's cache does not grow with the context). Made by LanguageModel::NewKvCache, filled by
// Prefill, extended by DecodeStep; used with the model that made it only, and destroyed before that model's
// allocator. Move-only.
class KvCache {
 public:
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;

  int64_t batch() const { return b_; }
  int64_t length() const { return length_; }      // tokens held per sequence
  // Positions it can hold per sequence: context_length, or for a model that decodes past its context
  // (ModelConfig::decodes_past_context: every layer windowed, no position table) 2^31 - 1 (positions are
  // int32 on the device).
  int64_t capacity() const { return capacity_; }
  int64_t bytes() const;                          // device memory of the keys and values

 private:
  friend class LanguageModel;
  KvCache() = default;

  const LanguageModel* model_ = nullptr;
  int64_t b_ = 0, capacity_ = 0, length_ = 0;
  std::vector<LayerKvCache> layers_;
  kernels::Tensor position_;  // (1) int32 on the model's device: the position of the token being decoded
};

class LanguageModel {
 public:
  // Fails with the config's Validate() message when the config cannot work, and with InvalidArgument naming
  // the op or limit when ctx's device cannot run it with `activations` (e.g. "precision BF16 runs on CUDA
  // only", or a head size the CUDA attention kernel lacks). Parameters start at zero; call
  // InitializeParameters or load them through VisitParameters (then RefreshComputeWeights).
  static absl::StatusOr<std::unique_ptr<LanguageModel>> Create(const ModelConfig& config, kernels::Context ctx,
                                                               kernels::DType activations = kernels::DType::kF32);

  const ModelConfig& config() const { return config_; }
  const kernels::Context& context() const { return ctx_; }
  kernels::DType activation_dtype() const { return dtype_; }

  // Draws every parameter per config().init from `seed`. Each parameter's stream is seeded from (seed,
  // its name), so the values do not depend on the visiting order. Schemes: see InitScheme in config.h. The
  // values are drawn on the host (the same on every device) and copied; the compute copies are refreshed.
  void InitializeParameters(uint64_t seed);
  // The factor on the optimizer's learning rate for parameter `name` (as VisitParameters names it): muP's
  // 1 / m for the blocks' matrices and the LM head (InitScheme::kMup), 1 for everything else and for every
  // parameter of the other schemes.
  double LearningRateScale(const std::string& name, const Parameter& p) const;
  // Rounds every parameter's fp32 master `value` into its `compute` copy: needed after writing `value`
  // only (loading weights, an update that skips the copy). A no-op for f32 activations (compute is value).
  void RefreshComputeWeights();

  // ids (B, T) int32 in host memory -> logits (B, T, V). InvalidArgument for T > context_length or ids
  // outside [0, V).
  absl::Status Forward(const int32_t* ids, int64_t b, int64_t t);
  // Forward plus the mean cross-entropy against host targets (B, T) int32 in [0, V); keeps what Backward
  // needs. The mean is taken in double over the fp32 per-token losses. With config.z_loss > 0 the training
  // objective also has the z-loss term (z_loss_term()); the returned value is the cross-entropy alone.
  absl::StatusOr<double> ForwardWithLoss(const int32_t* ids, const int32_t* targets, int64_t b, int64_t t);
  // The last ForwardWithLoss's mean z_loss * lse^2 over the tokens (0 when config.z_loss is 0).
  double z_loss_term() const { return z_loss_term_; }
  // Gradients of the last ForwardWithLoss's mean loss (cross-entropy plus the z-loss term), accumulated into
  // every parameter's grad. The logits buffer is reused for their gradient, so logits() is no longer valid
  // after it.
  void Backward();
  // Sets every parameter gradient to zero (on the model's device).
  void ZeroGrad();

  // A cache for B sequences (InvalidArgument for B <= 0); empty until Prefill.
  absl::StatusOr<KvCache> NewKvCache(int64_t b) const;
  // ids (B, T) int32 in host memory, B == cache.batch(): the causal forward over positions [0, T), keeping
  // every layer's post-RoPE keys and values in `cache` (which restarts: length T) -> logits_tensor()
  // (B, 1, vocab_rows) predicting position T. InvalidArgument as Forward, or for a cache of another batch
  // size or model.
  absl::Status Prefill(const int32_t* ids, int64_t b, int64_t t, KvCache& cache);
  // ids (B) int32 in host memory: one token per sequence at position cache.length(), attending over the
  // cache -> logits_tensor() (B, 1, vocab_rows) predicting the next position; the cache grows by one.
  // FailedPrecondition for an empty cache (Prefill first) or a full one (length == capacity());
  // InvalidArgument for ids outside [0, V) or a cache of another model.
  absl::Status DecodeStep(const int32_t* ids, KvCache& cache);

  // (B, T, vocab_rows) after Forward / ForwardWithLoss (padding columns are plain outputs of the LM head);
  // (B, 1, vocab_rows) after Prefill / DecodeStep.
  // logits(): host floats, for f32 CPU models only (aborts otherwise); logits_tensor(): on the model's
  // device in the activation dtype, for any model.
  const float* logits() const;
  const kernels::Tensor& logits_tensor() const { return logits_; }

  // Every parameter, by checkpoint name (see tools/model/reference.py), in a fixed order: embeddings,
  // layers.0 .. layers.{L-1}, ln_final (not with post-norm), lm_head (untied only).
  void VisitParameters(const ParameterVisitor& visit) const;
  int64_t parameter_count() const;

  // Bytes of step state the last forward kept for the backward (sums what each module owns).
  int64_t saved_activation_bytes() const;
  // FLOPs run since the last ResetCounters (matmuls and the causal attention products).
  const StepCounters& counters() const { return counters_; }
  void ResetCounters() { counters_ = StepCounters(); }

 private:
  LanguageModel(const ModelConfig& config, kernels::Context ctx, kernels::DType dtype);
  absl::Status CheckBatch(const int32_t* tokens, const char* what, int64_t b, int64_t t) const;
  void EnsureWorkspace(int64_t n);
  void EnsureLogits(int64_t b, int64_t t);
  absl::Status CheckCache(const KvCache& cache, int64_t b) const;
  // Embedding and blocks over ids (B, T) -> the last block's output (B*T, C); with `cache`, each layer's
  // keys and values are written into it.
  const void* RunBlocks(const int32_t* ids, int64_t b, int64_t t, KvCache* cache);
  // The LM head's input for the last block's output x (n, C): the final norm's output, or x itself for a
  // post-norm model (its blocks end in a norm).
  const void* FinalNorm(int64_t n, const void* x);
  // config.final_logit_softcap over the first `rows` rows of logits_, in place (nothing when it is 0).
  void CapLogits(int64_t rows);
  kernels::CrossEntropyParams LossParams();

  ModelConfig config_;
  kernels::Context ctx_;
  kernels::DType dtype_;
  StepCounters counters_;
  Embedding embedding_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::optional<Norm> final_norm_;  // absent for post-norm
  std::unique_ptr<Linear> lm_head_;
  // Step state.
  int64_t b_ = 0, t_ = 0;  // of the last training Forward; 0 after Prefill / DecodeStep
  bool have_loss_ = false;
  const void* head_input_ = nullptr;  // the LM head's input of the last training Forward
  kernels::Tensor targets_;      // (B*T) int32 on the device
  kernels::Tensor logits_;       // (B, T, vocab_rows) activation dtype; their gradient after Backward
  kernels::Tensor lse_;          // (B*T) fp32
  kernels::Tensor losses_;       // (B*T) fp32 per-token losses of the last ForwardWithLoss (not step state)
  std::vector<float> host_losses_;
  double z_loss_term_ = 0;
  BackwardWorkspace workspace_;
  int64_t workspace_rows_ = 0;
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LANGUAGE_MODEL_LANGUAGE_MODEL_H_
