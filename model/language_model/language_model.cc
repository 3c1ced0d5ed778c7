// LanguageModel: assembly of the modules, batch validation, initialisation and the loss.
#include "model/language_model/language_model.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/activations/activations.h"
#include "kernels/attention/attention.h"
#include "kernels/cast/cast.h"
#include "kernels/core/dispatch.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/memory/memory.h"

namespace lmf::model {
namespace {

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Standard normal draws from a 64-bit engine by Box-Muller, both outputs of each pair used (portable: no
// std:: distribution involved).
class NormalSampler {
 public:
  explicit NormalSampler(uint64_t seed) : engine_(seed) {}
  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(engine_() >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 6.283185307179586 * u2;
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }
  // N(0, 1) conditioned on [-limit, limit], by rejection.
  double NextTruncated(double limit) {
    for (;;) {
      const double x = Next();
      if (std::fabs(x) <= limit) return x;
    }
  }

 private:
  std::mt19937_64 engine_;
  double spare_ = 0;
  bool has_spare_ = false;
};

bool IsNormGain(const std::string& name) {
  return absl::EndsWith(name, "ln1.weight") || absl::EndsWith(name, "ln2.weight") ||
         absl::EndsWith(name, "_norm.weight") || name == "ln_final.weight";
}

// How a parameter scales with width under muP: the blocks' matrices (fan-in grows with width), the LM head
// (the output layer), or the rest (embeddings, whose fan-in is the vocabulary; biases and norm gains).
enum class WidthRole { kHidden, kOutput, kOther };
WidthRole WidthRoleOf(const std::string& name, const Parameter& p) {
  if (name == "lm_head.weight") return WidthRole::kOutput;
  if (p.value.rank() == 2 && !absl::StrContains(name, "embeddings")) return WidthRole::kHidden;
  return WidthRole::kOther;
}

// Whether ctx's device can run `config` with activations of type `dtype`: every op the model calls, asked of
// the backends built into this binary, and the attention kernels' head sizes.
absl::Status CheckDeviceSupport(const ModelConfig& config, const kernels::Context& ctx, kernels::DType dtype) {
  const auto device_name = [&ctx] {
    std::ostringstream os;
    os << ctx.device;
    return os.str();
  };
  const std::string precision = absl::AsciiStrToUpper(kernels::DTypeName(dtype));  // as run.precision says
  if (dtype != kernels::DType::kF32 && dtype != kernels::DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat("LanguageModel: activation dtype ", precision,
                                                   " is not supported (precision is F32 or BF16)"));
  }
  if (ctx.allocator == nullptr) return absl::InvalidArgumentError("LanguageModel: the context has no allocator");
  if (ctx.allocator->device() != ctx.device) {
    return absl::InvalidArgumentError(absl::StrCat("LanguageModel: the context's allocator is not on its device ",
                                                   device_name()));
  }
  if (ctx.device.is_cpu()) {
    if (ctx.pool == nullptr) return absl::InvalidArgumentError("LanguageModel: a CPU context needs a thread pool");
    if (dtype != kernels::DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat("LanguageModel: precision ", precision,
                                                     " runs on CUDA only (the CPU backend computes in F32)"));
    }
  }
  std::vector<const char*> ops = {"embedding",
                                  "matmul",
                                  "attention",
                                  "residual",
                                  "cross_entropy",
                                  config.norm == NormKind::kLayerNorm ? "layernorm" : "rmsnorm",
                                  config.gated_ffn() ? "swiglu" : "activation"};
  if (config.positions == PositionKind::kRoPE) ops.push_back("rope");
  if (config.final_logit_softcap > 0) ops.push_back("activation");  // CapLogits
  if (dtype != kernels::DType::kF32) ops.push_back("cast");  // RefreshComputeWeights rounds the weights
  for (const char* op : ops) {
    if (!kernels::BackendSupports(op, ctx.device, dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("LanguageModel: no backend in this binary runs op '", op,
                                                     "' on ", device_name(), " with ", precision,
                                                     " activations"));
    }
  }
  // Op-specific limits: the attention kernels' head sizes (CUDA: bf16 64 or 128, f32 32, 64 or 128).
  const int64_t hs = config.head_size();
  if (!kernels::AttentionSupported(ctx.device, dtype, hs)) {
    return absl::InvalidArgumentError(absl::StrCat("LanguageModel: head size ", hs, " (d_model ", config.d_model,
                                                   " / n_heads ", config.n_heads, ") is not supported by the ",
                                                   "attention on ", device_name(), " with ", precision,
                                                   " activations (see kernels/attention/attention.h)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LanguageModel>> LanguageModel::Create(const ModelConfig& config,
                                                                     kernels::Context ctx,
                                                                     kernels::DType activations) {
  if (absl::Status status = config.Validate(); !status.ok()) return status;
  if (absl::Status status = CheckDeviceSupport(config, ctx, activations); !status.ok()) return status;
  return std::unique_ptr<LanguageModel>(new LanguageModel(config, ctx, activations));
}

LanguageModel::LanguageModel(const ModelConfig& config, kernels::Context ctx, kernels::DType dtype)
    : config_(config), ctx_(ctx), dtype_(dtype), embedding_(config, ctx, dtype) {
  if (config.has_final_norm()) final_norm_.emplace(config.norm, config.d_model, config.norm_eps, ctx, dtype);
  for (int64_t i = 0; i < config.n_layers; ++i) {
    ModelConfig layer = config;  // its own window: 0 on the global layers of an interleaved pattern
    layer.sliding_window = config.layer_window(i);
    blocks_.push_back(std::make_unique<Block>(layer, ctx, dtype, &counters_));
  }
  if (config.tied_embeddings) {
    lm_head_ = std::make_unique<Linear>(embedding_.token_table(), dtype, &counters_);
  } else {
    lm_head_ = std::make_unique<Linear>(config.d_model, config.vocab_rows(), /*bias=*/false, ctx, dtype, &counters_);
  }
}

void LanguageModel::InitializeParameters(uint64_t seed) {
  const double residual_scale = 1.0 / std::sqrt(2.0 * static_cast<double>(config_.n_layers));
  std::vector<float> values;
  VisitParameters([&](const std::string& name, const Parameter& p) {
    const int64_t count = p.value.numel();
    values.resize(static_cast<size_t>(count));
    float* data = values.data();
    if (absl::EndsWith(name, ".bias")) {
      std::fill(data, data + count, 0.0f);
    } else if (IsNormGain(name)) {
      std::fill(data, data + count, 1.0f);
    } else {
      NormalSampler sampler(SplitMix(seed ^ SplitMix(Fnv1a(name))));
      const bool embedding = absl::StrContains(name, "embeddings");
      if (config_.init == InitScheme::kGpt2Scaled || config_.init == InitScheme::kMup) {
        double std = config_.init_std;
        if (absl::EndsWith(name, "output_proj.weight") || absl::EndsWith(name, "ffn.w2.weight")) {
          std *= residual_scale;
        }
        // muP (1 at the base width): hidden fan-in m times the base's -> variance / m; the output layer's
        // std / m.
        const double m = config_.mup_width_multiplier();
        const WidthRole role = WidthRoleOf(name, p);
        if (role == WidthRole::kHidden) std /= std::sqrt(m);
        if (role == WidthRole::kOutput) std /= m;
        for (int64_t i = 0; i < count; ++i) data[i] = static_cast<float>(std * sampler.Next());
      } else {
        const double std =
            embedding ? 1.0 : std::sqrt(2.0 / static_cast<double>(p.value.dim(0) + p.value.dim(1)));
        for (int64_t i = 0; i < count; ++i) data[i] = static_cast<float>(std * sampler.NextTruncated(3.0));
      }
    }
    kernels::CopyToDevice(ctx_, p.value.data(), data, p.value.nbytes());
  });
  RefreshComputeWeights();
}

double LanguageModel::LearningRateScale(const std::string& name, const Parameter& p) const {
  return WidthRoleOf(name, p) == WidthRole::kOther ? 1.0 : 1.0 / config_.mup_width_multiplier();
}

void LanguageModel::RefreshComputeWeights() {
  if (dtype_ == kernels::DType::kF32) return;  // compute is value
  // On the model's device, one cast per parameter (kernels/cast: the same rounding as FloatToBF16).
  VisitParameters([&](const std::string&, const Parameter& p) {
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

absl::Status LanguageModel::Forward(const int32_t* ids, int64_t b, int64_t t) {
  if (absl::Status status = CheckBatch(ids, "ids", b, t); !status.ok()) return status;
  const int64_t n = b * t, c = config_.d_model, v = config_.vocab_rows();
  have_loss_ = false;
  EnsureLogits(b, t);
  b_ = b;
  t_ = t;
  head_input_ = FinalNorm(n, RunBlocks(ids, b, t, nullptr));
  lm_head_->Forward(ctx_, n, head_input_, c, logits_.data(), v, /*accumulate=*/false);
  CapLogits(n);
  return absl::OkStatus();
}

void LanguageModel::CapLogits(int64_t rows) {
  if (config_.final_logit_softcap <= 0) return;
  // In place over whole rows (the padding columns too: plain outputs either way, excluded from the loss).
  void* logits = logits_.data();
  kernels::ActivationForward(ctx_, kernels::ActivationForwardParams{
                                       dtype_, kernels::Activation::kSoftCap, rows * config_.vocab_rows(),
                                       logits, logits, static_cast<float>(config_.final_logit_softcap)});
}

const void* LanguageModel::FinalNorm(int64_t n, const void* x) {
  if (!final_norm_) return x;
  final_norm_->Forward(ctx_, n, x);
  return final_norm_->output();
}

const void* LanguageModel::RunBlocks(const int32_t* ids, int64_t b, int64_t t, KvCache* cache) {
  embedding_.Forward(ctx_, b, t, ids);
  const void* x = embedding_.output();
  for (size_t i = 0; i < blocks_.size(); ++i) {
    blocks_[i]->Forward(ctx_, b, t, x, cache == nullptr ? nullptr : &cache->layers_[i]);
    x = blocks_[i]->output();
  }
  return x;
}

void LanguageModel::EnsureLogits(int64_t b, int64_t t) {
  if (logits_.defined() && logits_.dim(0) == b && logits_.dim(1) == t) return;
  logits_ = kernels::Tensor::Empty({b, t, config_.vocab_rows()}, dtype_, ctx_.allocator);
  lse_ = kernels::Tensor::Empty({b * t}, kernels::DType::kF32, ctx_.allocator);
}

absl::StatusOr<double> LanguageModel::ForwardWithLoss(const int32_t* ids, const int32_t* targets, int64_t b,
                                                      int64_t t) {
  if (absl::Status status = CheckBatch(targets, "targets", b, t); !status.ok()) return status;
  if (absl::Status status = Forward(ids, b, t); !status.ok()) return status;
  const int64_t n = b * t;
  if (!targets_.defined() || targets_.numel() != n) {
    targets_ = kernels::Tensor::Empty({n}, kernels::DType::kI32, ctx_.allocator);
    losses_ = kernels::Tensor::Empty({n}, kernels::DType::kF32, ctx_.allocator);
  }
  kernels::CopyToDevice(ctx_, targets_.data(), targets, targets_.nbytes());
  // The forward without the z-loss (z_loss = 0): per-token cross-entropies and the lse, which the backward
  // reads with the config's z_loss; the z-loss term is then z * lse^2 from the same lse.
  kernels::CrossEntropyParams p = LossParams();
  p.losses = losses_.data<float>();
  kernels::CrossEntropyForward(ctx_, p);
  have_loss_ = true;
  host_losses_.resize(static_cast<size_t>(n));
  kernels::CopyToHost(ctx_, host_losses_.data(), losses_.data(), losses_.nbytes());
  double sum = 0;
  for (float loss : host_losses_) sum += loss;
  z_loss_term_ = 0;
  if (config_.z_loss > 0) {
    kernels::CopyToHost(ctx_, host_losses_.data(), lse_.data(), static_cast<size_t>(n) * sizeof(float));
    double squares = 0;
    for (float lse : host_losses_) squares += static_cast<double>(lse) * lse;
    z_loss_term_ = config_.z_loss * squares / static_cast<double>(n);
  }
  return sum / static_cast<double>(n);
}

kernels::CrossEntropyParams LanguageModel::LossParams() {
  kernels::CrossEntropyParams p;
  p.dtype = dtype_;
  p.N = b_ * t_;
  p.V = config_.vocab_size;
  p.row_stride = config_.vocab_rows();  // padding columns: excluded from the softmax, zero gradient
  p.softcap = static_cast<float>(config_.final_logit_softcap);  // the gradient w.r.t. the uncapped logits
  p.logits = logits_.data();
  p.targets = targets_.data<int32_t>();
  p.lse = lse_.data<float>();
  return p;
}

void LanguageModel::EnsureWorkspace(int64_t n) {
  if (n == workspace_rows_) return;
  const auto make = [&](int64_t width) { return kernels::Tensor::Empty({n, width}, dtype_, ctx_.allocator); };
  const int64_t c = config_.d_model;
  workspace_.dresidual = make(c);
  workspace_.dnormed = make(c);
  workspace_.dnorm_in = make(c);
  workspace_.dattn = make(config_.q_width());
  workspace_.dqkv = make(config_.q_width() + 2 * config_.kv_width());
  workspace_.dact = make(config_.d_ff);
  workspace_.dpre = make((config_.gated_ffn() ? 2 : 1) * config_.d_ff);
  workspace_.dqk_norm = config_.qk_norm ? make(config_.q_width()) : kernels::Tensor();
  workspace_rows_ = n;
}

void LanguageModel::Backward() {
  LMF_CHECK(have_loss_) << "LanguageModel::Backward needs a ForwardWithLoss first (and only one Backward each)";
  have_loss_ = false;
  const int64_t n = b_ * t_, c = config_.d_model, v = config_.vocab_rows();
  EnsureWorkspace(n);
  void* dlogits = logits_.data();
  kernels::CrossEntropyParams p = LossParams();
  p.dloss = 1.0f / static_cast<float>(n);  // the mean over B*T tokens
  p.z_loss = static_cast<float>(config_.z_loss);
  p.dlogits = dlogits;                      // in place over the logits
  kernels::CrossEntropyBackward(ctx_, p);
  void* dresidual = workspace_.dresidual.data();
  if (final_norm_) {
    void* dnormed = workspace_.dnormed.data();
    lm_head_->Backward(ctx_, n, head_input_, c, dlogits, v, dnormed);
    final_norm_->Backward(ctx_, dnormed, dresidual);
  } else {
    lm_head_->Backward(ctx_, n, head_input_, c, dlogits, v, dresidual);
  }
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) (*it)->Backward(ctx_, workspace_);
  embedding_.Backward(ctx_, workspace_.dresidual.data());
}

void LanguageModel::ZeroGrad() {
  VisitParameters([&](const std::string&, const Parameter& p) {
    kernels::FillZero(ctx_, p.grad.data(), p.grad.nbytes());
  });
}

const float* LanguageModel::logits() const {
  LMF_CHECK(ctx_.device.is_cpu() && dtype_ == kernels::DType::kF32)
      << "LanguageModel::logits() is for f32 CPU models; use logits_tensor() on " << ctx_.device << " with "
      << dtype_ << " activations";
  return logits_.data<float>();
}

void LanguageModel::VisitParameters(const ParameterVisitor& visit) const {
  embedding_.VisitParameters(visit);
  for (size_t i = 0; i < blocks_.size(); ++i) blocks_[i]->VisitParameters(absl::StrCat("layers.", i), visit);
  if (final_norm_) final_norm_->VisitParameters("ln_final", visit);
  if (!config_.tied_embeddings) lm_head_->VisitParameters("lm_head", visit);
}

int64_t LanguageModel::parameter_count() const {
  int64_t total = 0;
  VisitParameters([&](const std::string&, const Parameter& p) { total += p.value.numel(); });
  return total;
}

int64_t LanguageModel::saved_activation_bytes() const {
  if (b_ == 0) return 0;
  int64_t bytes =
      embedding_.saved_bytes() + (final_norm_ ? final_norm_->saved_bytes() : 0) +
      static_cast<int64_t>(logits_.nbytes() + lse_.nbytes() + (targets_.defined() ? targets_.nbytes() : 0));
  for (const auto& block : blocks_) bytes += block->saved_bytes();
  return bytes;
}

}  // namespace lmf::model
