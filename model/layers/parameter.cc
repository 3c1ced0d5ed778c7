// Parameter helpers.
#include "model/layers/parameter.h"

#include "kernels/memory/memory.h"

namespace lmf::model {

const char* ParameterKindName(ParameterKind kind) {
  switch (kind) {
    case ParameterKind::kMatrix: return "matrix";
    case ParameterKind::kResidualMatrix: return "residual matrix";
    case ParameterKind::kOutputMatrix: return "output matrix";
    case ParameterKind::kEmbedding: return "embedding";
    case ParameterKind::kBias: return "bias";
    case ParameterKind::kGain: return "gain";
  }
  return "?";
}

Parameter Parameter::Zeros(const kernels::Shape& shape, ParameterKind kind, const kernels::Context& ctx,
                           kernels::DType compute_dtype) {
  Parameter p;
  p.kind = kind;
  p.value = kernels::Tensor::Empty(shape, kernels::DType::kF32, ctx.allocator);
  p.grad = kernels::Tensor::Empty(shape, kernels::DType::kF32, ctx.allocator);
  p.compute = compute_dtype == kernels::DType::kF32 ? p.value
                                                    : kernels::Tensor::Empty(shape, compute_dtype, ctx.allocator);
  kernels::FillZero(ctx, p.value.data(), p.value.nbytes());
  kernels::FillZero(ctx, p.grad.data(), p.grad.nbytes());
  if (compute_dtype != kernels::DType::kF32) kernels::FillZero(ctx, p.compute.data(), p.compute.nbytes());
  return p;
}

Parameter Parameter::Rows(int64_t row, int64_t rows) const {
  return Parameter{value.Slice(0, row, rows), grad.Slice(0, row, rows), compute.Slice(0, row, rows), kind,
                   expert_shard};
}

}  // namespace lmf::model
