// LanguageModel: assembly of the layers (a whole model or a stage slice), batch validation, initialisation,
// the forward and backward of a micro-batch over caller-owned activations, and the loss.
#include "model/language_model/language_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/activations/activations.h"
#include "kernels/cast/cast.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/memory/memory.h"
#include "model/language_model/init.h"
#include "model/layers/mixers.h"

namespace lmf::model {
namespace {

// Whether ctx's device can run layers [first, last) of `config` (with the embedding and the head where the
// range includes them) with activations of type `dtype`: every op, asked of the backends built into this
// binary, and each layer's own limits (the attention kernels' head sizes).
absl::Status CheckDeviceSupport(const ModelConfig& config, const kernels::Context& ctx, kernels::DType dtype,
                                int64_t first, int64_t last) {
  const std::string precision = PrecisionName(dtype);  // as run.precision says
  if (dtype != kernels::DType::kF32 && dtype != kernels::DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat("LanguageModel: activation dtype ", precision,
                                                   " is not supported (precision is F32 or BF16)"));
  }
  if (ctx.allocator == nullptr) return absl::InvalidArgumentError("LanguageModel: the context has no allocator");
  if (ctx.allocator->device() != ctx.device) {
    return absl::InvalidArgumentError(absl::StrCat("LanguageModel: the context's allocator is not on its device ",
                                                   DeviceName(ctx.device)));
  }
  if (ctx.device.is_cpu()) {
    if (ctx.pool == nullptr) return absl::InvalidArgumentError("LanguageModel: a CPU context needs a thread pool");
  }
  std::vector<const char*> ops = {"residual", config.norm == NormKind::kLayerNorm ? "layernorm" : "rmsnorm"};
  if (first == 0) ops.push_back("embedding");
  if (last == config.n_layers) {
    ops.insert(ops.end(), {"matmul", "cross_entropy"});
    if (config.final_logit_softcap > 0) ops.push_back("activation");  // CapLogits
  }
  if (dtype != kernels::DType::kF32) ops.push_back("cast");  // RefreshComputeWeights rounds the weights
  if (absl::Status s = CheckOpsSupported(ops, ctx.device, dtype); !s.ok()) return s;
  for (int64_t i = first; i < last; ++i) {
    if (absl::Status s = CheckLayerSupport(config.layer(i), config, ctx.device, dtype); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LanguageModel>> LanguageModel::Create(const ModelConfig& config,
                                                                     kernels::Context ctx,
                                                                     kernels::DType activations,
                                                                     LayerRange layers,
                                                                     moe::ExpertExchange* expert_exchange) {
  if (absl::Status status = config.Validate(); !status.ok()) return status;
  if (expert_exchange != nullptr) {
    for (int64_t i = 0; i < config.n_layers; ++i) {
      const LayerSpec spec = config.layer(i);
      if (spec.channel_mixer.kind == ChannelMixerSpec::Kind::kMoe &&
          spec.channel_mixer.moe.n_experts % expert_exchange->ranks() != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "expert parallelism: layer ", i, "'s n_experts=", spec.channel_mixer.moe.n_experts,
            " does not divide over the ", expert_exchange->ranks(), " expert-parallel ranks"));
      }
    }
  }
  if (layers.last < 0) layers.last = config.n_layers;
  if (layers.first < 0 || layers.first >= layers.last || layers.last > config.n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("LanguageModel: layers [", layers.first, ", ", layers.last,
                                                   ") are not a non-empty range of the model's n_layers=",
                                                   config.n_layers));
  }
  if (absl::Status status = CheckDeviceSupport(config, ctx, activations, layers.first, layers.last);
      !status.ok()) {
    return status;
  }
  return std::unique_ptr<LanguageModel>(new LanguageModel(config, ctx, activations, layers, expert_exchange));
}

LanguageModel::LanguageModel(const ModelConfig& config, kernels::Context ctx, kernels::DType dtype,
                             LayerRange layers, moe::ExpertExchange* expert_exchange)
    : config_(config),
      ctx_(ctx),
      dtype_(dtype),
      first_layer_(layers.first),
      last_layer_(layers.last),
      scratch_(ctx.allocator) {
  if (has_embedding()) embedding_.emplace(config, ctx, dtype);
  if (has_head() && config.has_final_norm()) final_norm_.emplace(config.norm, config.d_model, config.norm_eps, ctx, dtype);
  for (int64_t i = first_layer_; i < last_layer_; ++i) {
    const LayerSpec spec = config.layer(i);
    blocks_.push_back(std::make_unique<Block>(config, MakeTokenMixer(spec.token_mixer, config, ctx, dtype, &counters_),
                                              MakeChannelMixer(spec.channel_mixer, config, ctx, dtype, &counters_,
                                                                               expert_exchange),
                                              ctx, dtype));
  }
  if (has_head()) {
    if (!config.tied_embeddings) {
      lm_head_ = std::make_unique<Linear>(config.d_model, config.vocab_rows(), /*bias=*/false,
                                          ParameterKind::kOutputMatrix, ctx, dtype, &counters_);
    } else if (embedding_) {
      lm_head_ = std::make_unique<Linear>(embedding_->token_table(), dtype, &counters_);
    } else {
      tied_table_ = Parameter::Zeros({config.vocab_rows(), config.d_model}, TokenTableKind(config), ctx, dtype);
      lm_head_ = std::make_unique<Linear>(*tied_table_, dtype, &counters_);
    }
  }
  own_ = NewActivations();
}

LanguageModel::~LanguageModel() = default;

Activations LanguageModel::NewActivations() const {
  Activations activations;
  activations.model_ = this;
  for (const auto& block : blocks_) activations.blocks_.push_back(block->NewActivations());
  return activations;
}

void LanguageModel::InitializeParameters(uint64_t seed) {
  std::vector<float> values;
  VisitParameters([&](const std::string& name, const Parameter& p) {
    DrawInitialValues(config_, seed, name, p, values);
    kernels::CopyToDevice(ctx_, p.value.data(), values.data(), p.value.nbytes());
  });
  RefreshComputeWeights();
}

double LanguageModel::LearningRateScale(const std::string&, const Parameter& p) const {
  return model::LearningRateScale(config_, p.kind);
}

void LanguageModel::RefreshComputeWeights() {
  if (dtype_ == kernels::DType::kF32) return;  // compute is value
  // On the model's device, one cast per parameter (kernels/cast: the same rounding as FloatToBF16).
  VisitParameters([&](const std::string&, const Parameter& p) {
    if (p.compute.dtype() == kernels::DType::kF32) return;  // kept fp32 in a bf16 model (a router): compute is value
    kernels::Cast(ctx_, kernels::CastParams{p.value.numel(), kernels::DType::kF32, p.compute.dtype(),
                                            p.value.data(), p.compute.data()});
  });
}

absl::Status LanguageModel::CheckBatch(const int32_t* tokens, const char* what, int64_t b, int64_t t) const {
  if (b <= 0) return absl::InvalidArgumentError(absl::StrCat("batch size ", b, " must be positive"));
  if (absl::Status status = config_.ValidateSequenceLength(t); !status.ok()) return status;
  for (int64_t i = 0; i < b * t; ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(what, "[", i / t, ", ", i % t, "] = ", tokens[i],
                                                     " is outside the vocabulary [0, ", config_.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status LanguageModel::CheckActivations(const Activations& activations) const {
  if (activations.model_ != this) return absl::InvalidArgumentError("the activations were made by another model");
  return absl::OkStatus();
}

absl::Status LanguageModel::CheckStageInput(const StageInput& input) const {
  const std::string slice = absl::StrCat("layers [", first_layer_, ", ", last_layer_, ")");
  if (input.targets != nullptr) {
    if (!has_head()) {
      return absl::InvalidArgumentError(absl::StrCat("targets given to ", slice, ", which has no LM head"));
    }
    if (absl::Status s = CheckBatch(input.targets, "targets", input.b, input.t); !s.ok()) return s;
  }
  if (has_embedding()) {
    if (input.ids == nullptr) return absl::InvalidArgumentError(absl::StrCat(slice, " reads token ids; none given"));
    return CheckBatch(input.ids, "ids", input.b, input.t);
  }
  if (input.hidden == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(slice, " reads hidden states; none given"));
  }
  if (input.b <= 0) return absl::InvalidArgumentError(absl::StrCat("batch size ", input.b, " must be positive"));
  return config_.ValidateSequenceLength(input.t);
}

const void* LanguageModel::LayerInput(const Activations& activations, int64_t layer) const {
  const size_t i = static_cast<size_t>(layer - first_layer_);
  if (i > 0) return activations.blocks_[i - 1]->output;
  return embedding_ ? activations.embedding_.output() : activations.input_.data();
}

const void* LanguageModel::RunBlocks(const StageInput& input, Activations& activations, KvCache* cache,
                                     const ForwardMode& mode) {
  const int64_t b = input.b, t = input.t;
  if (embedding_) {
    embedding_->Forward(ctx_, b, t, input.ids, /*first_position=*/0, activations.embedding_);
  } else {
    kernels::Tensor& copy = activations.input_;
    if (!copy.defined() || copy.dim(0) != b * t) {
      copy = kernels::Tensor::Empty({b * t, config_.d_model}, dtype_, ctx_.allocator);
    }
    kernels::CopyOnDevice(ctx_, copy.data(), input.hidden, copy.nbytes());
  }
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const int64_t layer = first_layer_ + static_cast<int64_t>(i);
    ForwardMode layer_mode = mode;
    layer_mode.layer = layer;
    blocks_[i]->Forward(ctx_, b, t, LayerInput(activations, layer), *activations.blocks_[i], layer_mode,
                        cache == nullptr ? nullptr : cache->layers_[i].get());
  }
  return activations.blocks_.back()->output;
}

const void* LanguageModel::FinalNorm(int64_t n, const void* x, Activations& activations) const {
  if (!final_norm_) return x;
  final_norm_->Forward(ctx_, n, x, activations.final_norm_);
  return activations.final_norm_.output();
}

void LanguageModel::CapLogits(Activations& activations, int64_t rows) const {
  if (config_.final_logit_softcap <= 0) return;
  // In place over whole rows (the padding columns too: plain outputs either way, excluded from the loss).
  void* logits = activations.logits_.data();
  kernels::ActivationForward(ctx_, kernels::ActivationForwardParams{
                                       dtype_, kernels::Activation::kSoftCap, rows * config_.vocab_rows(),
                                       logits, logits, static_cast<float>(config_.final_logit_softcap)});
}

void LanguageModel::EnsureLogits(Activations& activations, int64_t b, int64_t t) const {
  if (activations.logits_.defined() && activations.logits_.dim(0) == b && activations.logits_.dim(1) == t) return;
  activations.logits_ = kernels::Tensor::Empty({b, t, config_.vocab_rows()}, dtype_, ctx_.allocator);
  activations.lse_ = kernels::Tensor::Empty({b * t}, kernels::DType::kF32, ctx_.allocator);
}

absl::Status LanguageModel::ForwardStage(const StageInput& input, Activations& activations,
                                         const ForwardMode& mode) {
  if (absl::Status s = CheckActivations(activations); !s.ok()) return s;
  if (absl::Status s = CheckStageInput(input); !s.ok()) return s;
  const int64_t b = input.b, t = input.t, n = b * t;
  activations.have_loss_ = false;
  activations.b_ = b;
  activations.t_ = t;
  activations.mode_ = mode;
  const void* x = RunBlocks(input, activations, nullptr, mode);
  activations.aux_loss_ = 0;
  for (const auto& block : activations.blocks_) activations.aux_loss_ += block->channel->aux_loss();
  if (!has_head()) return absl::OkStatus();
  EnsureLogits(activations, b, t);
  activations.head_input_ = FinalNorm(n, x, activations);
  lm_head_->Forward(ctx_, n, activations.head_input_, config_.d_model, activations.logits_.data(),
                    config_.vocab_rows(), /*accumulate=*/false);
  CapLogits(activations, n);
  if (input.targets == nullptr) return absl::OkStatus();
  return ComputeLoss(input.targets, activations);
}

absl::Status LanguageModel::ComputeLoss(const int32_t* targets, Activations& activations) const {
  const int64_t n = activations.b_ * activations.t_;
  if (!activations.targets_.defined() || activations.targets_.numel() != n) {
    activations.targets_ = kernels::Tensor::Empty({n}, kernels::DType::kI32, ctx_.allocator);
    activations.losses_ = kernels::Tensor::Empty({n}, kernels::DType::kF32, ctx_.allocator);
  }
  kernels::CopyToDevice(ctx_, activations.targets_.data(), targets, activations.targets_.nbytes());
  // The forward without the z-loss (z_loss = 0): per-token cross-entropies and the lse, which the backward
  // reads with the config's z_loss; the z-loss term is then z * lse^2 from the same lse.
  kernels::CrossEntropyParams p = LossParams(activations);
  p.losses = activations.losses_.data<float>();
  kernels::CrossEntropyForward(ctx_, p);
  activations.have_loss_ = true;
  std::vector<float>& host = activations.host_losses_;
  host.resize(static_cast<size_t>(n));
  kernels::CopyToHost(ctx_, host.data(), activations.losses_.data(), activations.losses_.nbytes());
  double sum = 0;
  for (float loss : host) sum += loss;
  activations.z_loss_term_ = 0;
  if (config_.z_loss > 0) {
    kernels::CopyToHost(ctx_, host.data(), activations.lse_.data(), static_cast<size_t>(n) * sizeof(float));
    double squares = 0;
    for (float lse : host) squares += static_cast<double>(lse) * lse;
    activations.z_loss_term_ = config_.z_loss * squares / static_cast<double>(n);
  }
  activations.loss_ = sum / static_cast<double>(n);
  return absl::OkStatus();
}

kernels::CrossEntropyParams LanguageModel::LossParams(Activations& activations) const {
  kernels::CrossEntropyParams p;
  p.dtype = dtype_;
  p.N = activations.b_ * activations.t_;
  p.V = config_.vocab_size;
  p.row_stride = config_.vocab_rows();  // padding columns: excluded from the softmax, zero gradient
  p.softcap = static_cast<float>(config_.final_logit_softcap);  // the gradient w.r.t. the uncapped logits
  p.logits = activations.logits_.data();
  p.targets = activations.targets_.data<int32_t>();
  p.lse = activations.lse_.data<float>();
  return p;
}

void LanguageModel::BackwardStage(Activations& activations, const void* doutput, void* dinput,
                                  DeferredWeightGrads* deferred) {
  LMF_CHECK(activations.model_ == this) << "LanguageModel: Backward of activations another model made";
  LMF_CHECK(deferred == nullptr || !backward_progress_)
      << "LanguageModel: a backward with deferred weight gradients cannot report backward progress";
  scratch_.set_deferred(deferred);
  grads_zero_ = false;  // the backward accumulates into the gradients (now, or deferred)
  const int64_t n = activations.b_ * activations.t_, c = config_.d_model;
  if (!dresidual_.defined() || dresidual_.dim(0) != n) {
    dresidual_ = kernels::Tensor::Empty({n, c}, dtype_, ctx_.allocator);
  }
  void* dresidual = dresidual_.data();
  scratch_.Reset();
  if (has_head()) {
    LMF_CHECK(activations.have_loss_)
        << "LanguageModel::Backward needs a ForwardWithLoss first (and only one Backward each)";
    activations.have_loss_ = false;
    const int64_t v = config_.vocab_rows();
    void* dlogits = activations.logits_.data();
    kernels::CrossEntropyParams p = LossParams(activations);
    p.dloss = 1.0f / static_cast<float>(n);  // the mean over B*T tokens
    p.z_loss = static_cast<float>(config_.z_loss);
    p.dlogits = dlogits;  // in place over the logits
    kernels::CrossEntropyBackward(ctx_, p);
    if (final_norm_) {
      void* dnormed = scratch_.Take({n, c}, dtype_).data();
      lm_head_->Backward(ctx_, n, activations.head_input_, c, dlogits, v, dnormed, deferred);
      final_norm_->Backward(ctx_, activations.blocks_.back()->output, activations.final_norm_, dnormed, dresidual);
    } else {
      lm_head_->Backward(ctx_, n, activations.head_input_, c, dlogits, v, dresidual, deferred);
    }
    if (backward_progress_) backward_progress_(ModelPart{ModelPart::kHead, -1});
  } else {
    LMF_CHECK(doutput != nullptr && n > 0)
        << "LanguageModel: the backward of layers [" << first_layer_ << ", " << last_layer_
        << ") needs a forward and the gradient of its output";
    kernels::CopyOnDevice(ctx_, dresidual, doutput, dresidual_.nbytes());
  }
  for (size_t i = blocks_.size(); i-- > 0;) {
    scratch_.Reset();
    const int64_t layer = first_layer_ + static_cast<int64_t>(i);
    blocks_[i]->Backward(ctx_, LayerInput(activations, layer), *activations.blocks_[i], dresidual, scratch_);
    if (backward_progress_) backward_progress_(ModelPart{ModelPart::kBlock, layer});
  }
  scratch_.set_deferred(nullptr);
  if (embedding_) {
    embedding_->Backward(ctx_, activations.embedding_, dresidual, deferred);
  } else if (dinput != nullptr) {
    kernels::CopyOnDevice(ctx_, dinput, dresidual, dresidual_.nbytes());
  }
  if (backward_progress_) backward_progress_(ModelPart{ModelPart::kEmbedding, -1});
}

void LanguageModel::VisitPartParameters(const ModelPart& part, const ParameterVisitor& visit) const {
  switch (part.kind) {
    case ModelPart::kHead:
      if (final_norm_) final_norm_->VisitParameters("ln_final", visit);
      if (lm_head_ && !config_.tied_embeddings) lm_head_->VisitParameters("lm_head", visit);
      break;
    case ModelPart::kBlock: {
      LMF_CHECK(part.layer >= first_layer_ && part.layer < last_layer_) << "layer " << part.layer;
      const size_t i = static_cast<size_t>(part.layer - first_layer_);
      blocks_[i]->VisitParameters(absl::StrCat("layers.", part.layer), visit);
      break;
    }
    case ModelPart::kEmbedding:
      if (embedding_) embedding_->VisitParameters(visit);
      if (tied_table_) visit("token_embeddings.weight", *tied_table_);
      break;
  }
}

void LanguageModel::RecomputeLayer(int64_t layer, Activations& activations) {
  LMF_CHECK(activations.model_ == this && layer >= first_layer_ && layer < last_layer_ && activations.b_ > 0)
      << "LanguageModel::RecomputeLayer(" << layer << ") of layers [" << first_layer_ << ", " << last_layer_
      << ") needs activations of this model after a forward";
  const size_t i = static_cast<size_t>(layer - first_layer_);
  ForwardMode mode = activations.mode_;
  mode.layer = layer;
  blocks_[i]->Forward(ctx_, activations.b_, activations.t_, LayerInput(activations, layer),
                      *activations.blocks_[i], mode);
}

absl::Status LanguageModel::Forward(const int32_t* ids, int64_t b, int64_t t, Activations& activations) {
  return ForwardStage(StageInput{b, t, ids, nullptr, nullptr}, activations);
}

absl::StatusOr<double> LanguageModel::ForwardWithLoss(const int32_t* ids, const int32_t* targets, int64_t b,
                                                      int64_t t, Activations& activations, const ForwardMode& mode) {
  if (absl::Status s = ForwardStage(StageInput{b, t, ids, nullptr, targets}, activations, mode); !s.ok()) return s;
  return activations.loss_;
}

void LanguageModel::Backward(Activations& activations) { BackwardStage(activations, nullptr, nullptr); }

absl::Status LanguageModel::Forward(const int32_t* ids, int64_t b, int64_t t) { return Forward(ids, b, t, own_); }

absl::StatusOr<double> LanguageModel::ForwardWithLoss(const int32_t* ids, const int32_t* targets, int64_t b,
                                                      int64_t t, const ForwardMode& mode) {
  return ForwardWithLoss(ids, targets, b, t, own_, mode);
}

void LanguageModel::Backward() { Backward(own_); }

void LanguageModel::ZeroGrad() {
  if (grads_zero_) return;
  VisitParameters([&](const std::string&, const Parameter& p) {
    kernels::FillZero(ctx_, p.grad.data(), p.grad.nbytes());
  });
}

const float* LanguageModel::logits() const {
  LMF_CHECK(ctx_.device.is_cpu() && dtype_ == kernels::DType::kF32)
      << "LanguageModel::logits() is for f32 CPU models; use logits_tensor() on " << ctx_.device << " with "
      << dtype_ << " activations";
  return own_.logits_.data<float>();
}

void LanguageModel::VisitParameters(const ParameterVisitor& visit) const {
  if (embedding_) embedding_->VisitParameters(visit);
  if (tied_table_) visit("token_embeddings.weight", *tied_table_);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    blocks_[i]->VisitParameters(absl::StrCat("layers.", first_layer_ + static_cast<int64_t>(i)), visit);
  }
  if (final_norm_) final_norm_->VisitParameters("ln_final", visit);
  if (lm_head_ && !config_.tied_embeddings) lm_head_->VisitParameters("lm_head", visit);
}

void LanguageModel::VisitBuffers(const BufferVisitor& visit) const {
  for (size_t i = 0; i < blocks_.size(); ++i) {
    blocks_[i]->channel_mixer().VisitBuffers(absl::StrCat("layers.", first_layer_ + static_cast<int64_t>(i), ".ffn"),
                                             visit);
  }
}

void LanguageModel::VisitStepCounts(const BufferVisitor& visit) const {
  for (size_t i = 0; i < blocks_.size(); ++i) {
    blocks_[i]->channel_mixer().VisitStepCounts(
        absl::StrCat("layers.", first_layer_ + static_cast<int64_t>(i), ".ffn"), visit);
  }
}

void LanguageModel::EndStep() {
  for (const auto& block : blocks_) block->channel_mixer().EndStep();
}

int64_t LanguageModel::parameter_count() const {
  int64_t total = 0;
  VisitParameters([&](const std::string&, const Parameter& p) { total += p.value.numel(); });
  return total;
}

int64_t Activations::bytes() const {
  if (b_ == 0) return 0;
  int64_t total = embedding_.bytes() + final_norm_.bytes() + HeldBytes(input_) + HeldBytes(logits_) +
                  HeldBytes(lse_) + HeldBytes(targets_);
  for (const auto& block : blocks_) total += block->bytes();
  return total;
}

void Activations::ReleaseLayer(int64_t layer) {
  const int64_t i = layer - model_->first_layer();
  LMF_CHECK(i >= 0 && i < static_cast<int64_t>(blocks_.size()))
      << "Activations::ReleaseLayer(" << layer << "): not a layer of [" << model_->first_layer() << ", "
      << model_->last_layer() << ")";
  blocks_[static_cast<size_t>(i)]->ReleaseAllButOutput();
}

const void* Activations::hidden_output() const { return blocks_.empty() ? nullptr : blocks_.back()->output; }

}  // namespace lmf::model
