// The CPU grouped GEMM (grouped_matmul.h): one kernels/matmul call per non-empty group, fp32.
#include "base/check.h"
#include "kernels/grouped_matmul/grouped_matmul.h"
#include "kernels/matmul/matmul.h"

namespace lmf::kernels::cpu {
namespace {

const float* At(const void* base, int64_t offset) { return static_cast<const float*>(base) + offset; }
float* At(void* base, int64_t offset) { return static_cast<float*>(base) + offset; }

void CheckOffsets(const int32_t* offsets, int64_t g, int64_t m) {
  LMF_CHECK(offsets[0] == 0 && offsets[g] <= m) << "grouped_matmul: offsets[0]=" << offsets[0] << " offsets[G]="
                                                << offsets[g] << " for M=" << m;
  for (int64_t i = 0; i < g; ++i) LMF_CHECK(offsets[i] <= offsets[i + 1]) << "grouped_matmul: offsets decrease at " << i;
}

}  // namespace

void GroupedMatmul(const Context& ctx, const GroupedMatmulParams& p) {
  CheckOffsets(p.offsets, p.G, p.M);
  for (int64_t g = 0; g < p.G; ++g) {
    const int64_t first = p.offsets[g], rows = p.offsets[g + 1] - first;
    if (rows == 0) continue;
    kernels::cpu::Matmul(ctx, LinearParams(rows, p.K, p.N, At(p.x, first * p.K), At(p.w, g * p.N * p.K),
                             p.bias != nullptr ? At(p.bias, g * p.N) : nullptr, At(p.y, first * p.N)));
  }
}

void GroupedMatmulBackward(const Context& ctx, const GroupedMatmulBackwardParams& p) {
  CheckOffsets(p.offsets, p.G, p.M);
  for (int64_t g = 0; g < p.G; ++g) {
    const int64_t first = p.offsets[g], rows = p.offsets[g + 1] - first;
    if (rows == 0) continue;
    MatmulBackwardParams b;
    b.forward = LinearParams(rows, p.K, p.N, At(p.x, first * p.K), At(p.w, g * p.N * p.K), nullptr, nullptr);
    b.dc = At(p.dy, first * p.N);
    b.da = p.dx != nullptr ? At(p.dx, first * p.K) : nullptr;
    b.db = p.dw != nullptr ? p.dw + g * p.N * p.K : nullptr;
    b.dbias = p.dbias != nullptr ? p.dbias + g * p.N : nullptr;
    kernels::cpu::MatmulBackward(ctx, b);
  }
}

}  // namespace lmf::kernels::cpu
