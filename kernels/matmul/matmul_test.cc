// Matmul: all four transpose combinations, batched, with bias, forward and backward (dA written,
// dB and dbias accumulated) match PyTorch; broadcast (batch stride 0) weights accumulate their gradient
// over the batch; LinearParams computes x W^T + b; a large product agrees with a float64 loop.
#include "kernels/matmul/matmul.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/activations/activations.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/fixture.h"

namespace lmf::kernels {
namespace {

using testing::AllClose;

// K = 4 (forward) or M*batch = 18 (gradients) fp32 products summed, against float64: 1e-5 relative plus
// 1e-6 absolute for entries near zero.
constexpr double kRtol = 1e-5, kAtol = 1e-6;

class MatmulTranspose : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(MatmulTranspose, BatchedForwardAndBackwardMatchPyTorch) {
  testing::Fixture f("kernels/testdata/matmul.npz");
  const auto [ta, tb] = GetParam();
  const std::string pre = std::string("ta") + (ta ? "1" : "0") + "_tb" + (tb ? "1" : "0") + "_";
  const int64_t batch = 3, M = 6, N = 5, K = 4;
  auto a = f.F(pre + "a", batch * M * K), b = f.F(pre + "b", batch * K * N), bias = f.F(pre + "bias", N);
  auto dc = f.F(pre + "dc", batch * M * N);
  std::vector<float> c(batch * M * N), da(a.size(), 5.0f), db(b.size(), 1.0f), dbias(N, 2.0f);
  MatmulParams p;
  p.M = M, p.N = N, p.K = K, p.batch = batch;
  p.a = a.data(), p.lda = ta ? M : K, p.trans_a = ta, p.batch_stride_a = M * K;
  p.b = b.data(), p.ldb = tb ? K : N, p.trans_b = tb, p.batch_stride_b = K * N;
  p.c = c.data(), p.ldc = N, p.batch_stride_c = M * N, p.bias = bias.data();
  Context ctx = Context::Cpu();
  Matmul(ctx, p);
  EXPECT_TRUE(AllClose(pre + "c", c, f.F(pre + "c"), kRtol, kAtol));
  MatmulBackwardParams bp;
  bp.forward = p, bp.dc = dc.data(), bp.da = da.data(), bp.db = db.data(), bp.dbias = dbias.data();
  MatmulBackward(ctx, bp);
  auto want_db = f.F(pre + "db"), want_dbias = f.F(pre + "dbias");
  for (auto& v : want_db) v += 1.0f;
  for (auto& v : want_dbias) v += 2.0f;
  EXPECT_TRUE(AllClose(pre + "da (written over 5s)", da, f.F(pre + "da"), kRtol, kAtol));
  EXPECT_TRUE(AllClose(pre + "db (accumulated onto 1)", db, want_db, kRtol, kAtol));
  EXPECT_TRUE(AllClose(pre + "dbias (accumulated onto 2)", dbias, want_dbias, kRtol, kAtol));
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, MatmulTranspose,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(Matmul, LinearWithBroadcastWeightAccumulatesOverBatch) {
  // out[b] = x[b] W^T with one W (batch stride 0): dW must be the sum over b of dout[b]^T x[b].
  const int64_t batch = 3, R = 4, I = 5, O = 3;
  auto x = testing::RandomNormal(batch * R * I, 1), w = testing::RandomNormal(O * I, 2),
       dout = testing::RandomNormal(batch * R * O, 3);
  MatmulParams p = LinearParams(R, I, O, x.data(), w.data(), nullptr, nullptr);
  std::vector<float> out(batch * R * O), dx(x.size()), dw(w.size(), 0.0f);
  p.c = out.data(), p.batch = batch, p.batch_stride_a = R * I, p.batch_stride_b = 0, p.batch_stride_c = R * O;
  Context ctx = Context::Cpu();
  Matmul(ctx, p);
  MatmulBackwardParams bp;
  bp.forward = p, bp.dc = dout.data(), bp.da = dx.data(), bp.db = dw.data();
  MatmulBackward(ctx, bp);
  std::vector<float> want_out(out.size()), want_dx(dx.size()), want_dw(dw.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t o = 0; o < O; ++o) {
        double s = 0;
        for (int64_t i = 0; i < I; ++i) s += double(x[(b * R + r) * I + i]) * w[o * I + i];
        want_out[(b * R + r) * O + o] = static_cast<float>(s);
        for (int64_t i = 0; i < I; ++i) {
          want_dx[(b * R + r) * I + i] += dout[(b * R + r) * O + o] * w[o * I + i];
          want_dw[o * I + i] += dout[(b * R + r) * O + o] * x[(b * R + r) * I + i];
        }
      }
  EXPECT_TRUE(AllClose("out", out, want_out, kRtol, kAtol));
  EXPECT_TRUE(AllClose("dx", dx, want_dx, kRtol, kAtol));
  EXPECT_TRUE(AllClose("dw summed over the batch", dw, want_dw, kRtol, kAtol));
}

// Products large enough to be split over the pool, for every transpose combination and both split
// directions (wide C splits columns, tall C splits rows), with strided operands (leading dimensions larger
// than the matrices), against a float64 loop.
TEST(Matmul, PanelSplitProductsMatchFloat64) {
  ThreadPool pool(3);
  Context ctx = Context::Cpu(&pool);
  struct Dims {
    int64_t M, N, K;
  };
  // The last two have an extent split into panels capped at 8192 (more tasks than threads).
  for (Dims d : {Dims{70, 301, 200}, Dims{301, 70, 200}, Dims{16, 30000, 8}, Dims{30000, 16, 8}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const int64_t lda = (ta ? d.M : d.K) + 3, ldb = (tb ? d.K : d.N) + 5, ldc = d.N + 7;
        auto a = testing::RandomNormal((ta ? d.K : d.M) * lda, 4),
             b = testing::RandomNormal((tb ? d.N : d.K) * ldb, 5);
        auto c = testing::RandomNormal(d.M * ldc, 6);
        std::vector<float> want = c;
        for (int64_t m = 0; m < d.M; ++m)
          for (int64_t n = 0; n < d.N; ++n) {
            double s = 0.5 * c[m * ldc + n];  // beta = 0.5
            for (int64_t k = 0; k < d.K; ++k)
              s += 2.0 * double(ta ? a[k * lda + m] : a[m * lda + k]) *
                   double(tb ? b[n * ldb + k] : b[k * ldb + n]);
            want[m * ldc + n] = static_cast<float>(s);
          }
        MatmulParams p;
        p.M = d.M, p.N = d.N, p.K = d.K, p.a = a.data(), p.lda = lda, p.trans_a = ta, p.b = b.data(),
        p.ldb = ldb;
        p.trans_b = tb, p.c = c.data(), p.ldc = ldc, p.alpha = 2.0f, p.beta = 0.5f;
        Matmul(ctx, p);
        // K = 200 fp32 products of N(0,1) values (sums of size ~30): error ~sqrt(K) * 6e-8 * 30 ~ 3e-5.
        // The ldc padding between rows keeps its old values (want holds them).
        EXPECT_TRUE(AllClose("M=" + std::to_string(d.M) + " N=" + std::to_string(d.N) +
                                 " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
                             c, want, 1e-5, 2e-4));
      }
    }
  }
}

}  // namespace
}  // namespace lmf::kernels

