// CPU global gradient norm: per-thread partial sums of squares in double over fixed blocks, combined in
// block order (the result does not depend on the thread count); clipping scales in place.
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec.h"
#include "kernels/grad_norm/grad_norm.h"

namespace lmf::kernels::cpu {
namespace {

constexpr int64_t kBlock = 1 << 14;

struct Block {
  const float* data;
  int64_t n;
};

std::vector<Block> Blocks(const GradNormParams& p) {
  std::vector<Block> blocks;
  for (int64_t t = 0; t < p.num_grads; ++t) {
    const float* d = static_cast<const float*>(p.grads[t].data);
    for (int64_t i = 0; i < p.grads[t].n; i += kBlock)
      blocks.push_back({d + i, std::min(kBlock, p.grads[t].n - i)});
  }
  return blocks;
}

}  // namespace

float GlobalGradNorm(const Context& ctx, const GradNormParams& p) {
  const std::vector<Block> blocks = Blocks(p);
  std::vector<double> partial(blocks.size(), 0.0);
  ParallelForItems(ctx, static_cast<int64_t>(blocks.size()), 2 * kBlock, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      // fp32 within a block of 16K (relative error ~1e-6 at worst), double across blocks.
      partial[b] = vec::Dot(blocks[b].data, blocks[b].data, blocks[b].n);
    }
  });
  double total = 0.0;
  for (double s : partial) total += s;
  return static_cast<float>(std::sqrt(total));
}

float ClipGradNorm(const Context& ctx, const GradNormParams& p, float max_norm) {
  const float norm = cpu::GlobalGradNorm(ctx, p);
  const float scale = ClipScale(norm, max_norm);
  const std::vector<Block> blocks = Blocks(p);
  ParallelForItems(ctx, static_cast<int64_t>(blocks.size()), kBlock, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) vec::Scale(scale, const_cast<float*>(blocks[b].data), blocks[b].n);
  });
  return norm;
}

void GlobalGradNormToDevice(const Context& ctx, const GradNormParams& p, float* norm_device) {
  *norm_device = cpu::GlobalGradNorm(ctx, p);
}

}  // namespace lmf::kernels::cpu
