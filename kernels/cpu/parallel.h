// Splitting CPU kernel work over the context's thread pool: chunks are sized so that each carries enough
// work (about 64K elementary operations) to be worth a hand-off, and small problems run inline.
#ifndef LMFORGE_KERNELS_CPU_PARALLEL_H_
#define LMFORGE_KERNELS_CPU_PARALLEL_H_

#include <algorithm>
#include <cstdint>
#include <functional>

#include "kernels/core/context.h"

namespace lmf::kernels {

// Runs fn(begin, end) over [0, n) items, each costing about `cost_per_item` operations.
inline void ParallelForItems(const Context& ctx, int64_t n, int64_t cost_per_item,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  constexpr int64_t kMinWorkPerChunk = 1 << 16;
  const int64_t min_chunk = std::max<int64_t>(1, kMinWorkPerChunk / std::max<int64_t>(1, cost_per_item));
  if (ctx.pool == nullptr || ctx.pool->num_threads() == 1 || n <= min_chunk) {
    fn(0, n);
    return;
  }
  ctx.pool->ParallelFor(n, min_chunk, fn);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_CPU_PARALLEL_H_