namespace lmf::kernels {
namespace {

TEST(MatmulDeathTest, LeadingDimensionTooSmallAborts) {
  std::vector<float> a(12), b(12), c(9);
  Context ctx = Context::Cpu();
  MatmulParams p = LinearParams(3, 4, 3, a.data(), b.data(), nullptr, c.data());
  p.lda = 3;
  EXPECT_DEATH(Matmul(ctx, p), "lda too small");
}

TEST(Matmul, ManySmallBatchedMatricesMatchOneAtATime) {
  const int64_t batch = 24, M = 7, N = 9, K = 5;
  auto a = testing::RandomNormal(batch * M * K, 1), b = testing::RandomNormal(batch * K * N, 2);
  std::vector<float> c(batch * M * N), one(M * N);
  MatmulParams p;
  p.M = M, p.N = N, p.K = K, p.batch = batch, p.a = a.data(), p.lda = K, p.batch_stride_a = M * K;
  p.b = b.data(), p.ldb = N, p.batch_stride_b = K * N, p.c = c.data(), p.ldc = N, p.batch_stride_c = M * N;
  ThreadPool pool(2);
  Context ctx = Context::Cpu(&pool);
  Matmul(ctx, p);
  for (int64_t i = 0; i < batch; ++i) {
    MatmulParams q = p;
    q.batch = 1, q.a = a.data() + i * M * K, q.b = b.data() + i * K * N, q.c = one.data();
    Matmul(ctx, q);
    ASSERT_TRUE(std::equal(one.begin(), one.end(), c.begin() + i * M * N)) << "matrix " << i;
  }
}

TEST(Matmul, GeluEpilogueEqualsMatmulThenGeluAndSavesPreActivation) {
  const Context ctx = Context::Cpu();
  const int64_t M = 5, N = 7, K = 6;
  const auto x = testing::RandomNormal(M * K, 1), w = testing::RandomNormal(N * K, 2),
             b = testing::RandomNormal(N, 3);
  for (const int64_t ldc : {N, N + 3}) {  // contiguous C, and rows of a wider buffer
    SCOPED_TRACE(ldc);
    MatmulParams p = LinearParams(M, K, N, x.data(), w.data(), b.data(), nullptr);
    p.ldc = ldc;
    std::vector<float> want(M * ldc, -5.0f), got(M * ldc, -5.0f), pre(M * ldc, -5.0f);
    p.c = want.data();
    Matmul(ctx, p);
    std::vector<float> want_pre = want;
    // The reference applies GELU as the epilogue promises: over all of C when it is contiguous, else per row.
    const int64_t rows = ldc == N ? 1 : M, n = ldc == N ? M * N : N;
    for (int64_t m = 0; m < rows; ++m) {
      ActivationForward(ctx, ActivationForwardParams{DType::kF32, Activation::kGeluTanh, n,
                                                     want.data() + m * ldc, want.data() + m * ldc});
    }
    p.c = got.data();
    Matmul(ctx, p, MatmulEpilogueParams{MatmulEpilogue::kGeluTanh, pre.data()});
    EXPECT_EQ(got, want);  // padding columns keep their -5 on both sides
    EXPECT_EQ(pre, want_pre);
  }
}

}  // namespace
}  // namespace lmf::kernels

