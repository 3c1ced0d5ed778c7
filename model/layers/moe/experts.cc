// The routed experts' grouped GEMMs over kernels/matmul, kernels/swiglu and kernels/activations.
#include "model/layers/moe/experts.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kernels/core/dispatch.h"
#include "kernels/matmul/matmul.h"
#include "kernels/swiglu/swiglu.h"
#include "model/layers/feed_forward/feed_forward.h"

namespace lmf::model::moe {
namespace {

// ctx on a one-thread pool of the calling thread: for a GEMM run whole inside a task of ctx's pool.
kernels::Context SerialContext(const kernels::Context& ctx) {
  thread_local ThreadPool serial(1);
  kernels::Context one = ctx;
  one.pool = &serial;
  return one;
}

}  // namespace

void Experts::ForEachExpert(const kernels::Context& ctx, const char* op, const std::vector<int64_t>& counts,
                            const std::function<void(int64_t, const kernels::Context&)>& gemm) const {
  kernels::CpuOpScope op_scope(op);  // holds the GEMMs of both threads (and the waits between) on the CPU
  std::vector<int64_t> order;  // the experts with rows, most rows first (ties: lower index)
  for (int64_t e = 0; e < e_; ++e) {
    if (counts[e] > 0) order.push_back(e);
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return counts[a] > counts[b]; });
  const int64_t threads = ctx.device.is_cpu() ? ctx.num_threads() : 1;  // a device queues its GEMMs in order
  int64_t left = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  size_t first = 0;
  // An expert with more than its thread's share of the rows left is split over all threads; then the rest run
  // whole, one per thread, largest first (the pool hands the next one to whichever thread is free).
  for (; first < order.size() && (threads == 1 || counts[order[first]] * threads > left); ++first) {
    gemm(order[first], ctx);
    left -= counts[order[first]];
  }
  if (first == order.size()) return;
  ctx.pool->RunTasks(static_cast<int64_t>(order.size() - first),
                     [&](int64_t i) { gemm(order[first + static_cast<size_t>(i)], SerialContext(ctx)); });
}

Experts::Experts(const MoeSpec& spec, int64_t first, int64_t count, int64_t d_model, bool biases,
                 const kernels::Context& ctx, kernels::DType dtype, StepCounters* counters)
    : kind_(spec.expert_kind),
      first_(first),
      e_(count),
      c_(d_model),
      f_(spec.d_expert),
      w_((spec.gated_experts() ? 2 : 1) * spec.d_expert),
      biases_(biases),
      dtype_(dtype),
      w_in_(Parameter::Zeros({e_ * w_, c_}, ParameterKind::kMatrix, ctx, dtype)),
      w_out_(Parameter::Zeros({e_ * c_, f_}, ParameterKind::kResidualMatrix, ctx, dtype)),
      counters_(counters) {
  if (biases_) {
    b_in_ = Parameter::Zeros({e_ * w_}, ParameterKind::kBias, ctx, dtype);
    b_out_ = Parameter::Zeros({e_ * c_}, ParameterKind::kBias, ctx, dtype);
  }
  const bool shard = count < spec.n_experts;
  w_in_.expert_shard = w_out_.expert_shard = b_in_.expert_shard = b_out_.expert_shard = shard;
}

void Experts::Activate(const kernels::Context& ctx, int64_t m, const void* pre, void* act) const {
  if (gated()) {
    kernels::SwiGluForwardParams p;
    p.dtype = dtype_;
    p.N = m, p.H = f_, p.gate = pre, p.gate_stride = w_, p.up = ElementOffset(pre, f_, dtype_), p.up_stride = w_;
    p.out = act;
    p.activation = activation();
    kernels::SwiGluForward(ctx, p);
  } else {
    kernels::ActivationForwardParams p;
    p.dtype = dtype_;
    p.kind = activation(), p.n = m * f_, p.x = pre, p.out = act;
    kernels::ActivationForward(ctx, p);
  }
}

void Experts::ActivateBackward(const kernels::Context& ctx, int64_t m, const void* pre, const void* dact,
                               void* dpre) const {
  if (gated()) {
    kernels::SwiGluBackwardParams p;
    p.dtype = dtype_;
    p.N = m, p.H = f_, p.gate = pre, p.gate_stride = w_, p.up = ElementOffset(pre, f_, dtype_), p.up_stride = w_;
    p.dout = dact, p.dgate = dpre, p.dup = ElementOffset(dpre, f_, dtype_), p.activation = activation();
    kernels::SwiGluBackward(ctx, p);
  } else {
    kernels::ActivationBackwardParams p;
    p.dtype = dtype_;
    p.kind = activation(), p.n = m * f_, p.x = pre, p.dout = dact, p.dx = dpre;
    kernels::ActivationBackward(ctx, p);
  }
}

