// The routed experts on a device as grouped GEMMs (kernels/grouped_matmul) over row offsets held on the
// device: experts.h's ForwardGrouped and BackwardGrouped, used by the CUDA path of the layer (moe_device.cc).
#include "kernels/grouped_matmul/grouped_matmul.h"
#include "model/layers/moe/experts.h"

namespace lmf::model::moe {

void Experts::ForwardGrouped(const kernels::Context& ctx, int64_t m, const int32_t* offsets, const void* x,
                             void* pre, void* act, void* y) const {
  kernels::GroupedMatmul(ctx, {dtype_, e_, m, c_, w_, offsets, x, w_in_.compute.data(),
                               biases_ ? b_in_.compute.data() : nullptr, pre});
  if (m > 0) Activate(ctx, m, pre, act);
  kernels::GroupedMatmul(ctx, {dtype_, e_, m, f_, c_, offsets, act, w_out_.compute.data(),
                               biases_ ? b_out_.compute.data() : nullptr, y});
  counters_->matmul_flops += 2.0 * static_cast<double>(m) * static_cast<double>(c_ * w_ + f_ * c_);
}

void Experts::BackwardGrouped(const kernels::Context& ctx, int64_t m, const int32_t* offsets, const void* x,
                              const void* pre, const void* act, const void* dy, void* dact, void* dpre,
                              void* dx) const {
  kernels::GroupedMatmulBackward(ctx, {dtype_, e_, m, f_, c_, offsets, act, w_out_.compute.data(), dy, dact,
                                       w_out_.grad_data(), biases_ ? b_out_.grad_data() : nullptr});
  if (m > 0) ActivateBackward(ctx, m, pre, dact, dpre);
  kernels::GroupedMatmulBackward(ctx, {dtype_, e_, m, c_, w_, offsets, x, w_in_.compute.data(), dpre, dx,
                                       w_in_.grad_data(), biases_ ? b_in_.grad_data() : nullptr});
  counters_->matmul_flops += 4.0 * static_cast<double>(m) * static_cast<double>(f_ * c_ + c_ * w_);
}

}  // namespace lmf::model::moe
