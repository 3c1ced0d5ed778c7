// bf16 matmul on the CPU, with the CUDA path's dtypes (matmul.h): a, b, c, bias and the saved GELU input in
// bf16, fp32 accumulation; backward dA bf16 (an activation gradient), dB and dbias fp32 (parameter gradients
// for fp32 master weights).
//
// This CPU has no bf16 arithmetic to use (AVX2 + FMA; no AVX512-BF16, no AMX), so every bf16 GEMM widens
// its bf16 operands into packed fp32 twins (kernels/cpu/bf16.h: exact), runs the fp32 path (dnnl_sgemm on
// panels of C, the bias and the GELU epilogue in fp32) and rounds C to bf16 once (nearest even). The
// result is the fp32 GEMM of the bf16-rounded operands with one rounding of the output; the widening
// costs one pass over A and B per call (O(MK + KN) against the GEMM's O(MNK)).
#include "kernels/matmul/matmul_bf16_cpu.h"

#include "base/check.h"
#include "kernels/cpu/bf16.h"

namespace lmf::kernels::cpu::internal {
namespace {

using Use = F32Twin::Use;

// op(A)'s storage: (M, K), or (K, M) when trans_a, rows lda apart, batches batch_stride_a apart. An output
// (dA) of a broadcast operand is one matrix (the backward accumulates every batch into it).
RowView AView(const MatmulParams& p, bool output) {
  const int64_t batch = output && p.batch_stride_a == 0 ? 1 : p.batch;
  return p.trans_a ? RowView::Batched(batch, p.batch_stride_a, p.K, p.M, p.lda)
                   : RowView::Batched(batch, p.batch_stride_a, p.M, p.K, p.lda);
}
RowView BView(const MatmulParams& p, bool output) {
  const int64_t batch = output && p.batch_stride_b == 0 ? 1 : p.batch;
  return p.trans_b ? RowView::Batched(batch, p.batch_stride_b, p.N, p.K, p.ldb)
                   : RowView::Batched(batch, p.batch_stride_b, p.K, p.N, p.ldb);
}
RowView CView(const MatmulParams& p) { return RowView::Batched(p.batch, p.batch_stride_c, p.M, p.N, p.ldc); }

// p with a and b replaced by their twins (and the twins' leading dimensions and batch strides).
MatmulParams OnTwins(const MatmulParams& p, const F32Twin& a, const F32Twin& b) {
  MatmulParams f = p;
  f.dtype = DType::kF32;
  f.a = a.data(), f.lda = a.stride(1), f.batch_stride_a = a.stride(0);
  f.b = b.data(), f.ldb = b.stride(1), f.batch_stride_b = b.stride(0);
  return f;
}

}  // namespace

void MatmulBF16(const Context& ctx, const MatmulParams& p, const MatmulEpilogueParams& e) {
  const F32Twin a(ctx, p.dtype, p.a, AView(p, false), Use::kInput), b(ctx, p.dtype, p.b, BView(p, false), Use::kInput);
  const F32Twin bias(ctx, p.dtype, p.bias, RowView::Contiguous(p.N), Use::kInput);
  const F32Twin c(ctx, p.dtype, p.c, CView(p), p.beta != 0.0f ? Use::kAccumulate : Use::kOutput);
  const F32Twin pre(ctx, p.dtype, e.pre_activation, CView(p), Use::kOutput);
  MatmulParams f = OnTwins(p, a, b);
  f.bias = bias.data();
  f.c = c.data(), f.ldc = c.stride(1), f.batch_stride_c = c.stride(0);
  MatmulEpilogueParams fe = e;
  fe.pre_activation = pre.data();
  cpu::Matmul(ctx, f, fe);
  c.Store(ctx);
  pre.Store(ctx);
}

void MatmulBackwardBF16(const Context& ctx, const MatmulBackwardParams& bp) {
  const MatmulParams& p = bp.forward;
  LMF_CHECK(bp.dc != nullptr) << "matmul backward without dc";
  const F32Twin a(ctx, p.dtype, p.a, AView(p, false), Use::kInput), b(ctx, p.dtype, p.b, BView(p, false), Use::kInput);
  const F32Twin dc(ctx, p.dtype, bp.dc, CView(p), Use::kInput);
  const F32Twin da(ctx, p.dtype, bp.da, AView(p, true), bp.accumulate_da ? Use::kAccumulate : Use::kOutput);
  const F32Twin db(ctx, DType::kF32, bp.db, BView(p, true), bp.accumulate_db ? Use::kAccumulate : Use::kOutput);
  MatmulBackwardParams f = bp;
  f.forward = OnTwins(p, a, b);
  f.forward.ldc = dc.stride(1), f.forward.batch_stride_c = dc.stride(0);
  f.dc = dc.data(), f.da = da.data(), f.db = db.data();  // dbias: fp32 (N), as it is
  cpu::MatmulBackward(ctx, f);
  da.Store(ctx);
  db.Store(ctx);
}

}  // namespace lmf::kernels::cpu::internal