void Experts::GroupedLinear(const kernels::Context& ctx, const std::vector<int64_t>& counts,
                            const std::vector<int64_t>& offsets, int64_t k, int64_t n, const void* x,
                            const Parameter& w, const Parameter* b, void* y) const {
  ForEachExpert(ctx, "ExpertMatmuls", counts, [&](int64_t e, const kernels::Context& run) {
    const int64_t first = offsets[e], rows = counts[e];
    kernels::MatmulParams p = kernels::LinearParams(
        rows, k, n, ElementOffset(x, first * k, dtype_), ElementOffset(w.compute.data(), e * n * k, dtype_),
        b != nullptr ? ElementOffset(b->compute.data(), e * n, dtype_) : nullptr, ElementOffset(y, first * n, dtype_));
    p.dtype = dtype_;
    kernels::Matmul(run, p);
  });
  counters_->matmul_flops += 2.0 * static_cast<double>(offsets[e_]) * static_cast<double>(k * n);
}

void Experts::GroupedLinearBackward(const kernels::Context& ctx, const std::vector<int64_t>& counts,
                                    const std::vector<int64_t>& offsets, int64_t k, int64_t n, const void* x,
                                    const Parameter& w, const Parameter* b, const void* dy, void* dx,
                                    DeferredWeightGrads* deferred) const {
  const auto params = [&](int64_t e) {
    const int64_t first = offsets[e], rows = counts[e];
    kernels::MatmulBackwardParams p;
    p.forward = kernels::LinearParams(rows, k, n, ElementOffset(x, first * k, dtype_),
                                      ElementOffset(w.compute.data(), e * n * k, dtype_), nullptr, nullptr);
    p.forward.dtype = dtype_;
    p.dc = ElementOffset(dy, first * n, dtype_);
    p.da = ElementOffset(dx, first * k, dtype_);
    p.db = w.grad_data() + e * n * k;
    p.dbias = b != nullptr ? b->grad_data() + e * n : nullptr;
    return p;
  };
  // Each expert's dx rows and gradient blocks are its own, so the experts run concurrently. Deferred weight
  // gradients are queued in expert order after the input gradients.
  ForEachExpert(ctx, "ExpertMatmulsBackward", counts, [&](int64_t e, const kernels::Context& run) {
    kernels::MatmulBackwardParams p = params(e);
    if (deferred != nullptr) p.db = p.dbias = nullptr;
    kernels::MatmulBackward(run, p);
  });
  for (int64_t e = 0; deferred != nullptr && e < e_; ++e) {
    if (counts[e] == 0) continue;
    kernels::MatmulBackwardParams p = params(e);
    p.da = nullptr;
    MatmulBackwardOrDefer(ctx, p, deferred);
  }
  counters_->matmul_flops += 4.0 * static_cast<double>(offsets[e_]) * static_cast<double>(k * n);
}

void Experts::Forward(const kernels::Context& ctx, const std::vector<int64_t>& counts,
                      const std::vector<int64_t>& offsets, const void* x, void* pre, void* act, void* y) const {
  GroupedLinear(ctx, counts, offsets, c_, w_, x, w_in_, biases_ ? &b_in_ : nullptr, pre);
  const int64_t m = offsets[e_];
  if (m > 0) Activate(ctx, m, pre, act);
  GroupedLinear(ctx, counts, offsets, f_, c_, act, w_out_, biases_ ? &b_out_ : nullptr, y);
}

void Experts::Backward(const kernels::Context& ctx, const std::vector<int64_t>& counts,
                       const std::vector<int64_t>& offsets, const void* x, const void* pre, const void* act,
                       const void* dy, void* dact, void* dpre, void* dx, DeferredWeightGrads* deferred) const {
  GroupedLinearBackward(ctx, counts, offsets, f_, c_, act, w_out_, biases_ ? &b_out_ : nullptr, dy, dact, deferred);
  const int64_t m = offsets[e_];
  if (m > 0) ActivateBackward(ctx, m, pre, dact, dpre);
  GroupedLinearBackward(ctx, counts, offsets, c_, w_, x, w_in_, biases_ ? &b_in_ : nullptr, dpre, dx, deferred);
}

void Experts::VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const {
  for (int64_t e = 0; e < e_; ++e) {
    const std::string at = absl::StrCat(prefix, ".", first_ + e);
    visit(at + ".w1.weight", w_in_.Rows(e * w_, f_));
    if (biases_) visit(at + ".w1.bias", b_in_.Rows(e * w_, f_));
    if (gated()) {
      visit(at + ".w3.weight", w_in_.Rows(e * w_ + f_, f_));
      if (biases_) visit(at + ".w3.bias", b_in_.Rows(e * w_ + f_, f_));
    }
    visit(at + ".w2.weight", w_out_.Rows(e * c_, c_));
    if (biases_) visit(at + ".w2.bias", b_out_.Rows(e * c_, c_));
  }
}

int64_t Experts::Parameters(const MoeSpec& spec, int64_t d_model, bool biases) {
  const int64_t matrices = spec.gated_experts() ? 3 : 2;
  int64_t per_expert = matrices * d_model * spec.d_expert;
  if (biases) per_expert += (matrices - 1) * spec.d_expert + d_model;
  return spec.n_experts * per_expert;
}

}  // namespace lmf::model::moe
