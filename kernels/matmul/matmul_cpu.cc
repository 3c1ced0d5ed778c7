// CPU matmul on oneDNN's dnnl_sgemm (row-major; chosen over OpenBLAS by measurement, kernels/README.md).
// oneDNN runs single-threaded inside each of the context's pool threads, each on its own panel of C (see
// Sgemm); bias add and the bias gradient (column sums) also run on the pool.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "dnnl.h"
#include "kernels/activations/activations.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/matmul_bf16_cpu.h"

namespace lmf::kernels {

MatmulParams LinearParams(int64_t rows, int64_t in_features, int64_t out_features, const void* x,
                          const void* w, const void* bias, void* out) {
  MatmulParams p;
  p.M = rows, p.N = out_features, p.K = in_features;
  p.a = x, p.lda = in_features;
  p.b = w, p.ldb = in_features, p.trans_b = true;
  p.c = out, p.ldc = out_features;
  p.bias = bias;
  return p;
}

namespace cpu {
namespace {

// Makes oneDNN run single-threaded in the calling thread (its OpenMP team size is a per-thread setting):
// all GEMM parallelism comes from splitting the product over the context's pool, so the element-wise
// kernels and the GEMMs share one set of threads and no idle OpenMP team spins against the pool.
void SequentialOneDnnInThisThread() {
  thread_local bool done = false;
  if (!done) {
    omp_set_num_threads(1);
    done = true;
  }
}

// C (M, N) = alpha op(A) op(B) + beta C on one thread.
void SgemmSequential(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  SequentialOneDnnInThisThread();
  const dnnl_status_t status =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
  LMF_CHECK(status == dnnl_success) << "dnnl_sgemm failed with status " << static_cast<int>(status)
                                    << " for M=" << M << " N=" << N << " K=" << K << " lda=" << lda
                                    << " ldb=" << ldb << " ldc=" << ldc;
}

// C (M, N) = alpha op(A) op(B) + beta C, one matrix, row-major. Large products are split into equal panels
// along the larger of M and N, a multiple of the thread count of them (panels rounded to 16 rows/columns).
void Sgemm(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i) {
      if (beta == 0.0f) {
        std::fill(c + i * ldc, c + i * ldc + N, 0.0f);
      } else {
        vec::Scale(beta, c + i * ldc, N);
      }
    }
    return;
  }
  const int64_t threads = ctx.num_threads();
  constexpr double kMinFlopsPerThread = 1 << 21;
  const int64_t panels =
      std::min<int64_t>(threads, static_cast<int64_t>(2.0 * M * N * K / kMinFlopsPerThread));
  if (panels <= 1 || (M < 32 && N < 32)) {
    SgemmSequential(trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const bool split_n = N >= M;
  const int64_t extent = split_n ? N : M;
  // Panels at most kMaxPanel wide: a vocabulary-sized extent (the LM head's 50304 columns) in one panel per
  // thread ran at ~128 GF/s against ~152 GF/s in 8 panels (1024 x 50304 x 768, 2 threads, dnnl_sgemm).
  // The panel count is a multiple of the thread count and the panels are of equal width, so every thread
  // gets the same share: 50304 columns in 8192-wide panels made 6 full panels and one of 1152, and with 2
  // threads one of them got 25728 columns and the other 24576 (2% over an even 25152, waited for by both).
  constexpr int64_t kMaxPanel = 8192;
  const int64_t rounds = (extent + panels * kMaxPanel - 1) / (panels * kMaxPanel);
  const int64_t even = (extent + panels * rounds - 1) / (panels * rounds);  // <= kMaxPanel
  const int64_t step = (even + 15) / 16 * 16;
  const int64_t tasks = (extent + step - 1) / step;
  ctx.pool->RunTasks(tasks, [&](int64_t t) {
    const int64_t begin = t * step, len = std::min(step, extent - begin);
    if (split_n) {
      // Columns [begin, begin + len) of op(B) and C.
      const float* bp = trans_b ? b + begin * ldb : b + begin;
      SgemmSequential(trans_a, trans_b, M, len, K, alpha, a, lda, bp, ldb, beta, c + begin, ldc);
    } else {
      // Rows [begin, begin + len) of op(A) and C.
      const float* ap = trans_a ? a + begin : a + begin * lda;
      SgemmSequential(trans_a, trans_b, len, N, K, alpha, ap, lda, b, ldb, beta, c + begin * ldc, ldc);
    }
  });
}

void CheckGeometry(const MatmulParams& p) {
  LMF_CHECK(p.M >= 0 && p.N >= 0 && p.K >= 0 && p.batch >= 1)
      << "matmul: M=" << p.M << " N=" << p.N << " K=" << p.K << " batch=" << p.batch;
  LMF_CHECK_GE(p.lda, std::max<int64_t>(1, p.trans_a ? p.M : p.K)) << "matmul: lda too small";
  LMF_CHECK_GE(p.ldb, std::max<int64_t>(1, p.trans_b ? p.K : p.N)) << "matmul: ldb too small";
}

// C = GELU(C), saving C first when asked, with the activations kernel's GELU-tanh: bitwise Matmul followed
// by one ActivationForward over C when C is contiguous (ldc == N), else one per row.
void ApplyGeluEpilogue(const Context& ctx, const MatmulParams& p, const MatmulEpilogueParams& e) {
  LMF_CHECK_EQ(p.batch, 1) << "matmul: the GELU epilogue takes batch 1";
  float* c = static_cast<float*>(p.c);
  float* pre = static_cast<float*>(e.pre_activation);
  if (pre != nullptr) {
    ParallelForItems(ctx, p.M, p.N, [&](int64_t begin, int64_t end) {
      for (int64_t m = begin; m < end; ++m) std::memcpy(pre + m * p.ldc, c + m * p.ldc, sizeof(float) * p.N);
    });
  }
  const int64_t rows = p.ldc == p.N ? 1 : p.M;  // contiguous C: one call over all of it
  const int64_t n = p.ldc == p.N ? p.M * p.N : p.N;
  for (int64_t m = 0; m < rows; ++m) {
    cpu::ActivationForward(
        ctx, ActivationForwardParams{DType::kF32, Activation::kGeluTanh, n, c + m * p.ldc, c + m * p.ldc});
  }
}

}  // namespace

void Matmul(const Context& ctx, const MatmulParams& p, const MatmulEpilogueParams& e) {
  if (p.dtype == DType::kBF16) return internal::MatmulBF16(ctx, p, e);
  CheckGeometry(p);
  LMF_CHECK_GE(p.ldc, std::max<int64_t>(1, p.N)) << "matmul: ldc too small";
  const float* a = static_cast<const float*>(p.a);
  const float* b = static_cast<const float*>(p.b);
  float* c = static_cast<float*>(p.c);
  const bool small_matrices = 2.0 * p.M * p.N * p.K < (1 << 22);
  if (p.batch >= ctx.num_threads() && ctx.num_threads() > 1 && small_matrices && p.batch_stride_c != 0) {
    // Many small products: one whole matrix per task.
    ctx.pool->RunTasks(p.batch, [&](int64_t i) {
      SgemmSequential(p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, a + i * p.batch_stride_a, p.lda,
                      b + i * p.batch_stride_b, p.ldb, p.beta, c + i * p.batch_stride_c, p.ldc);
    });
  } else {
    for (int64_t i = 0; i < p.batch; ++i) {
      Sgemm(ctx, p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, a + i * p.batch_stride_a, p.lda,
            b + i * p.batch_stride_b, p.ldb, p.beta, c + i * p.batch_stride_c, p.ldc);
    }
  }
  if (p.bias != nullptr) {
    const float* bias = static_cast<const float*>(p.bias);
    ParallelForItems(ctx, p.batch * p.M, p.N, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t bi = r / p.M, m = r % p.M;
        vec::AddInto(bias, c + bi * p.batch_stride_c + m * p.ldc, p.N);
      }
    });
  }
  if (e.epilogue == MatmulEpilogue::kGeluTanh) ApplyGeluEpilogue(ctx, p, e);
}

