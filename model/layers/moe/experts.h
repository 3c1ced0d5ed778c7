// The routed experts of a mixture of experts: E feed-forwards of one kind (SwiGLU, GeGLU, GELU, ReLU) and
// hidden width F, stored stacked so that each is a row block of one buffer: w_in (E * W, C), W = 2F for the
// gated kinds (expert e's w1 then w3) else F, and w_out (E * C, F) (expert e's w2), with biases (E * W) and
// (E * C) where the model has biases. Each expert's rows (a contiguous block from the dispatcher) run as one
// GEMM per matrix through kernels/matmul; the activation runs over all rows at once. On a CPU pool of several
// threads the experts' GEMMs run concurrently, each whole on one thread (an expert holding more than a
// thread's share of the rows is split over the pool first): per-expert row counts are too small for two
// threads to share one GEMM well. Parameters are visited
// per expert under torch.nn.Linear names: "<prefix>.{e}.w1.weight" (F, C), "<prefix>.{e}.w3.weight",
// "<prefix>.{e}.w2.weight" (C, F) and their biases.
//
// Under expert parallelism an Experts holds a block of them: experts [first, first + count) of the E,
// visited under their global indices (the same names, and so the same initial values, as in one process);
// their Parameters are marked expert_shard.
//
// Rows and weight copies in the activation dtype (f32, or bf16 on CUDA) on the model's device; the master
// weights and their gradients fp32. Parameter gradients accumulate, activation gradients are written.
#ifndef LMFORGE_MODEL_LAYERS_MOE_EXPERTS_H_
#define LMFORGE_MODEL_LAYERS_MOE_EXPERTS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/activations/activations.h"
#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/layers/feed_forward/feed_forward.h"
#include "model/layers/layer.h"
#include "model/layers/parameter.h"

namespace lmf::model::moe {

class Experts {
 public:
  // Experts [first, first + count) of spec.n_experts; count < n_experts marks them expert_shard.
  Experts(const MoeSpec& spec, int64_t first, int64_t count, int64_t d_model, bool biases,
          const kernels::Context& ctx, kernels::DType dtype, StepCounters* counters);

  int64_t width() const { return w_; }  // W: the first GEMM's output per row
  int64_t hidden() const { return f_; } // F

  // Rows [offsets[e], offsets[e] + counts[e]) of x (M, C) go through expert e: pre (M, W) the first GEMM's
  // output, act (M, F) the activation's, y (M, C) written.
  void Forward(const kernels::Context& ctx, const std::vector<int64_t>& counts, const std::vector<int64_t>& offsets,
               const void* x, void* pre, void* act, void* y) const;
  // dy (M, C) -> dx (M, C) written; every expert's parameter gradients accumulated, or with `deferred`
  // queued there (with copies of dy and dpre; x and act must stay unchanged until they run). x, pre and act
  // as the Forward left them; dact (M, F) and dpre (M, W) are temporaries.
  void Backward(const kernels::Context& ctx, const std::vector<int64_t>& counts, const std::vector<int64_t>& offsets,
                const void* x, const void* pre, const void* act, const void* dy, void* dact, void* dpre,
                void* dx, DeferredWeightGrads* deferred = nullptr) const;

  // The same on a device, in one grouped GEMM per matrix (kernels/grouped_matmul) over the m rows whose
  // row offsets (count() + 1, int32) live on the device: no per-expert host loop, no counts on the host.
  // Parameter gradients accumulate at once (no deferral).
  void ForwardGrouped(const kernels::Context& ctx, int64_t m, const int32_t* offsets, const void* x, void* pre,
                      void* act, void* y) const;
  void BackwardGrouped(const kernels::Context& ctx, int64_t m, const int32_t* offsets, const void* x, const void* pre,
                       const void* act, const void* dy, void* dact, void* dpre, void* dx) const;

  void VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const;
  int64_t count() const { return e_; }  // the experts held here; counts and offsets have this many

  static int64_t Parameters(const MoeSpec& spec, int64_t d_model, bool biases);  // all E experts

 private:
  bool gated() const { return kind_ == FfnKind::kSwiGLU || kind_ == FfnKind::kGeGLU; }
  kernels::Activation activation() const { return FfnActivation(kind_); }
  // The activation of pre's rows [0, m) into act, and its backward.
  void Activate(const kernels::Context& ctx, int64_t m, const void* pre, void* act) const;
  void ActivateBackward(const kernels::Context& ctx, int64_t m, const void* pre, const void* dact,
                        void* dpre) const;
  // gemm(e, run) for every expert e with rows, on ctx or, run whole inside a task of ctx's pool, on a
  // one-thread context (see the top of the file). gemm must touch only expert e's rows and parameter blocks.
  // `op` (a string literal) names the whole in the CPU op profile (kernels/profile/cpu_op_profiler.h).
  void ForEachExpert(const kernels::Context& ctx, const char* op, const std::vector<int64_t>& counts,
                     const std::function<void(int64_t, const kernels::Context&)>& gemm) const;
  // One GEMM per expert: rows [offsets[e], offsets[e] + counts[e]) of x (M, k) times expert e's block of
  // w (E*n, k), transposed, plus its bias block (b: null for none) -> y (M, n) written. The backward
  // writes dx (M, k) and accumulates w's and b's gradients.
  void GroupedLinear(const kernels::Context& ctx, const std::vector<int64_t>& counts,
                     const std::vector<int64_t>& offsets, int64_t k, int64_t n, const void* x, const Parameter& w,
                     const Parameter* b, void* y) const;
  void GroupedLinearBackward(const kernels::Context& ctx, const std::vector<int64_t>& counts,
                             const std::vector<int64_t>& offsets, int64_t k, int64_t n, const void* x,
                             const Parameter& w, const Parameter* b, const void* dy, void* dx,
                             DeferredWeightGrads* deferred) const;

  FfnKind kind_;
  int64_t first_;  // the global index of this block's first expert
  int64_t e_, c_, f_, w_;
  bool biases_;
  kernels::DType dtype_;  // of the rows and the weights' compute copies
  Parameter w_in_, w_out_, b_in_, b_out_;
  StepCounters* counters_;
};

}  // namespace lmf::model::moe

#endif  // LMFORGE_MODEL_LAYERS_MOE_EXPERTS_H_
