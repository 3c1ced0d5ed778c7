// The mixture of experts on a device other than the CPU (CUDA, fp32 or bf16): moe.h's layer with its routing,
// rows and expert GEMMs all on the device.
//
// Routing design: the router GEMM gives the fp32 logits z (N, E) on the device (from an fp32 copy of h in
// bf16); kernels/moe_route adds the gating noise (noisy training forwards: the same counter-based draws as
// the CPU's), selects and gates, builds the dispatch plan (a stable counting sort by expert with the
// capacity) and computes both router losses, as router.h and dispatch.h do on the host. ONE copy per layer
// and forward brings 2 doubles and 2E int32 to the host: the losses (aux_loss()) and each expert's
// selections and kept rows (the step counts, dropped(), the FLOP counter and the size of the kept rows M).
// The expert GEMMs need none of it: they run as one grouped GEMM per matrix over row offsets on the device.
// The backward copies nothing: the router's gradient (gates, balancing loss, z-loss, noise) runs as kernels.
//
// Forward: logits -> [noise] -> route -> plan -> losses -> copy of counts and losses -> gather rows into
// expert order (moe_rows) -> grouped GEMM, activation, grouped GEMM (experts.h) -> shared experts ->
// gate-weighted combine (moe_rows, deterministic). Backward: combine backward (drows, fp32 dgates) ->
// experts backward (grouped) -> router backward on the device (dlogits) -> router GEMM backward (fp32 dh)
// [+ the noise router's] -> scatter-add of the rows' gradients onto it into dh -> += shared experts'.
//
// Expert parallelism (an exchange over an NCCL group of device buffers, moe.h): the same plan code as the
// CPU path (RouteExchange: the host counts above give each row's expert; the exchange all-to-alls the
// counts through the device and copies only them back), then the gathered rows (already sorted by expert,
// so each destination's rows are contiguous) go out in one variable all-to-all, the received rows' local
// offsets are copied to the device (E/ep + 1 int32 into route_offsets) for the grouped GEMMs over the R
// received rows, and the outputs come back the same way. The backward sends the outputs' gradients along the
// forward's plan and brings the rows' gradients back; nothing else changes.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cast/cast.h"
#include "kernels/memory/memory.h"
#include "kernels/moe_route/moe_route.h"
#include "kernels/moe_rows/moe_rows.h"
#include "kernels/residual/residual.h"
#include "model/layers/moe/dispatch.h"
#include "model/layers/moe/moe.h"
#include "model/layers/moe/router.h"