void MatmulBackward(const Context& ctx, const MatmulBackwardParams& bp) {
  if (bp.forward.dtype == DType::kBF16) return internal::MatmulBackwardBF16(ctx, bp);
  const MatmulParams& p = bp.forward;
  CheckGeometry(p);
  const float* a = static_cast<const float*>(p.a);
  const float* b = static_cast<const float*>(p.b);
  const float* dc = static_cast<const float*>(bp.dc);
  LMF_CHECK(dc != nullptr) << "matmul backward without dc";
  for (int64_t i = 0; i < p.batch; ++i) {
    const float* ai = a + i * p.batch_stride_a;
    const float* bi = b + i * p.batch_stride_b;
    const float* dci = dc + i * p.batch_stride_c;
    if (bp.da != nullptr) {
      // With a broadcast A (stride 0) every batch adds into the same dA after the first.
      const float beta = (bp.accumulate_da || (p.batch_stride_a == 0 && i > 0)) ? 1.0f : 0.0f;
      float* dai = static_cast<float*>(bp.da) + i * p.batch_stride_a;
      if (!p.trans_a) {
        // dA (M, K) = alpha dC (M, N) op(B)^T (N, K)
        Sgemm(ctx, false, !p.trans_b, p.M, p.K, p.N, p.alpha, dci, p.ldc, bi, p.ldb, beta, dai, p.lda);
      } else {
        // dA (K, M) = alpha op(B) (K, N) dC^T (N, M)
        Sgemm(ctx, p.trans_b, true, p.K, p.M, p.N, p.alpha, bi, p.ldb, dci, p.ldc, beta, dai, p.lda);
      }
    }
    if (bp.db != nullptr) {
      const float beta = (bp.accumulate_db || (p.batch_stride_b == 0 && i > 0)) ? 1.0f : 0.0f;
      float* dbi = static_cast<float*>(bp.db) + i * p.batch_stride_b;
      if (!p.trans_b) {
        // dB (K, N) = alpha op(A)^T (K, M) dC (M, N)
        Sgemm(ctx, !p.trans_a, false, p.K, p.N, p.M, p.alpha, ai, p.lda, dci, p.ldc, beta, dbi, p.ldb);
      } else {
        // dB (N, K) = alpha dC^T (N, M) op(A) (M, K)
        Sgemm(ctx, true, p.trans_a, p.N, p.K, p.M, p.alpha, dci, p.ldc, ai, p.lda, beta, dbi, p.ldb);
      }
    }
  }
  if (bp.dbias != nullptr) {
    float* dbias = static_cast<float*>(bp.dbias);
    constexpr int64_t kBlock = 256;  // columns per task
    const int64_t blocks = (p.N + kBlock - 1) / kBlock;
    const int64_t rows = p.batch * p.M;
    ParallelForItems(ctx, blocks, rows * kBlock, [&](int64_t begin, int64_t end) {
      std::vector<float> acc(kBlock);
      for (int64_t blk = begin; blk < end; ++blk) {
        const int64_t c0 = blk * kBlock, len = std::min(kBlock, p.N - c0);
        std::fill(acc.begin(), acc.begin() + len, 0.0f);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t bi = r / p.M, m = r % p.M;
          vec::AddInto(dc + bi * p.batch_stride_c + m * p.ldc + c0, acc.data(), len);
        }
        if (bp.accumulate_dbias) {
          vec::AddInto(acc.data(), dbias + c0, len);
        } else {
          std::copy(acc.begin(), acc.begin() + len, dbias + c0);
        }
      }
    });
  }
}

}  // namespace cpu
}  // namespace lmf::kernels
