// Parameter helpers.
#include "model/layers/parameter.h"

namespace lmf::model {

Parameter Parameter::Zeros(const kernels::Shape& shape) {
  return Parameter{kernels::Tensor::Zeros(shape, kernels::DType::kF32),
                   kernels::Tensor::Zeros(shape, kernels::DType::kF32)};
}

Parameter Parameter::Rows(int64_t row, int64_t rows) const {
  return Parameter{value.Slice(0, row, rows), grad.Slice(0, row, rows)};
}

}  // namespace lmf::model
