// bf16 storage for the CPU kernels, which compute in fp32: vectorised bf16 <-> fp32 conversion, and
// F32Twin, an fp32 copy of one (possibly strided) tensor operand that an fp32 kernel reads or writes in
// place of the bf16 original.
//
// The CPU's bf16 contract is the CUDA path's (kernels/README.md "dtypes"): bf16 storage, fp32 math and
// statistics. On AVX2 there is no bf16 arithmetic, so each op's bf16 entry widens its bf16 operands into
// fp32 twins, runs the op's fp32 kernel on them and rounds the bf16 outputs back (round to nearest even):
// the result is exactly the fp32 kernel on bf16-rounded inputs with its outputs rounded once, and the fp32
// path itself is untouched. Operands already fp32 and dense pass through without a copy.
//
// Widening is exact (bf16 is the top half of an fp32: a 16-bit shift). Narrowing rounds to nearest even and
// keeps NaN a (quiet) NaN, bitwise dtype.h's FloatToBF16 for every input.
#ifndef LMFORGE_KERNELS_CPU_BF16_H_
#define LMFORGE_KERNELS_CPU_BF16_H_

#include <cstdint>
#include <memory>

#include "kernels/core/context.h"
#include "kernels/core/dtype.h"

namespace lmf::kernels::cpu {

// dst[i] = src[i] as fp32 (exact).
void WidenBF16(const uint16_t* src, float* dst, int64_t n);
// dst[i] = src[i] rounded to bf16 (nearest even; NaN stays NaN), bitwise FloatToBF16.
void NarrowToBF16(const float* src, uint16_t* dst, int64_t n);

// A tensor as rows of `cols` contiguous elements: row (i, j, k) starts at i * stride[0] + j * stride[1] +
// k * stride[2] elements. A stride of 0 broadcasts (that dimension holds one row, read count times).
struct RowView {
  int64_t count[3] = {1, 1, 1};
  int64_t stride[3] = {0, 0, 0};
  int64_t cols = 0;

  static RowView Contiguous(int64_t n);                      // n elements
  static RowView Rows(int64_t rows, int64_t cols, int64_t ld);  // (rows, cols), rows ld apart
  static RowView Batched(int64_t batch, int64_t batch_stride, int64_t rows, int64_t cols, int64_t ld);
  static RowView Heads(int64_t B, int64_t T, int64_t NH, int64_t HS, int64_t stride_b, int64_t stride_t,
                       int64_t stride_h);  // (B, T, NH, HS)
};

// The fp32 twin of one operand. An fp32 operand whose rows are dense is used in place (no copy). Otherwise
// the twin is a packed fp32 buffer (rows back to back, broadcast dimensions kept at stride 0), filled from
// the operand (`load`: inputs, and outputs that accumulate) and, for outputs, written back by Store().
class F32Twin {
 public:
  enum class Use { kInput, kOutput, kAccumulate };  // read; written (=); read and written (+=)

  F32Twin() = default;  // an absent (null) operand
  F32Twin(const Context& ctx, DType dtype, const void* data, const RowView& view, Use use);
  F32Twin(F32Twin&&) = default;
  F32Twin& operator=(F32Twin&&) = default;

  float* data() const { return data_; }  // null for a null operand
  int64_t stride(int dim) const { return packed_.stride[dim]; }  // the twin's strides (the original's in place)
  // Writes an output twin back into the operand (rounding to bf16 where it is bf16); nothing for an input or
  // an operand used in place.
  void Store(const Context& ctx) const;

 private:
  DType dtype_ = DType::kF32;
  void* original_ = nullptr;
  RowView view_, packed_;
  Use use_ = Use::kInput;
  std::unique_ptr<float[]> owned_;
  float* data_ = nullptr;
};

}  // namespace lmf::kernels::cpu

#endif  // LMFORGE_KERNELS_CPU_BF16_H_
