// DeferredWeightGrads: the weight-gradient work of one micro-batch's backward, queued instead of run, so that
// a zero-bubble pipeline schedule (ZB-H1) can split the backward into the input gradient (B, on the critical
// path to the previous stage) and the weight gradients (W, run later to fill the bubble).
//
//   DeferredWeightGrads deferred;
//   model.BackwardStage(activations, doutput, dinput, &deferred);  // B: dinput written, dW work queued
//   ...                                                            // activations kept, unchanged
//   deferred.Run(model.context());                                 // W: every queued dW += ... in issue order
//
// Owned by the caller, one per micro-batch between its B and its W. A layer's backward, given one (through
// its Scratch, see layer.h), queues the parameter gradients that cost GEMMs: a Linear's weight and bias
// (dW += dy^T x, db += sum dy), the experts' GEMMs, the LM head, the embedding tables' scatter-adds. Cheap
// parameter gradients (norm gains) stay in the backward. The queued work reads the forward's inputs where
// the activations keep them (the caller keeps those alive and unchanged until Run) and copies of the
// gradient buffers the backward reuses (its Scratch temporaries, the residual gradient), which this object
// owns and counts in bytes(). Run does exactly what the backward would have done, in the same order, so the
// gradients are bit for bit those of the backward without deferral.
#ifndef LMFORGE_MODEL_LAYERS_DEFERRED_WEIGHT_GRADS_H_
#define LMFORGE_MODEL_LAYERS_DEFERRED_WEIGHT_GRADS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/core/context.h"
#include "kernels/core/tensor.h"
#include "kernels/matmul/matmul.h"

namespace lmf::model {

class DeferredWeightGrads {
 public:
  using Work = std::function<void(const kernels::Context& ctx)>;

  DeferredWeightGrads() = default;
  DeferredWeightGrads(DeferredWeightGrads&&) = default;
  DeferredWeightGrads& operator=(DeferredWeightGrads&&) = default;

  // A copy of `bytes` bytes at `src` (on ctx's device), owned by this object until Run: for a gradient
  // buffer the backward overwrites before the queued work reads it.
  const void* Keep(const kernels::Context& ctx, const void* src, size_t bytes);
  // Queues `work`, run at Run in the order queued.
  void Defer(Work work);
  // Runs the queued work in order on ctx, then frees the copies: empty afterwards.
  void Run(const kernels::Context& ctx);

  bool empty() const { return work_.empty(); }
  size_t size() const { return work_.size(); }
  int64_t bytes() const { return bytes_; }  // the copies held

 private:
  std::vector<Work> work_;
  std::vector<kernels::Tensor> copies_;
  int64_t bytes_ = 0;
};

// Runs `work` now on ctx, or queues it on `deferred` when that is not null.
void RunOrDefer(DeferredWeightGrads* deferred, const kernels::Context& ctx, DeferredWeightGrads::Work work);

// kernels::MatmulBackward(ctx, p), or with `deferred`: the input gradient (p.da) now, and the weight and bias
// gradients (p.db, p.dbias) queued with a copy of p.dc (forward.batch must be 1). Each output is computed by
// the same GEMM either way, so the results are bit for bit equal.
void MatmulBackwardOrDefer(const kernels::Context& ctx, const kernels::MatmulBackwardParams& p,
                           DeferredWeightGrads* deferred);

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_DEFERRED_WEIGHT_GRADS_H_