namespace lmf::model {
namespace {

// h (N, C) in dtype -> an fp32 view of it: h itself, or its cast into `copy`.
const void* Fp32Rows(const kernels::Context& ctx, int64_t n, int64_t c, const void* h, kernels::DType dtype,
                     kernels::Tensor& copy) {
  if (dtype == kernels::DType::kF32) return h;
  kernels::Cast(ctx, {n * c, dtype, kernels::DType::kF32, h, copy.data()});
  return copy.data();
}

// The balancing loss's segments: (b sequences of t tokens) or (1 of b t).
struct Segments {
  int64_t count, length;
};
Segments LossSegments(const MoeSpec& spec, int64_t b, int64_t t) {
  return spec.aux_loss_scope == BalanceScope::kSequence ? Segments{b, t} : Segments{1, b * t};
}

// The routing tensors of `saved` as kernel pointers.
struct DeviceRoute {
  float* logits;
  float* noise_logits;  // null without noise
  float* eps;
  int32_t* experts;
  int32_t* row_assignment;
  int32_t* assignment_row;
  float* gates;
  int32_t* offsets;
};
DeviceRoute RouteOf(const MoeActivations& saved, int64_t n, int64_t k, int64_t e) {
  int32_t* ints = saved.route_ints.data<int32_t>();
  float* noise = saved.route_noise.defined() ? saved.route_noise.data<float>() : nullptr;
  return {saved.route_logits.data<float>(), noise, noise != nullptr ? noise + n * e : nullptr, ints, ints + n * k,
          ints + 2 * n * k, saved.route_gates.data<float>(), saved.route_offsets.data<int32_t>()};
}

}  // namespace

int64_t MixtureOfExperts::RouteOnDevice(const kernels::Context& ctx, int64_t b, int64_t t, const void* h32,
                                        MoeActivations& saved, const ForwardMode& mode) const {
  using kernels::DType;
  const int64_t n = b * t, k = spec_.top_k, e = spec_.n_experts;
  const auto empty = [&](const kernels::Shape& shape, DType dtype) {
    return kernels::Tensor::Empty(shape, dtype, ctx.allocator);
  };
  const bool noisy = noise_router_.has_value() && mode.training;  // evaluation routes on z alone
  saved.route_logits = empty({n, e}, DType::kF32);
  saved.route_noise = noisy ? empty({2, n, e}, DType::kF32) : kernels::Tensor();
  saved.route_ints = empty({3, n * k}, DType::kI32);
  saved.route_gates = empty({n * k}, DType::kF32);
  saved.route_offsets = empty({e + 1}, DType::kI32);
  const DeviceRoute r = RouteOf(saved, n, k, e);
  router_.Forward(ctx, n, static_cast<const float*>(h32), c_, r.logits, e, /*accumulate=*/false);
  if (noisy) {
    noise_router_->Forward(ctx, n, static_cast<const float*>(h32), c_, r.noise_logits, e, /*accumulate=*/false);
    kernels::MoeGatingNoise(ctx, {n, e, mode.seed, mode.step, mode.layer, mode.first_token, r.noise_logits, r.eps,
                                  r.logits});
  }
  const kernels::MoeRouterSpec spec = moe::DeviceRouterSpec(spec_);
  kernels::MoeRoute(ctx, {spec, n, r.logits, spec_.expert_bias ? expert_bias_.data<float>() : nullptr, r.experts,
                          r.gates});
  // The summary the host reads: the losses (2 doubles), then selections and kept rows per expert (E int32 each).
  kernels::Tensor summary = empty({4 + 2 * e}, DType::kI32);
  double* losses = reinterpret_cast<double*>(summary.data<int32_t>());
  int32_t* selected = summary.data<int32_t>() + 4;
  kernels::Tensor plan_scratch = empty({n * k + e + 1}, DType::kI32);
  kernels::MoeDispatchPlan(ctx, {n, e, k, moe::ExpertCapacity(spec_, n), spec_.drop == DropPolicy::kByScore,
                                 r.experts, r.gates, selected, selected + e, r.offsets, r.row_assignment,
                                 r.assignment_row, plan_scratch.data<int32_t>()});
  const Segments seg = LossSegments(spec_, b, t);
  kernels::Tensor probs = empty({spec_.aux_loss != 0 ? n * e : 1}, DType::kF32);
  kernels::Tensor sums = empty({n + seg.count * e}, DType::kI64);  // doubles: 8 bytes each
  kernels::MoeRouterLoss(ctx, {spec, seg.count, seg.length, spec_.aux_loss, spec_.router_z_loss, r.logits, r.experts,
                               losses, probs.data<float>(), reinterpret_cast<double*>(sums.data())});
  std::vector<int32_t> host(static_cast<size_t>(4 + 2 * e));
  kernels::CopyToHost(ctx, host.data(), summary.data(), host.size() * sizeof(int32_t));  // waits for the stream
  std::memcpy(&saved.balance_loss, host.data(), sizeof(double));
  std::memcpy(&saved.z_loss, host.data() + 2, sizeof(double));
  moe::Dispatch& dispatch = saved.dispatch;
  dispatch.counts.assign(static_cast<size_t>(e), 0);
  dispatch.offsets.assign(static_cast<size_t>(e + 1), 0);
  saved.selected.assign(static_cast<size_t>(e), 0);
  for (int64_t i = 0; i < e; ++i) {
    saved.selected[i] = host[4 + i];
    dispatch.counts[i] = host[4 + e + i];
    dispatch.offsets[i + 1] = dispatch.offsets[i] + dispatch.counts[i];
  }
  dispatch.dropped = n * k - dispatch.rows();
  dispatch.row_assignment.clear(), dispatch.assignment_row.clear();  // on the device: route_ints
  saved.expert_counts = dispatch.counts;
  saved.expert_offsets = dispatch.offsets;
  return dispatch.rows();
}

int64_t MixtureOfExperts::UploadExpertOffsets(const kernels::Context& ctx, MoeActivations& saved) const {
  std::vector<int32_t> offsets(saved.expert_offsets.begin(), saved.expert_offsets.end());
  kernels::CopyToDevice(ctx, saved.route_offsets.data(), offsets.data(), offsets.size() * sizeof(int32_t));
  return saved.expert_offsets.back();
}

void MixtureOfExperts::ForwardOnDevice(const kernels::Context& ctx, int64_t b, int64_t t, const void* h, void* out,
                                       bool accumulate, MoeActivations& saved, const ForwardMode& mode) const {
  const int64_t n = b * t, k = spec_.top_k;
  Resize(b, t, ctx, saved);
  kernels::Tensor h32;  // bf16: the router reads an fp32 copy of h
  if (dtype_ != kernels::DType::kF32) h32 = kernels::Tensor::Empty({n, c_}, kernels::DType::kF32, ctx.allocator);
  const int64_t m = RouteOnDevice(ctx, b, t, Fp32Rows(ctx, n, c_, h, dtype_, h32), saved, mode);
  const DeviceRoute r = RouteOf(saved, n, k, spec_.n_experts);
  if (exchange_ == nullptr) {
    kernels::MoeGather(ctx, {dtype_, m, c_, k, r.row_assignment, h, saved.x.data()});
    experts_.ForwardGrouped(ctx, m, r.offsets, saved.x.data(), saved.pre.data(), saved.act.data(), saved.y.data());
  } else {  // out to the experts' ranks, through this rank's experts, and back
    RouteExchange(ctx, saved);
    const int64_t received = UploadExpertOffsets(ctx, saved);
    kernels::MoeGather(ctx, {dtype_, m, c_, k, r.row_assignment, h, saved.sent.data()});
    exchange_->Send(ctx, *saved.plan, saved.sent.data(), RowBytes(), saved.x.data());
    experts_.ForwardGrouped(ctx, received, r.offsets, saved.x.data(), saved.pre.data(), saved.act.data(),
                            saved.expert_y.data());
    exchange_->Return(ctx, *saved.plan, saved.expert_y.data(), RowBytes(), saved.y.data());
  }
  if (shared_.has_value()) {
    shared_->Forward(ctx, b, t, h, out, accumulate, *saved.shared, mode);
    accumulate = true;
  }
  kernels::MoeCombine(ctx, {dtype_, n, k, c_, r.assignment_row, r.gates, saved.y.data(), out, accumulate});
}

void MixtureOfExperts::BackwardOnDevice(const kernels::Context& ctx, const void* h, const MoeActivations& saved,
                                        const void* dout, void* dh, Scratch& scratch) const {
  using kernels::DType;
  const int64_t n = saved.b * saved.t, k = spec_.top_k, e = spec_.n_experts, m = saved.dispatch.rows();
  const auto take = [&](int64_t rows, int64_t cols, DType dtype) {
    return scratch.Take({std::max<int64_t>(rows, 1), cols}, dtype);
  };
  const DeviceRoute r = RouteOf(saved, n, k, e);
  // Through the combine to the expert outputs and the gates, then through the experts to their rows.
  void* dy = take(m, c_, dtype_).data();
  float* dgates = take(n, k, DType::kF32).data<float>();
  kernels::MoeCombineBackward(ctx, {dtype_, n, k, c_, r.assignment_row, r.gates, saved.y.data(), dout, dy, dgates});
  void* drows = take(m, c_, dtype_).data();
  if (exchange_ == nullptr) {
    experts_.BackwardGrouped(ctx, m, r.offsets, saved.x.data(), saved.pre.data(), saved.act.data(), dy,
                             take(m, experts_.hidden(), dtype_).data(), take(m, experts_.width(), dtype_).data(),
                             drows);
  } else {  // the outputs' gradients to the experts' ranks along the forward's plan, the rows' back
    const int64_t received = saved.expert_offsets.back();
    void* expert_dy = take(received, c_, dtype_).data();
    void* expert_dx = take(received, c_, dtype_).data();
    exchange_->Send(ctx, *saved.plan, dy, RowBytes(), expert_dy);
    experts_.BackwardGrouped(ctx, received, r.offsets, saved.x.data(), saved.pre.data(), saved.act.data(), expert_dy,
                             take(received, experts_.hidden(), dtype_).data(),
                             take(received, experts_.width(), dtype_).data(), expert_dx);
    exchange_->Return(ctx, *saved.plan, expert_dx, RowBytes(), drows);
  }
  // The router: the gates' gradient and the losses' (weight 1) -> dlogits, then its fp32 GEMM writes dh_router.
  const Segments seg = LossSegments(spec_, saved.b, saved.t);
  float* dlogits = take(n, e, DType::kF32).data<float>();
  kernels::MoeRouteBackward(ctx, {moe::DeviceRouterSpec(spec_), seg.count, seg.length, spec_.aux_loss,
                                  spec_.router_z_loss, r.logits, r.experts, dgates, dlogits,
                                  take(seg.count, e, DType::kI32).data<int32_t>()});
  kernels::Tensor h32 = take(n, c_, DType::kF32), dh_router = take(n, c_, DType::kF32);
  const void* x32 = Fp32Rows(ctx, n, c_, h, dtype_, h32);
  router_.Backward(ctx, n, x32, c_, dlogits, e, dh_router.data());
  if (r.noise_logits != nullptr) {  // a noisy training forward's H = z + eps softplus(z_noise): W_noise's share
    float* dnoise = take(n, e, DType::kF32).data<float>();
    kernels::Tensor dh_noise = take(n, c_, DType::kF32);
    kernels::MoeGatingNoiseBackward(ctx, {n, e, r.noise_logits, r.eps, dlogits, dnoise});
    noise_router_->Backward(ctx, n, x32, c_, dnoise, e, dh_noise.data());
    kernels::ResidualBackward(ctx, {DType::kF32, n * c_, dh_noise.data(), dh_router.data(), nullptr});  // +=
  }
  // dh = the router's (fp32) + the rows' gradients summed into their tokens, rounded once into dtype.
  kernels::MoeScatterAdd(ctx, {dtype_, n, k, c_, r.assignment_row, drows, dh_router.data<float>(), dh});
  if (shared_.has_value()) {
    void* dshared = take(n, c_, dtype_).data();
    shared_->Backward(ctx, h, *saved.shared, dout, dshared, scratch);
    kernels::ResidualBackward(ctx, {dtype_, n * c_, dshared, dh, nullptr});  // dh += dshared
  }
  CountAssignments(saved);
}

}  // namespace lmf::model