// bf16 storage (kernels/cpu/bf16.h): against the fp32 kernel on the unrounded inputs, each bf16 output is
// within 2x the error of the naive bf16 computation (the fp32 kernel on bf16-rounded inputs, its outputs
// rounded once; STYLE.md, the CUDA tests' rule). The CPU computes exactly that in fp32, so the bound leaves
// room only for a tie rounding the other way; a wrong operand dtype, stride or write rule breaks it.
// fp32 statistics and parameter gradients are held to the same rule unrounded.
namespace lmf::kernels {
namespace {

using testing::DTypeBuffer;
using testing::RandomNormal;
using testing::RoundToBF16;
using testing::WithinBf16Tolerance;

struct MatmulResult {
  std::vector<float> c, pre, da, db, dbias;
};

// C (batch 2, M x N) = A^T B^T + bias with A (K, M) and B (N, K) per batch, leading dimensions padded, GELU
// epilogue saving its input (batch 1 only: run per batch); backward with da accumulating.
MatmulResult RunMatmul(DType dt, bool round, const std::vector<float>& a, const std::vector<float>& b,
                       const std::vector<float>& bias, const std::vector<float>& dc, const std::vector<float>& da0,
                       int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  auto in = [&](const std::vector<float>& v) { return DTypeBuffer(round ? RoundToBF16(v) : v, dt); };
  DTypeBuffer ab = in(a), bb = in(b), biasb = in(bias), dcb = in(dc), dab = in(da0);
  DTypeBuffer c(2 * M * ldc, dt), pre(2 * M * ldc, dt);
  MatmulResult r;
  r.db.assign(b.size(), 0.125f), r.dbias.assign(N, -0.25f);  // fp32, accumulate
  const Context ctx = Context::Cpu();
  const size_t es = DTypeSize(dt);
  for (int64_t i = 0; i < 2; ++i) {
    MatmulParams p;
    p.dtype = dt, p.M = M, p.N = N, p.K = K;
    p.a = static_cast<char*>(ab.data()) + es * i * K * lda, p.lda = lda, p.trans_a = true;
    p.b = static_cast<char*>(bb.data()) + es * i * N * ldb, p.ldb = ldb, p.trans_b = true;
    p.c = static_cast<char*>(c.data()) + es * i * M * ldc, p.ldc = ldc, p.bias = biasb.data();
    MatmulEpilogueParams e{MatmulEpilogue::kGeluTanh, static_cast<char*>(pre.data()) + es * i * M * ldc};
    Matmul(ctx, p, e);
  }
  MatmulParams p;
  p.dtype = dt, p.M = M, p.N = N, p.K = K, p.batch = 2;
  p.a = ab.data(), p.lda = lda, p.trans_a = true, p.batch_stride_a = K * lda;
  p.b = bb.data(), p.ldb = ldb, p.trans_b = true, p.batch_stride_b = N * ldb;
  p.ldc = ldc, p.batch_stride_c = M * ldc;
  MatmulBackwardParams bp;
  bp.forward = p, bp.dc = dcb.data(), bp.da = dab.data(), bp.db = r.db.data(), bp.dbias = r.dbias.data();
  bp.accumulate_da = true;
  MatmulBackward(ctx, bp);
  r.c = c.ToFloats(), r.pre = pre.ToFloats(), r.da = dab.ToFloats();
  for (auto* v : {&r.c, &r.pre})  // the padding columns are never written: compare only C's columns
    for (int64_t row = 0; row < 2 * M; ++row)
      for (int64_t col = N; col < ldc; ++col) (*v)[row * ldc + col] = 0.0f;
  return r;
}

TEST(MatmulBf16, TransposedBatchedBiasGeluAndBackwardWithinTwiceTheNaiveBf16Error) {
  const int64_t M = 33, N = 20, K = 48, lda = M + 3, ldb = K + 5, ldc = N + 4;
  const auto a = RandomNormal(2 * K * lda, 1), b = RandomNormal(2 * N * ldb, 2, 0.2f), bias = RandomNormal(N, 3),
             dc = RandomNormal(2 * M * ldc, 4), da0 = RandomNormal(2 * K * lda, 5);
  const MatmulResult ref = RunMatmul(DType::kF32, false, a, b, bias, dc, da0, M, N, K, lda, ldb, ldc);
  const MatmulResult naive = RunMatmul(DType::kF32, true, a, b, bias, dc, da0, M, N, K, lda, ldb, ldc);
  const MatmulResult bf16 = RunMatmul(DType::kBF16, false, a, b, bias, dc, da0, M, N, K, lda, ldb, ldc);
  // The naive GELU reads the rounded pre-activation, as the bf16 path's saved input is; its output is rounded.
  EXPECT_TRUE(WithinBf16Tolerance("pre-activation", bf16.pre, ref.pre, RoundToBF16(naive.pre), 2));
  EXPECT_TRUE(WithinBf16Tolerance("c = gelu(...)", bf16.c, ref.c, RoundToBF16(naive.c), 2));
  // da accumulates onto da0; its padding keeps da0 (rounded in the naive and bf16 runs alike).
  EXPECT_TRUE(WithinBf16Tolerance("da (+=)", bf16.da, ref.da, RoundToBF16(naive.da), 2));
  EXPECT_TRUE(WithinBf16Tolerance("db (fp32, +=)", bf16.db, ref.db, naive.db, 2));
  EXPECT_TRUE(WithinBf16Tolerance("dbias (fp32, +=)", bf16.dbias, ref.dbias, naive.dbias, 2));
}

}  // namespace
}  // namespace lmf::kernels
