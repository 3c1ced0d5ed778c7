// The mixture of experts on a device other than the CPU (CUDA, fp32 or bf16): moe.h's layer with its rows on
// the device and its routing on the host.
//
// Routing design: the simplest correct one. The router GEMM gives the fp32 logits z (N, E) on the device
// (from an fp32 copy of h in bf16), and ONE device-to-host copy of them per layer and forward feeds the same
// host code as the CPU path (router.h, dispatch.h): selection, gates, both router losses, capacity and
// dropping, every RouterKind, group-limited routing and the bias. So the CUDA path routes exactly as the CPU
// does, with no second implementation of the routing to keep in step, and the expert counts that size the
// per-expert GEMMs are on the host where the GEMM calls need them. The price is one stream synchronisation
// per layer and forward (and one per backward for dgates), which a device top-k would remove; at N * E fp32
// values it is small next to the experts' GEMMs. The plan goes back as two int32 index arrays and the fp32
// gates (kernels/moe_rows.h), uploaded again by the backward rather than held (saved bytes stay the CPU's).
//
// Forward: logits -> host routing -> gather rows into expert order (moe_rows) -> per expert one GEMM per
// matrix (experts.h, on the stream) and the activation over all rows -> shared experts -> gate-weighted
// combine (moe_rows, deterministic). Backward: combine backward (drows, fp32 dgates; dgates to the host) ->
// experts backward -> host gate and loss gradients (router.h) -> dlogits to the device -> router GEMM
// backward (fp32 dh) -> scatter-add of the rows' gradients onto it into dh (moe_rows) -> += shared experts'.
#include <algorithm>
#include <vector>

#include "kernels/cast/cast.h"
#include "kernels/memory/memory.h"
#include "kernels/moe_rows/moe_rows.h"
#include "kernels/residual/residual.h"
#include "model/layers/moe/moe.h"
#include "model/layers/moe/router.h"

