// The mixture-of-experts channel mixer: router, dispatch, grouped experts and shared experts (see moe.h).
#include "model/layers/moe/moe.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/core/allocator.h"
#include "kernels/memory/memory.h"
#include "kernels/moe_route/moe_route.h"
#include "kernels/moe_rows/moe_rows.h"
#include "model/layers/moe/router.h"

namespace lmf::model {

int64_t MoeActivations::bytes() const {
  int64_t bytes = static_cast<int64_t>((logits.size() + noise_logits.size() + noise.size()) * sizeof(float) +
                                       experts.size() * sizeof(int32_t) +
                                       gates.size() * sizeof(float) +
                                       dispatch.row_assignment.size() * sizeof(int32_t) +
                                       dispatch.assignment_row.size() * sizeof(int32_t));
  bytes += HeldBytes(x) + HeldBytes(pre) + HeldBytes(act) + HeldBytes(expert_y) + HeldBytes(y) + HeldBytes(sent);
  bytes += HeldBytes(route_logits) + HeldBytes(route_noise) + HeldBytes(route_ints) + HeldBytes(route_gates);
  if (shared != nullptr) bytes += shared->bytes();
  return bytes;
}

void MoeActivations::Release() {
  std::unique_ptr<LayerActivations> kept = std::move(shared);
  *this = MoeActivations();
  if (kept != nullptr) {
    kept->Release();
    shared = std::move(kept);
  }
}

namespace {

// The experts a rank holds: [first, first + count).
struct ExpertBlock {
  int64_t first, count;
};
ExpertBlock HeldExperts(const MoeSpec& spec, const moe::ExpertExchange* exchange) {
  if (exchange == nullptr) return {0, spec.n_experts};
  LMF_CHECK(exchange->ranks() >= 1 && spec.n_experts % exchange->ranks() == 0)
      << spec.n_experts << " experts do not divide over " << exchange->ranks() << " expert-parallel ranks";
  const int64_t count = spec.n_experts / exchange->ranks();
  return {exchange->rank() * count, count};
}

// t holds at least rows x cols of dtype (reallocated, contents lost, when it is smaller).
void EnsureRows(kernels::Tensor& t, int64_t rows, int64_t cols, const kernels::Context& ctx,
                kernels::DType dtype = kernels::DType::kF32) {
  rows = std::max<int64_t>(rows, 1);
  if (t.defined() && t.numel() >= rows * cols) return;
  t = kernels::Tensor::Empty({rows, cols}, dtype, ctx.allocator);
}

}  // namespace

MixtureOfExperts::MixtureOfExperts(const MoeSpec& spec, const ModelConfig& model, const kernels::Context& ctx,
                                   kernels::DType dtype, StepCounters* counters, moe::ExpertExchange* exchange)
    : spec_(spec),
      c_(model.d_model),
      ctx_(ctx),
      dtype_(dtype),
      exchange_(exchange),
      router_(model.d_model, spec.n_experts, /*bias=*/false, ParameterKind::kMatrix, ctx, kernels::DType::kF32,
              counters),
      experts_(spec, HeldExperts(spec, exchange).first, HeldExperts(spec, exchange).count, model.d_model,
               model.biases, ctx, dtype, counters) {
  if (spec.shared_d_ff > 0) shared_.emplace(SharedSpec(spec), model, ctx, dtype, counters);
  if (spec.noisy_gating) {
    noise_router_.emplace(model.d_model, spec.n_experts, /*bias=*/false, ParameterKind::kMatrix, ctx,
                          kernels::DType::kF32, counters);
  }
  if (spec.expert_bias) {  // on the model's device (checkpoints copy it from there)
    expert_bias_ = kernels::Tensor::Empty({spec.n_experts}, kernels::DType::kF32, ctx.allocator);
    kernels::FillZero(ctx, expert_bias_.data(), expert_bias_.nbytes());
  }
  // The counts on the host on every device: the step strategies read and all-reduce them there.
  expert_load_ = kernels::Tensor::Zeros({spec.n_experts}, kernels::DType::kF32, &kernels::CpuAllocator::Default());
  expert_dropped_ = kernels::Tensor::Zeros({spec.n_experts}, kernels::DType::kF32, &kernels::CpuAllocator::Default());
}

std::unique_ptr<LayerActivations> MixtureOfExperts::NewActivations() const {
  auto saved = std::make_unique<MoeActivations>();
  if (shared_.has_value()) saved->shared = shared_->NewActivations();
  return saved;
}

void MixtureOfExperts::Resize(int64_t b, int64_t t, const kernels::Context& ctx, MoeActivations& saved) const {
  const int64_t n = b * t, rows = n * spec_.top_k;
  saved.b = b, saved.t = t;
  if (ctx.device.is_cpu()) {  // the device path keeps its routing in route_* on the device
    saved.logits.resize(static_cast<size_t>(n * spec_.n_experts));
    saved.experts.resize(static_cast<size_t>(rows));
    saved.gates.resize(static_cast<size_t>(rows));
  }
  EnsureRows(saved.y, rows, c_, ctx, dtype_);
  if (exchange_ == nullptr) {  // the expert-side rows are this rank's rows: at most N * k
    EnsureRows(saved.x, rows, c_, ctx, dtype_);
    EnsureRows(saved.pre, rows, experts_.width(), ctx, dtype_);
    EnsureRows(saved.act, rows, experts_.hidden(), ctx, dtype_);
  }
}

void MixtureOfExperts::RouteExchange(const kernels::Context& ctx, MoeActivations& saved) const {
  const int64_t m = saved.dispatch.rows();
  // Each row's global expert (the rows are sorted by expert): the plan, and what this rank's experts receive.
  std::vector<int32_t> row_experts(static_cast<size_t>(m));
  for (int64_t e = 0; e < spec_.n_experts; ++e) {
    std::fill_n(row_experts.begin() + saved.dispatch.offsets[e], saved.dispatch.counts[e], static_cast<int32_t>(e));
  }
  saved.plan = exchange_->Route(ctx, row_experts.data(), m, spec_.n_experts, &saved.expert_counts);
  saved.expert_offsets.assign(saved.expert_counts.size() + 1, 0);
  for (size_t e = 0; e < saved.expert_counts.size(); ++e) {
    saved.expert_offsets[e + 1] = saved.expert_offsets[e] + saved.expert_counts[e];
  }
  const int64_t r = saved.plan->received_rows();
  EnsureRows(saved.x, r, c_, ctx, dtype_);
  EnsureRows(saved.pre, r, experts_.width(), ctx, dtype_);
  EnsureRows(saved.act, r, experts_.hidden(), ctx, dtype_);
  EnsureRows(saved.expert_y, r, c_, ctx, dtype_);
  EnsureRows(saved.sent, m, c_, ctx, dtype_);
}

size_t MixtureOfExperts::RowBytes() const { return static_cast<size_t>(c_) * kernels::DTypeSize(dtype_); }

void MixtureOfExperts::RunExperts(const kernels::Context& ctx, const float* h, MoeActivations& saved) const {
  const int64_t k = spec_.top_k, m = saved.dispatch.rows();
  if (exchange_ == nullptr) {
    saved.expert_counts = saved.dispatch.counts;
    saved.expert_offsets = saved.dispatch.offsets;
    kernels::MoeGather(ctx, {kernels::DType::kF32, m, c_, k, saved.dispatch.row_assignment.data(), h, saved.x.data()});
    experts_.Forward(ctx, saved.expert_counts, saved.expert_offsets, saved.x.data<float>(), saved.pre.data<float>(),
                     saved.act.data<float>(), saved.y.data<float>());
    return;
  }
  // Out to the experts' ranks and back through the exchange.
  RouteExchange(ctx, saved);
  kernels::MoeGather(ctx, {kernels::DType::kF32, m, c_, k, saved.dispatch.row_assignment.data(), h, saved.sent.data()});
  exchange_->Send(ctx, *saved.plan, saved.sent.data(), RowBytes(), saved.x.data());
  experts_.Forward(ctx, saved.expert_counts, saved.expert_offsets, saved.x.data<float>(), saved.pre.data<float>(),
                   saved.act.data<float>(), saved.expert_y.data<float>());
  exchange_->Return(ctx, *saved.plan, saved.expert_y.data(), RowBytes(), saved.y.data());
}

void MixtureOfExperts::RunExpertsBackward(const kernels::Context& ctx, const MoeActivations& saved, const float* dy,
                                          float* drows, Scratch& scratch) const {
  const int64_t r = saved.expert_offsets.back();
  const auto take = [&](int64_t rows, int64_t cols) {
    return scratch.Take({std::max<int64_t>(rows, 1), cols}, kernels::DType::kF32).data<float>();
  };
  const float* expert_dy = dy;
  float* expert_dx = drows;
  if (exchange_ != nullptr) {
    float* received = take(r, c_);
    exchange_->Send(ctx, *saved.plan, dy, RowBytes(), received);
    expert_dy = received;
    expert_dx = take(r, c_);
  }
  experts_.Backward(ctx, saved.expert_counts, saved.expert_offsets, saved.x.data<float>(), saved.pre.data<float>(),
                    saved.act.data<float>(), expert_dy, take(r, experts_.hidden()), take(r, experts_.width()),
                    expert_dx, scratch.deferred());
  if (exchange_ != nullptr) exchange_->Return(ctx, *saved.plan, expert_dx, RowBytes(), drows);
}

void MixtureOfExperts::Forward(const kernels::Context& ctx, int64_t b, int64_t t, const void* h, void* out,
                               bool accumulate, LayerActivations& saved_base, const ForwardMode& mode) const {
  MoeActivations& saved = StateAs<MoeActivations>(saved_base);
  if (!ctx.device.is_cpu()) return ForwardOnDevice(ctx, b, t, h, out, accumulate, saved, mode);
  const int64_t n = b * t, k = spec_.top_k;
  Resize(b, t, ctx, saved);
  const float* x = static_cast<const float*>(h);
  float* o = static_cast<float*>(out);
  router_.Forward(ctx, n, x, c_, saved.logits.data(), spec_.n_experts, /*accumulate=*/false);
  const bool noisy = noise_router_.has_value() && mode.training;  // evaluation routes on z alone
  saved.noise_logits.resize(noisy ? saved.logits.size() : 0);
  saved.noise.resize(saved.noise_logits.size());
  if (noisy) {
    noise_router_->Forward(ctx, n, x, c_, saved.noise_logits.data(), spec_.n_experts, /*accumulate=*/false);
    moe::GatingNoise(mode.seed, mode.step, mode.layer, mode.first_token, n, spec_.n_experts, saved.noise.data());
    moe::AddGatingNoise(n, spec_.n_experts, saved.noise_logits.data(), saved.noise.data(), saved.logits.data());
  }
  moe::Route(spec_, n, saved.logits.data(), spec_.expert_bias ? expert_bias_.data<float>() : nullptr,
             saved.experts.data(), saved.gates.data());
  saved.balance_loss = moe::BalanceLoss(spec_, b, t, saved.logits.data(), saved.experts.data());
  saved.z_loss = moe::RouterZLoss(spec_, n, saved.logits.data());
  moe::BuildDispatch(spec_, n, saved.experts.data(), saved.gates.data(), saved.dispatch);
  RunExperts(ctx, x, saved);
  if (shared_.has_value()) {
    shared_->Forward(ctx, b, t, h, out, accumulate, *saved.shared, mode);
    accumulate = true;
  }
  kernels::MoeCombine(ctx, {kernels::DType::kF32, n, k, c_, saved.dispatch.assignment_row.data(), saved.gates.data(),
                            saved.y.data(), o, accumulate});
}

void MixtureOfExperts::Backward(const kernels::Context& ctx, const void* h, const LayerActivations& saved_base,
                                const void* dout_v, void* dh_v, Scratch& scratch) const {
  const MoeActivations& saved = StateAs<MoeActivations>(saved_base);
  if (!ctx.device.is_cpu()) return BackwardOnDevice(ctx, h, saved, dout_v, dh_v, scratch);
  const int64_t n = saved.b * saved.t, k = spec_.top_k, e = spec_.n_experts, m = saved.dispatch.rows();
  const float* x = static_cast<const float*>(h);
  const float* dout = static_cast<const float*>(dout_v);
  float* dh = static_cast<float*>(dh_v);
  const auto take = [&](int64_t rows, int64_t cols) {
    return scratch.Take({std::max<int64_t>(rows, 1), cols}, kernels::DType::kF32).data<float>();
  };
  float* dy = take(m, c_);
  float* dgates = take(n, k);
  float* dlogits = take(n, e);
  // Through the combine to the expert outputs and the gates, then through the experts to their rows.
  kernels::MoeCombineBackward(ctx, {kernels::DType::kF32, n, k, c_, saved.dispatch.assignment_row.data(),
                                    saved.gates.data(), saved.y.data(), dout, dy, dgates});
  float* drows = take(m, c_);
  RunExpertsBackward(ctx, saved, dy, drows, scratch);
  // The router: the gates' gradient and the losses' (weight 1), then its GEMM writes dh_router.
  moe::RouteBackward(spec_, n, saved.logits.data(), saved.experts.data(), dgates, dlogits);
  moe::BalanceLossBackward(spec_, saved.b, saved.t, saved.logits.data(), saved.experts.data(), dlogits);
  moe::RouterZLossBackward(spec_, n, saved.logits.data(), dlogits);
  float* dh_router = take(n, c_);
  router_.Backward(ctx, n, x, c_, dlogits, e, dh_router, scratch.deferred());
  if (!saved.noise.empty()) {  // a noisy training forward's H = z + eps softplus(z_noise): W_noise's share of dh
    float* dnoise = take(n, e);
    float* dh_noise = take(n, c_);
    moe::GatingNoiseBackward(n, e, saved.noise_logits.data(), saved.noise.data(), dlogits, dnoise);
    noise_router_->Backward(ctx, n, x, c_, dnoise, e, dh_noise, scratch.deferred());
    for (int64_t i = 0; i < n * c_; ++i) dh_router[i] += dh_noise[i];
  }
  // dh = the router's + the rows' gradients summed into their tokens (the gather's backward).
  kernels::MoeScatterAdd(ctx, {kernels::DType::kF32, n, k, c_, saved.dispatch.assignment_row.data(), drows, dh_router,
                               dh});
  if (shared_.has_value()) {
    float* dshared = take(n, c_);
    shared_->Backward(ctx, h, *saved.shared, dout, dshared, scratch);
    for (int64_t i = 0; i < n * c_; ++i) dh[i] += dshared[i];
  }
  CountAssignments(saved);
}

void MixtureOfExperts::CountAssignments(const MoeActivations& saved) const {
  // Called by the backwards, where each micro-batch's forward is counted once even when recomputed.
  float* load = expert_load_.data<float>();
  float* dropped = expert_dropped_.data<float>();
  if (!saved.selected.empty()) {  // the device path: its per-expert counts
    for (int64_t i = 0; i < spec_.n_experts; ++i) {
      load[i] += static_cast<float>(saved.selected[i]);
      dropped[i] += static_cast<float>(saved.selected[i] - saved.dispatch.counts[i]);
    }
    return;
  }
  for (size_t a = 0; a < saved.experts.size(); ++a) {
    load[saved.experts[a]] += 1.0f;
    if (saved.dispatch.assignment_row[a] < 0) dropped[saved.experts[a]] += 1.0f;
  }
}

void MixtureOfExperts::VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const {
  router_.VisitParameters(prefix + ".router", visit);
  if (noise_router_.has_value()) noise_router_->VisitParameters(prefix + ".router.noise", visit);
  experts_.VisitParameters(prefix + ".experts", visit);
  if (shared_.has_value()) shared_->VisitParameters(prefix + ".shared", visit);
}

void MixtureOfExperts::VisitBuffers(const std::string& prefix, const BufferVisitor& visit) const {
  if (spec_.expert_bias) visit(prefix + ".router.expert_bias", expert_bias_);
}

void MixtureOfExperts::VisitStepCounts(const std::string& prefix, const BufferVisitor& visit) const {
  visit(prefix + ".router.expert_load", expert_load_);
  visit(prefix + ".router.expert_dropped", expert_dropped_);
}

void MixtureOfExperts::EndStep() const {
  float* load = expert_load_.data<float>();
  if (spec_.expert_bias) {  // moved on a host copy of the bias, which lives on the model's device
    const size_t bytes = static_cast<size_t>(spec_.n_experts) * sizeof(float);
    std::vector<float> bias(static_cast<size_t>(spec_.n_experts));
    kernels::CopyToHost(ctx_, bias.data(), expert_bias_.data(), bytes);
    double mean = 0;
    for (int64_t i = 0; i < spec_.n_experts; ++i) mean += load[i];
    mean /= static_cast<double>(spec_.n_experts);
    for (int64_t i = 0; i < spec_.n_experts; ++i) {
      const double sign = mean > load[i] ? 1.0 : mean < load[i] ? -1.0 : 0.0;
      bias[i] = static_cast<float>(bias[i] + spec_.bias_update_rate * sign);
    }
    kernels::CopyToDevice(ctx_, expert_bias_.data(), bias.data(), bytes);
  }
  std::fill(load, load + spec_.n_experts, 0.0f);
  std::fill(expert_dropped_.data<float>(), expert_dropped_.data<float>() + spec_.n_experts, 0.0f);
}

int64_t MixtureOfExperts::Parameters(const MoeSpec& spec, const ModelConfig& model) {
  const int64_t routers = (spec.noisy_gating ? 2 : 1) * spec.n_experts * model.d_model;
  int64_t count = routers + moe::Experts::Parameters(spec, model.d_model, model.biases);
  if (spec.shared_d_ff > 0) count += FeedForward::Parameters(SharedSpec(spec), model);
  return count;
}

int64_t MixtureOfExperts::ActiveParameters(const MoeSpec& spec, const ModelConfig& model) {
  MoeSpec active = spec;
  active.n_experts = spec.top_k;
  return (spec.noisy_gating ? 2 : 1) * spec.n_experts * model.d_model +
         moe::Experts::Parameters(active, model.d_model, model.biases) +
         (spec.shared_d_ff > 0 ? FeedForward::Parameters(SharedSpec(spec), model) : 0);
}

double MixtureOfExperts::MatmulFlopsPerToken(const MoeSpec& spec, const ModelConfig& model) {
  const double c = static_cast<double>(model.d_model);
  const double expert = 2.0 * (spec.gated_experts() ? 3 : 2) * c * static_cast<double>(spec.d_expert);
  const double routers = spec.noisy_gating ? 2 : 1;
  double flops = routers * 2.0 * c * static_cast<double>(spec.n_experts) + static_cast<double>(spec.top_k) * expert;
  if (spec.shared_d_ff > 0) flops += FeedForward::MatmulFlopsPerToken(SharedSpec(spec), model);
  return flops;
}

int64_t MixtureOfExperts::SavedBytesPerToken(const MoeSpec& spec, const ModelConfig& model, kernels::DType dtype) {
  const int64_t k = spec.top_k, c = model.d_model, f = spec.d_expert, w = (spec.gated_experts() ? 2 : 1) * f;
  const int64_t size = static_cast<int64_t>(kernels::DTypeSize(dtype));
  // The fp32 logits (E, on the host), and per assignment its expert, gate, row and the row's assignment
  // (4 bytes each, on the host) and the row's input, pre-activations, activation and output (in dtype, on the
  // model's device).
  int64_t bytes = (spec.noisy_gating ? 3 : 1) * 4 * spec.n_experts + k * 4 * 4 + k * size * (c + w + f + c);
  if (spec.shared_d_ff > 0) bytes += FeedForward::SavedBytesPerToken(SharedSpec(spec), dtype);
  return bytes;
}

absl::Status MixtureOfExperts::CheckSupport(const MoeSpec& spec, kernels::Device device, kernels::DType dtype) {
  if (device.is_cpu() && dtype != kernels::DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the mixture of experts runs on the CPU in F32 only (BF16 on CUDA), not in ", PrecisionName(dtype),
        ": set run.precision=FP32 or run.device=CUDA"));
  }
  if (!device.is_cpu() && spec.n_experts > kernels::kMaxRouteExperts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe.n_experts (model.moe or a model.layer_pattern entry's moe): ", spec.n_experts, " experts; the router on ",
        DeviceName(device), " takes at most ", kernels::kMaxRouteExperts));
  }
  std::vector<const char*> ops = {"matmul", spec.gated_experts() ? "swiglu" : "activation", "moe_rows"};
  if (!device.is_cpu()) ops.insert(ops.end(), {"moe_route", "grouped_matmul"});  // routing, grouped GEMMs
  if (!device.is_cpu() && spec.shared_d_ff > 0) ops.push_back("residual");  // dh += the shared experts'
  if (dtype != kernels::DType::kF32) ops.push_back("cast");  // the router reads an fp32 copy of h
  return CheckOpsSupported(ops, device, dtype);
}

}  // namespace lmf::model
