// DeferredWeightGrads: queued weight-gradient work and the gradient copies it reads.
#include "model/layers/deferred_weight_grads.h"

#include <algorithm>
#include <utility>

#include "base/check.h"
#include "kernels/memory/memory.h"

namespace lmf::model {

const void* DeferredWeightGrads::Keep(const kernels::Context& ctx, const void* src, size_t bytes) {
  kernels::Tensor copy =
      kernels::Tensor::Empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, kernels::DType::kU8, ctx.allocator);
  kernels::CopyOnDevice(ctx, copy.data(), src, bytes);
  bytes_ += static_cast<int64_t>(copy.nbytes());
  copies_.push_back(std::move(copy));
  return copies_.back().data();
}

void DeferredWeightGrads::Defer(Work work) { work_.push_back(std::move(work)); }

void DeferredWeightGrads::Run(const kernels::Context& ctx) {
  for (const Work& work : work_) work(ctx);
  work_.clear();
  copies_.clear();  // device work on ctx's stream is ordered before any later reuse of the memory
  bytes_ = 0;
}

void RunOrDefer(DeferredWeightGrads* deferred, const kernels::Context& ctx, DeferredWeightGrads::Work work) {
  if (deferred == nullptr) {
    work(ctx);
  } else {
    deferred->Defer(std::move(work));
  }
}

void MatmulBackwardOrDefer(const kernels::Context& ctx, const kernels::MatmulBackwardParams& p,
                           DeferredWeightGrads* deferred) {
  if (deferred == nullptr || (p.db == nullptr && p.dbias == nullptr)) {
    kernels::MatmulBackward(ctx, p);
    return;
  }
  const kernels::MatmulParams& f = p.forward;
  LMF_CHECK(f.batch == 1) << "MatmulBackwardOrDefer defers unbatched GEMMs only (batch " << f.batch << ")";
  if (p.da != nullptr) {
    kernels::MatmulBackwardParams input = p;
    input.db = nullptr;
    input.dbias = nullptr;
    kernels::MatmulBackward(ctx, input);
  }
  kernels::MatmulBackwardParams weights = p;
  weights.da = nullptr;
  if (f.M > 0) {  // dc (M, N) at stride ldc: its span, so the copy keeps the stride
    const size_t span = static_cast<size_t>((f.M - 1) * f.ldc + f.N) * kernels::DTypeSize(f.dtype);
    weights.dc = deferred->Keep(ctx, p.dc, span);
  }
  deferred->Defer([weights](const kernels::Context& run_ctx) { kernels::MatmulBackward(run_ctx, weights); });
}

}  // namespace lmf::model
