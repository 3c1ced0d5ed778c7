// Token embedding and additive positions.
#include "model/layers/embedding.h"

#include <cmath>

#include "kernels/embedding/embedding.h"

namespace lmf::model {

Embedding::Embedding(const ModelConfig& config)
    : positions_(config.positions), c_(config.d_model), tokens_(Parameter::Zeros({config.vocab_rows(), c_})) {
  if (positions_ == PositionKind::kLearned) learned_ = Parameter::Zeros({config.context_length, c_});
  if (positions_ == PositionKind::kSinusoidal) {
    sinusoidal_.resize(static_cast<size_t>(config.context_length * c_));
    for (int64_t p = 0; p < config.context_length; ++p) {
      for (int64_t i = 0; i < c_ / 2; ++i) {
        const double angle = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / c_);
        sinusoidal_[p * c_ + 2 * i] = static_cast<float>(std::sin(angle));
        sinusoidal_[p * c_ + 2 * i + 1] = static_cast<float>(std::cos(angle));
      }
    }
  }
}

void Embedding::Forward(const kernels::Context& ctx, int64_t b, int64_t t, const int32_t* ids) {
  const int64_t n = b * t;
  if (b != b_ || t != t_) {
    out_ = kernels::Tensor::Empty({n, c_}, kernels::DType::kF32);
    b_ = b;
    t_ = t;
  }
  ids_.assign(ids, ids + n);
  float* x = out_.data<float>();
  kernels::EmbeddingForwardParams p;
  p.N = n, p.V = tokens_.value.dim(0), p.C = c_, p.ids = ids, p.table = tokens_.data(), p.out = x;
  kernels::EmbeddingForward(ctx, p);
  const float* table = positions_ == PositionKind::kLearned      ? learned_.data()
                       : positions_ == PositionKind::kSinusoidal ? sinusoidal_.data()
                                                                 : nullptr;
  if (table == nullptr) return;
  ctx.pool->ParallelFor(n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* pos = table + (r % t) * c_;
      float* row = x + r * c_;
      for (int64_t i = 0; i < c_; ++i) row[i] += pos[i];
    }
  });
}

void Embedding::Backward(const kernels::Context& ctx, const float* dx) const {
  const int64_t n = b_ * t_;
  kernels::EmbeddingBackwardParams p;
  p.N = n, p.V = tokens_.value.dim(0), p.C = c_, p.ids = ids_.data(), p.dout = dx, p.dtable = tokens_.grad_data();
  kernels::EmbeddingBackward(ctx, p);
  if (positions_ != PositionKind::kLearned) return;
  float* dpos = learned_.grad_data();
  ctx.pool->ParallelFor(t_, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      for (int64_t bi = 0; bi < b_; ++bi) {
        const float* src = dx + (bi * t_ + p) * c_;
        for (int64_t i = 0; i < c_; ++i) dpos[p * c_ + i] += src[i];
      }
    }
  });
}

int64_t Embedding::saved_bytes() const {
  if (b_ == 0) return 0;
  return static_cast<int64_t>(out_.nbytes() + ids_.size() * sizeof(int32_t));
}

void Embedding::VisitParameters(const ParameterVisitor& visit) const {
  visit("token_embeddings.weight", tokens_);
  if (positions_ == PositionKind::kLearned) visit("position_embeddings.weight", learned_);
}

}  // namespace lmf::model
