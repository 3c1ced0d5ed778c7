// CPU embedding: the forward copies rows in parallel over tokens; the backward parallelises over channel
// blocks so that threads never add into the same table row element (no atomics, deterministic order).
#include <cstring>

#include "base/check.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec.h"
#include "kernels/embedding/embedding.h"

namespace lmf::kernels::cpu {

void EmbeddingForward(const Context& ctx, const EmbeddingForwardParams& p) {
  if (p.dtype == DType::kBF16) {  // a bf16 table gathers bf16 rows: the bits move unchanged
    const uint16_t* table = static_cast<const uint16_t*>(p.table);
    uint16_t* out = static_cast<uint16_t*>(p.out);
    ParallelForItems(ctx, p.N, p.C, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const int32_t id = p.ids[n];
        LMF_CHECK(id >= 0 && id < p.V) << "embedding: id " << id << " at row " << n << " outside [0, " << p.V << ")";
        std::memcpy(out + n * p.C, table + id * p.C, sizeof(uint16_t) * p.C);
      }
    });
    return;
  }
  const float* table = static_cast<const float*>(p.table);
  float* out = static_cast<float*>(p.out);
  ParallelForItems(ctx, p.N, p.C, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const int32_t id = p.ids[n];
      LMF_CHECK(id >= 0 && id < p.V) << "embedding: id " << id << " at row " << n << " outside [0, " << p.V << ")";
      std::memcpy(out + n * p.C, table + id * p.C, sizeof(float) * p.C);
    }
  });
}

void EmbeddingBackward(const Context& ctx, const EmbeddingBackwardParams& p) {
  if (p.dtype == DType::kBF16) {  // bf16 dout, fp32 dtable (a parameter gradient): the fp32 sums on dout's twin
    const F32Twin dout(ctx, p.dtype, p.dout, RowView::Contiguous(p.N * p.C), F32Twin::Use::kInput);
    EmbeddingBackwardParams f = p;
    f.dtype = DType::kF32;
    f.dout = dout.data();
    return cpu::EmbeddingBackward(ctx, f);
  }
  for (int64_t n = 0; n < p.N; ++n)
    LMF_CHECK(p.ids[n] >= 0 && p.ids[n] < p.V) << "embedding: id " << p.ids[n] << " at row " << n << " outside [0, " << p.V << ")";
  const float* dout = static_cast<const float*>(p.dout);
  float* dtable = static_cast<float*>(p.dtable);
  constexpr int64_t kBlock = 64;  // channels per task: a cache line of 16 floats x 4
  const int64_t blocks = (p.C + kBlock - 1) / kBlock;
  ParallelForItems(ctx, blocks, p.N * kBlock, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t c0 = blk * kBlock, len = std::min(kBlock, p.C - c0);
      for (int64_t n = 0; n < p.N; ++n) vec::AddInto(dout + n * p.C + c0, dtable + p.ids[n] * p.C + c0, len);
    }
  });
}

}  // namespace lmf::kernels::cpu
