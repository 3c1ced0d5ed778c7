// bf16 <-> fp32 conversion loops (AVX2) and the fp32 twins of bf16 operands; see bf16.h.
#include "kernels/cpu/bf16.h"

#include <immintrin.h>

#include <cstring>

#include "base/check.h"
#include "kernels/cpu/parallel.h"

namespace lmf::kernels::cpu {

void WidenBF16(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
  }
  for (; i < n; ++i) dst[i] = BF16ToFloat(src[i]);
}

// Per lane: NaN -> (bits >> 16) | 0x40 (quiet, sign and top payload kept); else bits + 0x7fff + bit 16 of
// bits, shifted down: round to nearest, ties to even (an overflow rounds to inf, as it should).
void NarrowToBF16(const float* src, uint16_t* dst, int64_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_castps_si256(_mm256_loadu_ps(src + i));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, abs_mask), inf);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(bias, lsb)), 16);
    const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), quiet);
    const __m256i r = _mm256_blendv_epi8(rounded, nan, is_nan);
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), packed);
  }
  for (; i < n; ++i) dst[i] = FloatToBF16(src[i]);
}

RowView RowView::Contiguous(int64_t n) { return Rows(1, n, n); }

RowView RowView::Rows(int64_t rows, int64_t cols, int64_t ld) { return Batched(1, 0, rows, cols, ld); }

RowView RowView::Batched(int64_t batch, int64_t batch_stride, int64_t rows, int64_t cols, int64_t ld) {
  RowView v;
  v.count[0] = batch;
  v.stride[0] = batch_stride;
  v.count[1] = rows;
  v.stride[1] = ld;
  v.cols = cols;
  return v;
}

RowView RowView::Heads(int64_t B, int64_t T, int64_t NH, int64_t HS, int64_t stride_b, int64_t stride_t,
                       int64_t stride_h) {
  RowView v;
  v.count[0] = B, v.count[1] = T, v.count[2] = NH;
  v.stride[0] = stride_b, v.stride[1] = stride_t, v.stride[2] = stride_h;
  v.cols = HS;
  return v;
}

namespace {

// The view with broadcast dimensions (stride 0) reduced to one row.
RowView Distinct(const RowView& v) {
  RowView d = v;
  for (int i = 0; i < 3; ++i)
    if (d.stride[i] == 0) d.count[i] = 1;
  return d;
}

// Rows back to back; broadcast dimensions keep stride 0.
RowView Packed(const RowView& v) {
  RowView p = v;
  int64_t step = v.cols;
  for (int i = 2; i >= 0; --i) {
    if (v.stride[i] == 0 && v.count[i] > 1) continue;
    p.stride[i] = step;  // also where count is 1, so that a leading dimension is never below cols
    step *= v.count[i];
  }
  return p;
}

int64_t NumRows(const RowView& v) { return v.count[0] * v.count[1] * v.count[2]; }

int64_t RowOffset(const RowView& v, int64_t r) {
  const int64_t k = r % v.count[2], j = (r / v.count[2]) % v.count[1], i = r / (v.count[2] * v.count[1]);
  return i * v.stride[0] + j * v.stride[1] + k * v.stride[2];
}

// Whether an fp32 operand can be used in place: each dimension that holds more than one row is packed.
bool DenseAsPacked(const RowView& v, const RowView& packed) {
  for (int i = 0; i < 3; ++i)
    if (v.count[i] > 1 && v.stride[i] != packed.stride[i]) return false;
  return true;
}

}  // namespace

F32Twin::F32Twin(const Context& ctx, DType dtype, const void* data, const RowView& view, Use use)
    : dtype_(dtype), original_(const_cast<void*>(data)), view_(Distinct(view)), packed_(Packed(view)), use_(use) {
  LMF_CHECK(dtype == DType::kF32 || dtype == DType::kBF16) << "F32Twin: f32 or bf16, not " << dtype;
  if (data == nullptr) return;
  if (use != Use::kInput) {
    for (int i = 0; i < 3; ++i)
      LMF_CHECK(view.count[i] == 1 || view.stride[i] != 0) << "F32Twin: an output cannot broadcast (dimension " << i << ")";
  }
  if (dtype == DType::kF32 && DenseAsPacked(view_, packed_)) {  // in place
    packed_ = view;
    data_ = static_cast<float*>(original_);
    use_ = Use::kInput;  // nothing to store
    return;
  }
  owned_.reset(new float[NumRows(view_) * view_.cols]);
  data_ = owned_.get();
  if (use == Use::kOutput) return;
  const RowView& src = view_;
  const RowView dst = Distinct(packed_);
  ParallelForItems(ctx, NumRows(src), src.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* out = data_ + RowOffset(dst, r);
      if (dtype_ == DType::kBF16) {
        WidenBF16(static_cast<const uint16_t*>(original_) + RowOffset(src, r), out, src.cols);
      } else {
        std::memcpy(out, static_cast<const float*>(original_) + RowOffset(src, r), src.cols * sizeof(float));
      }
    }
  });
}

void F32Twin::Store(const Context& ctx) const {
  if (data_ == nullptr || use_ == Use::kInput) return;
  const RowView& dst = view_;
  const RowView src = Distinct(packed_);
  ParallelForItems(ctx, NumRows(dst), dst.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* in = data_ + RowOffset(src, r);
      if (dtype_ == DType::kBF16) {
        NarrowToBF16(in, static_cast<uint16_t*>(original_) + RowOffset(dst, r), dst.cols);
      } else {
        std::memcpy(static_cast<float*>(original_) + RowOffset(dst, r), in, dst.cols * sizeof(float));
      }
    }
  });
}

}  // namespace lmf::kernels::cpu
