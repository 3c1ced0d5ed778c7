// The CPU backend of the mixture-of-experts row moves (moe_rows.h): fp32, the sums in the header's order.
// Rows (gather) and tokens (the rest) are split over ctx.pool in blocks; each row or token is written by one
// thread from its own inputs alone, so the result does not depend on the thread count. The reference the
// CUDA kernels are checked against, and the MoE layer's CPU path (model/layers/moe/moe.cc).
#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "kernels/cpu/parallel.h"
#include "kernels/moe_rows/moe_rows.h"

namespace lmf::kernels::cpu {
namespace {

void CheckF32(DType dtype, const char* op) { LMF_CHECK(dtype == DType::kF32) << op << " on the CPU runs f32, not " << dtype; }

}  // namespace

void MoeGather(const Context& ctx, const MoeGatherParams& p) {
  CheckF32(p.dtype, "MoeGather");
  const auto* x = static_cast<const float*>(p.x);
  auto* rows = static_cast<float*>(p.rows);
  ParallelForItems(ctx, p.M, p.C, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      std::memcpy(rows + r * p.C, x + (p.row_assignment[r] / p.k) * p.C, static_cast<size_t>(p.C) * sizeof(float));
    }
  });
}

void MoeCombine(const Context& ctx, const MoeCombineParams& p) {
  CheckF32(p.dtype, "MoeCombine");
  const auto* rows = static_cast<const float*>(p.rows);
  auto* out = static_cast<float*>(p.out);
  ParallelForItems(ctx, p.N, p.k * p.C, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* o = out + t * p.C;
      if (!p.accumulate) std::fill(o, o + p.C, 0.0f);
      for (int64_t a = t * p.k; a < (t + 1) * p.k; ++a) {
        const int64_t row = p.assignment_row[a];
        if (row < 0) continue;
        const float gate = p.gates[a];
        const float* y = rows + row * p.C;
        for (int64_t i = 0; i < p.C; ++i) o[i] += gate * y[i];
      }
    }
  });
}

void MoeCombineBackward(const Context& ctx, const MoeCombineBackwardParams& p) {
  CheckF32(p.dtype, "MoeCombineBackward");
  const auto* rows = static_cast<const float*>(p.rows);
  const auto* dout = static_cast<const float*>(p.dout);
  auto* drows = static_cast<float*>(p.drows);
  ParallelForItems(ctx, p.N * p.k, 2 * p.C, [&](int64_t begin, int64_t end) {
    for (int64_t a = begin; a < end; ++a) {
      const int64_t row = p.assignment_row[a];
      p.dgates[a] = 0;
      if (row < 0) continue;
      const float* d = dout + (a / p.k) * p.C;
      const float* y = rows + row * p.C;
      float* dy = drows + row * p.C;
      // The dot in double as four interleaved partial sums (four independent add chains, not one).
      double dot[4] = {0, 0, 0, 0};
      int64_t i = 0;
      for (; i + 4 <= p.C; i += 4) {
        for (int l = 0; l < 4; ++l) {
          dot[l] += static_cast<double>(d[i + l]) * y[i + l];
          dy[i + l] = p.gates[a] * d[i + l];
        }
      }
      for (; i < p.C; ++i) {
        dot[0] += static_cast<double>(d[i]) * y[i];
        dy[i] = p.gates[a] * d[i];
      }
      p.dgates[a] = static_cast<float>((dot[0] + dot[1]) + (dot[2] + dot[3]));
    }
  });
}

void MoeScatterAdd(const Context& ctx, const MoeScatterAddParams& p) {
  CheckF32(p.dtype, "MoeScatterAdd");
  const auto* drows = static_cast<const float*>(p.drows);
  auto* dx = static_cast<float*>(p.dx);
  ParallelForItems(ctx, p.N, (p.k + 1) * p.C, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* d = dx + t * p.C;
      if (p.base != nullptr) {
        std::memcpy(d, p.base + t * p.C, static_cast<size_t>(p.C) * sizeof(float));
      } else {
        std::fill(d, d + p.C, 0.0f);
      }
      for (int64_t j = 0; j < p.k; ++j) {
        const int64_t row = p.assignment_row[t * p.k + j];
        if (row < 0) continue;
        const float* dr = drows + row * p.C;
        for (int64_t i = 0; i < p.C; ++i) d[i] += dr[i];
      }
    }
  });
}

}  // namespace lmf::kernels::cpu