namespace lmf::model {
namespace {

// The routing plan on the device: (M) row -> assignment, (N * k) assignment -> row or -1, (N * k) gates.
struct DevicePlan {
  const int32_t* row_assignment;
  const int32_t* assignment_row;
  const float* gates;
};
DevicePlan UploadPlan(const kernels::Context& ctx, const moe::Dispatch& dispatch, const std::vector<float>& gates,
                      kernels::Tensor& ints, kernels::Tensor& floats) {
  const int64_t m = dispatch.rows(), assignments = static_cast<int64_t>(dispatch.assignment_row.size());
  kernels::CopyToDevice(ctx, ints.data(), dispatch.row_assignment.data(), static_cast<size_t>(m) * sizeof(int32_t));
  int32_t* slots = ints.data<int32_t>() + m;
  kernels::CopyToDevice(ctx, slots, dispatch.assignment_row.data(), static_cast<size_t>(assignments) * sizeof(int32_t));
  kernels::CopyToDevice(ctx, floats.data(), gates.data(), static_cast<size_t>(assignments) * sizeof(float));
  return {ints.data<int32_t>(), slots, floats.data<float>()};
}

// h (N, C) in dtype -> an fp32 view of it: h itself, or its cast into `copy` (allocated here).
const void* Fp32Rows(const kernels::Context& ctx, int64_t n, int64_t c, const void* h, kernels::DType dtype,
                     kernels::Tensor& copy) {
  if (dtype == kernels::DType::kF32) return h;
  kernels::Cast(ctx, {n * c, dtype, kernels::DType::kF32, h, copy.data()});
  return copy.data();
}

}  // namespace

void MixtureOfExperts::RouterLogitsToHost(const kernels::Context& ctx, int64_t n, const void* h,
                                          MoeActivations& saved) const {
  kernels::Tensor h32 = kernels::Tensor::Empty({n, c_}, kernels::DType::kF32, ctx.allocator);
  kernels::Tensor logits = kernels::Tensor::Empty({n, spec_.n_experts}, kernels::DType::kF32, ctx.allocator);
  router_.Forward(ctx, n, Fp32Rows(ctx, n, c_, h, dtype_, h32), c_, logits.data(), spec_.n_experts,
                  /*accumulate=*/false);
  kernels::CopyToHost(ctx, saved.logits.data(), logits.data(), logits.nbytes());  // waits for the stream
}

void MixtureOfExperts::ForwardOnDevice(const kernels::Context& ctx, int64_t b, int64_t t, const void* h, void* out,
                                       bool accumulate, MoeActivations& saved, const ForwardMode& mode) const {
  const int64_t n = b * t, k = spec_.top_k, e = spec_.n_experts;
  Resize(b, t, ctx, saved);
  RouterLogitsToHost(ctx, n, h, saved);
  std::vector<float> bias;
  if (spec_.expert_bias) {
    bias.resize(static_cast<size_t>(e));
    kernels::CopyToHost(ctx, bias.data(), expert_bias_.data(), expert_bias_.nbytes());
  }
  moe::Route(spec_, n, saved.logits.data(), spec_.expert_bias ? bias.data() : nullptr, saved.experts.data(),
             saved.gates.data());
  saved.balance_loss = moe::BalanceLoss(spec_, b, t, saved.logits.data(), saved.experts.data());
  saved.z_loss = moe::RouterZLoss(spec_, n, saved.logits.data());
  moe::BuildDispatch(spec_, n, saved.experts.data(), saved.gates.data(), saved.dispatch);
  saved.expert_counts = saved.dispatch.counts;
  saved.expert_offsets = saved.dispatch.offsets;
  const int64_t m = saved.dispatch.rows();
  kernels::Tensor ints = kernels::Tensor::Empty({m + n * k}, kernels::DType::kI32, ctx.allocator);
  kernels::Tensor floats = kernels::Tensor::Empty({n * k}, kernels::DType::kF32, ctx.allocator);
  const DevicePlan plan = UploadPlan(ctx, saved.dispatch, saved.gates, ints, floats);
  kernels::MoeGather(ctx, {dtype_, m, c_, k, plan.row_assignment, h, saved.x.data()});
  experts_.Forward(ctx, saved.expert_counts, saved.expert_offsets, saved.x.data(), saved.pre.data(), saved.act.data(),
                   saved.y.data());
  if (shared_.has_value()) {
    shared_->Forward(ctx, b, t, h, out, accumulate, *saved.shared, mode);
    accumulate = true;
  }
  kernels::MoeCombine(ctx, {dtype_, n, k, c_, plan.assignment_row, plan.gates, saved.y.data(), out, accumulate});
}

void MixtureOfExperts::BackwardOnDevice(const kernels::Context& ctx, const void* h, const MoeActivations& saved,
                                        const void* dout, void* dh, Scratch& scratch) const {
  const int64_t n = saved.b * saved.t, k = spec_.top_k, e = spec_.n_experts, m = saved.dispatch.rows();
  const auto take = [&](int64_t rows, int64_t cols, kernels::DType dtype) {
    return scratch.Take({std::max<int64_t>(rows, 1), cols}, dtype);
  };
  kernels::Tensor ints = take(m + n * k, 1, kernels::DType::kI32), floats = take(n * k, 1, kernels::DType::kF32);
  const DevicePlan plan = UploadPlan(ctx, saved.dispatch, saved.gates, ints, floats);
  // Through the combine to the expert outputs and the gates (the gates' gradient to the host).
  void* dy = take(m, c_, dtype_).data();
  kernels::Tensor dgates_device = take(n, k, kernels::DType::kF32);
  kernels::MoeCombineBackward(ctx, {dtype_, n, k, c_, plan.assignment_row, plan.gates, saved.y.data(), dout, dy,
                                    dgates_device.data<float>()});
  std::vector<float> dgates(static_cast<size_t>(n * k));
  kernels::CopyToHost(ctx, dgates.data(), dgates_device.data(), dgates.size() * sizeof(float));
  // Through the experts to their rows (queued on the stream while the host does the router below).
  void* drows = take(m, c_, dtype_).data();
  experts_.Backward(ctx, saved.expert_counts, saved.expert_offsets, saved.x.data(), saved.pre.data(),
                    saved.act.data(), dy, take(m, experts_.hidden(), dtype_).data(),
                    take(m, experts_.width(), dtype_).data(), drows);
  // The router on the host: the gates' gradient and the losses' (weight 1) -> dlogits, then its fp32 GEMM.
  std::vector<float> dlogits(static_cast<size_t>(n * e));
  moe::RouteBackward(spec_, n, saved.logits.data(), saved.experts.data(), dgates.data(), dlogits.data());
  moe::BalanceLossBackward(spec_, saved.b, saved.t, saved.logits.data(), saved.experts.data(), dlogits.data());
  moe::RouterZLossBackward(spec_, n, saved.logits.data(), dlogits.data());
  kernels::Tensor dlogits_device = take(n, e, kernels::DType::kF32);
  kernels::CopyToDevice(ctx, dlogits_device.data(), dlogits.data(), dlogits.size() * sizeof(float));
  kernels::Tensor h32 = take(n, c_, kernels::DType::kF32), dh_router = take(n, c_, kernels::DType::kF32);
  router_.Backward(ctx, n, Fp32Rows(ctx, n, c_, h, dtype_, h32), c_, dlogits_device.data(), e, dh_router.data());
  // dh = the router's (fp32) + the rows' gradients summed into their tokens, rounded once into dtype.
  kernels::MoeScatterAdd(ctx, {dtype_, n, k, c_, plan.assignment_row, drows, dh_router.data<float>(), dh});
  if (shared_.has_value()) {
    void* dshared = take(n, c_, dtype_).data();
    shared_->Backward(ctx, h, *saved.shared, dout, dshared, scratch);
    kernels::ResidualBackward(ctx, {dtype_, n * c_, dshared, dh, nullptr});  // dh += dshared
  }
  CountAssignments(saved);
}

}  // namespace lmf::model
