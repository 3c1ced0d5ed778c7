// Token embedding and additive positions, over kernels/embedding and kernels/residual.
#include "model/layers/embedding/embedding.h"

#include <cmath>
#include <vector>

#include "base/check.h"
#include "kernels/embedding/embedding.h"
#include "kernels/memory/memory.h"
#include "kernels/residual/residual.h"

namespace lmf::model {

ParameterKind TokenTableKind(const ModelConfig& config) {
  return config.tied_embeddings ? ParameterKind::kOutputMatrix : ParameterKind::kEmbedding;
}

Embedding::Embedding(const ModelConfig& config, const kernels::Context& ctx, kernels::DType dtype)
    : positions_(config.positions),
      c_(config.d_model),
      context_length_(config.context_length),
      dtype_(dtype),
      tokens_(Parameter::Zeros({config.vocab_rows(), c_}, TokenTableKind(config), ctx, dtype)) {
  if (positions_ == PositionKind::kLearned) {
    learned_ = Parameter::Zeros({context_length_, c_}, ParameterKind::kEmbedding, ctx, dtype);
  }
  if (positions_ == PositionKind::kSinusoidal) {
    const size_t count = static_cast<size_t>(context_length_ * c_);
    std::vector<float> table(count);
    for (int64_t p = 0; p < context_length_; ++p) {
      for (int64_t i = 0; i < c_ / 2; ++i) {
        const double angle = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / c_);
        table[p * c_ + 2 * i] = static_cast<float>(std::sin(angle));
        table[p * c_ + 2 * i + 1] = static_cast<float>(std::cos(angle));
      }
    }
    sinusoidal_ = kernels::Tensor::Empty({context_length_, c_}, dtype_, ctx.allocator);
    if (dtype_ == kernels::DType::kF32) {
      kernels::CopyToDevice(ctx, sinusoidal_.data(), table.data(), sinusoidal_.nbytes());
    } else {
      std::vector<uint16_t> rounded(count);
      for (size_t i = 0; i < count; ++i) rounded[i] = kernels::FloatToBF16(table[i]);
      kernels::CopyToDevice(ctx, sinusoidal_.data(), rounded.data(), sinusoidal_.nbytes());
    }
  }
}

int64_t EmbeddingActivations::bytes() const {
  if (b == 0) return 0;
  return static_cast<int64_t>(out.nbytes() + ids.nbytes());
}

void Embedding::Forward(const kernels::Context& ctx, int64_t b, int64_t t, const int32_t* ids,
                        int64_t first_position, EmbeddingActivations& saved) const {
  // Only a table ends at the context: rotary or no positions add nothing here (decoding past the context).
  const bool has_table = positions_ == PositionKind::kLearned || positions_ == PositionKind::kSinusoidal;
  LMF_CHECK(first_position >= 0 && (!has_table || first_position + t <= context_length_))
      << "Embedding: positions [" << first_position << ", " << first_position + t << ") past context_length "
      << context_length_;
  const int64_t n = b * t;
  const bool reshaped = b != saved.b || t != saved.t;
  if (reshaped) {
    saved.out = kernels::Tensor::Empty({n, c_}, dtype_, ctx.allocator);
    saved.ids = kernels::Tensor::Empty({n}, kernels::DType::kI32, ctx.allocator);
    if (positions_ == PositionKind::kLearned) {
      saved.position_ids = kernels::Tensor::Empty({n}, kernels::DType::kI32, ctx.allocator);
    }
  }
  if (positions_ == PositionKind::kLearned && (reshaped || first_position != saved.first_position)) {
    std::vector<int32_t> positions(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) positions[r] = static_cast<int32_t>(first_position + r % t);
    kernels::CopyToDevice(ctx, saved.position_ids.data(), positions.data(), saved.position_ids.nbytes());
  }
  saved.b = b;
  saved.t = t;
  saved.first_position = first_position;
  // Checked here, on the host, so that the kernels skip their device-side check and its stream wait.
  const int64_t vocab = tokens_.value.dim(0);
  for (int64_t i = 0; i < n; ++i)
    LMF_CHECK(ids[i] >= 0 && ids[i] < vocab) << "Embedding: id " << ids[i] << " at row " << i << " outside [0, "
                                             << vocab << ")";
  kernels::CopyToDevice(ctx, saved.ids.data(), ids, saved.ids.nbytes());
  kernels::EmbeddingForwardParams p;
  p.dtype = dtype_;
  p.N = n, p.V = vocab, p.C = c_, p.ids = saved.ids.data<int32_t>(), p.table = tokens_.compute.data();
  p.out = saved.out.data();
  p.ids_checked = true;
  kernels::EmbeddingForward(ctx, p);
  const void* table = positions_ == PositionKind::kLearned      ? learned_.compute.data()
                      : positions_ == PositionKind::kSinusoidal ? sinusoidal_.data()
                                                                : nullptr;
  if (table == nullptr) return;
  // Each sequence's rows (T, C) += the table's rows [first_position, first_position + T).
  for (int64_t bi = 0; bi < b; ++bi) {
    kernels::ResidualForwardParams add;
    add.dtype = dtype_;
    add.n = t * c_;
    add.a = ElementOffset(saved.out.data(), bi * t * c_, dtype_);
    add.b = ElementOffset(table, first_position * c_, dtype_);
    add.out = ElementOffset(saved.out.data(), bi * t * c_, dtype_);
    kernels::ResidualForward(ctx, add);
  }
}

void Embedding::Backward(const kernels::Context& ctx, const EmbeddingActivations& saved, const void* dx,
                         DeferredWeightGrads* deferred) const {
  const int64_t n = saved.b * saved.t;
  if (deferred != nullptr) dx = deferred->Keep(ctx, dx, static_cast<size_t>(n * c_) * kernels::DTypeSize(dtype_));
  kernels::EmbeddingBackwardParams p;
  p.dtype = dtype_;
  p.N = n, p.V = tokens_.value.dim(0), p.C = c_, p.ids = saved.ids.data<int32_t>(), p.dout = dx;
  p.dtable = tokens_.grad.data();
  p.ids_checked = true;  // by Forward
  RunOrDefer(deferred, ctx, [p](const kernels::Context& run_ctx) { kernels::EmbeddingBackward(run_ctx, p); });
  if (positions_ != PositionKind::kLearned) return;
  // The learned table's gradient is an embedding backward over the position ids: row p sums dx[b, p] over
  // the batch, in batch order.
  kernels::EmbeddingBackwardParams pos;
  pos.dtype = dtype_;
  pos.N = n, pos.V = context_length_, pos.C = c_, pos.ids = saved.position_ids.data<int32_t>(), pos.dout = dx;
  pos.dtable = learned_.grad.data();
  pos.ids_checked = true;  // positions in [0, context_length), made by Forward
  RunOrDefer(deferred, ctx, [pos](const kernels::Context& run_ctx) { kernels::EmbeddingBackward(run_ctx, pos); });
}

void Embedding::VisitParameters(const ParameterVisitor& visit) const {
  visit("token_embeddings.weight", tokens_);
  if (positions_ == PositionKind::kLearned) visit("position_embeddings.weight", learned_);
}

}  // namespace lmf::model
