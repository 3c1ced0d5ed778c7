// The cuBLASLt GEMM against the CPU GEMM (kernels/matmul) on the same random inputs: every transpose
// combination (forward and backward), strided batches with a broadcast operand, bias and GELU epilogues, and
// the backward's write/accumulate rules, in fp32 and bf16. Skips without a CUDA device.
#include <vector>

#include "gtest/gtest.h"
#include "kernels/activations/activations.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/matmul/matmul.h"
#include "kernels/testing/compare.h"

namespace lmf::kernels::cuda {
namespace {

using ::lmf::kernels::testing::RandomNormal;
using testing::CloseF32;
using testing::DeviceBuffer;
using testing::RoundTo;
using testing::WithinBf16Tolerance;

// fp32: both sides accumulate K products of O(1) terms in fp32 in different orders; the difference is a few
// ulps of the partial sums (|sum| ~ sqrt(K) ~ 10): atol 1e-4 with rtol 1e-5.
constexpr double kGemmAtol = 1e-4;

class MatmulTest : public testing::GpuTest, public ::testing::WithParamInterface<DType> {
 protected:
  DType dt() const { return GetParam(); }
  void Expect(const std::string& what, const std::vector<float>& gpu, const std::vector<float>& ref,
              const std::vector<float>& naive, bool rounded_output) {
    if (dt() == DType::kF32) {
      EXPECT_TRUE(CloseF32(what, gpu, ref, 1e-5, kGemmAtol));
    } else {
      // 2x: same rounded inputs, fp32 accumulation on both sides, one output rounding each.
      EXPECT_TRUE(WithinBf16Tolerance(what, gpu, ref, rounded_output ? RoundTo(naive, DType::kBF16) : naive,
                                      2.0, 1e-5));
    }
  }
  // The GELU epilogue on (R, I) x (O, I)^T + bias with C and the saved pre-activation at row stride
  // ldc >= O, against the CPU's Matmul then ActivationForward.
  void CheckGeluEpilogue(int64_t R, int64_t I, int64_t O, int64_t ldc);
  Context cpu_ = Context::Cpu();
};

TEST_P(MatmulTest, EveryTransposeWithBiasMatchesCpu) {
  const int64_t M = 48, N = 40, K = 72;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      const auto a = RandomNormal(M * K, 1), b = RandomNormal(K * N, 2), bias = RandomNormal(N, 3);
      auto params = [&](const void* pa, const void* pb, const void* pbias, void* pc) {
        MatmulParams p;
        p.M = M, p.N = N, p.K = K, p.a = pa, p.lda = ta ? M : K, p.trans_a = ta, p.b = pb, p.ldb = tb ? K : N;
        p.trans_b = tb, p.c = pc, p.ldc = N, p.bias = pbias;
        return p;
      };
      std::vector<float> c(M * N), nc(M * N);
      kernels::Matmul(cpu_, params(a.data(), b.data(), bias.data(), c.data()));
      const auto ar = RoundTo(a, dt()), br = RoundTo(b, dt()), biasr = RoundTo(bias, dt());
      kernels::Matmul(cpu_, params(ar.data(), br.data(), biasr.data(), nc.data()));
      DeviceBuffer ga(a, dt()), gb(b, dt()), gbias(bias, dt()), gc(M * N, dt());
      MatmulParams p = params(ga.get(), gb.get(), gbias.get(), gc.get());
      p.dtype = dt();
      const absl::Status s = cuda::Matmul(ctx(), p);
      ASSERT_TRUE(s.ok()) << s;
      Expect("matmul c", gc.ToFloats(), c, nc, true);
    }
  }
}

// The backward's four transpose branches (dA = dC op(B)^T or op(B) dC^T, dB = op(A)^T dC or dC^T op(A)),
// each mapped onto cuBLASLt's column-major operands separately; alpha scales both.
TEST_P(MatmulTest, BackwardOfEveryTransposeMatchesCpu) {
  const int64_t M = 48, N = 40, K = 72;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      const auto a = RandomNormal(M * K, 31), b = RandomNormal(K * N, 32), dc = RandomNormal(M * N, 33);
      const auto db0 = RandomNormal(K * N, 34);
      auto params = [&](const void* pa, const void* pb) {
        MatmulParams p;
        p.M = M, p.N = N, p.K = K, p.a = pa, p.lda = ta ? M : K, p.trans_a = ta, p.b = pb, p.ldb = tb ? K : N;
        p.trans_b = tb, p.ldc = N, p.alpha = 0.5f;
        return p;
      };
      auto cpu = [&](const std::vector<float>& ai, const std::vector<float>& bi,
                     const std::vector<float>& dci, std::vector<float>& da, std::vector<float>& db) {
        da.assign(M * K, 0.0f), db = db0;
        MatmulBackwardParams bp;
        bp.forward = params(ai.data(), bi.data());
        bp.dc = dci.data(), bp.da = da.data(), bp.db = db.data();
        kernels::MatmulBackward(cpu_, bp);
      };
      std::vector<float> da, db, nda, ndb;
      cpu(a, b, dc, da, db);
      cpu(RoundTo(a, dt()), RoundTo(b, dt()), RoundTo(dc, dt()), nda, ndb);
      DeviceBuffer ga(a, dt()), gb(b, dt()), gdc(dc, dt()), gda(M * K, dt()), gdb(db0, DType::kF32);
      MatmulBackwardParams bp;
      bp.forward = params(ga.get(), gb.get());
      bp.forward.dtype = dt();
      bp.dc = gdc.get(), bp.da = gda.get(), bp.db = gdb.get();
      const absl::Status s = cuda::MatmulBackward(ctx(), bp);
      ASSERT_TRUE(s.ok()) << s;
      Expect("da (written)", gda.ToFloats(), da, nda, true);
      Expect("db (+=, fp32)", gdb.ToFloats(), db, ndb, false);
    }
  }
}

TEST_P(MatmulTest, BatchedWithBroadcastOperandAndBackwardRules) {
  const int64_t batch = 3, M = 32, N = 24, K = 40;
  const auto a = RandomNormal(batch * M * K, 11), w = RandomNormal(N * K, 12),
             dc = RandomNormal(batch * M * N, 13);
  const auto db0 = RandomNormal(N * K, 14), dbias0 = RandomNormal(N, 15);
  auto params = [&](const void* pa, const void* pw, void* pc) {
    MatmulParams p;
    p.M = M, p.N = N, p.K = K, p.batch = batch;
    p.a = pa, p.lda = K, p.batch_stride_a = M * K;
    p.b = pw, p.ldb = K, p.trans_b = true, p.batch_stride_b = 0;  // one weight for every batch
    p.c = pc, p.ldc = N, p.batch_stride_c = M * N, p.alpha = 0.5f;
    return p;
  };
  auto cpu = [&](const std::vector<float>& ai, const std::vector<float>& wi, const std::vector<float>& dci,
                 std::vector<std::vector<float>>& r) {
    r.assign(4, {});
    r[0].resize(batch * M * N), r[1].resize(batch * M * K), r[2] = db0, r[3] = dbias0;
    kernels::Matmul(cpu_, params(ai.data(), wi.data(), r[0].data()));
    MatmulBackwardParams bp;
    bp.forward = params(ai.data(), wi.data(), nullptr);
    bp.dc = dci.data(), bp.da = r[1].data(), bp.db = r[2].data(), bp.dbias = r[3].data();
    kernels::MatmulBackward(cpu_, bp);
  };
  std::vector<std::vector<float>> ref, naive;
  cpu(a, w, dc, ref);
  cpu(RoundTo(a, dt()), RoundTo(w, dt()), RoundTo(dc, dt()), naive);

  DeviceBuffer ga(a, dt()), gw(w, dt()), gdc(dc, dt()), gc(batch * M * N, dt()), gda(batch * M * K, dt());
  DeviceBuffer gdb(db0, DType::kF32), gdbias(dbias0, DType::kF32);
  MatmulParams p = params(ga.get(), gw.get(), gc.get());
  p.dtype = dt();
  ASSERT_TRUE(cuda::Matmul(ctx(), p).ok());
  MatmulBackwardParams bp;
  bp.forward = p;
  bp.dc = gdc.get(), bp.da = gda.get(), bp.db = gdb.get(), bp.dbias = gdbias.get();
  const absl::Status s = cuda::MatmulBackward(ctx(), bp);
  ASSERT_TRUE(s.ok()) << s;
  Expect("batched c", gc.ToFloats(), ref[0], naive[0], true);
  Expect("da (written)", gda.ToFloats(), ref[1], naive[1], true);
  Expect("dW summed over the batch (+=, fp32)", gdb.ToFloats(), ref[2], naive[2], false);
  Expect("dbias (+=, fp32)", gdbias.ToFloats(), ref[3], naive[3], false);
}

void MatmulTest::CheckGeluEpilogue(int64_t R, int64_t I, int64_t O, int64_t ldc) {
  const Context& host = cpu_;
  const DType dt = this->dt();
  const auto x = RandomNormal(R * I, 21, 0.3f), w = RandomNormal(O * I, 22, 0.3f), bias = RandomNormal(O, 23);
  auto cpu = [&](const std::vector<float>& xi, const std::vector<float>& wi, const std::vector<float>& bi,
                 std::vector<float>& pre, std::vector<float>& y) {
    pre.resize(R * O), y.resize(R * O);
    kernels::Matmul(host, LinearParams(R, I, O, xi.data(), wi.data(), bi.data(), pre.data()));
    kernels::ActivationForward(
        host, ActivationForwardParams{DType::kF32, Activation::kGeluTanh, R * O, pre.data(), y.data()});
  };
  std::vector<float> pre, y, npre, ny;
  cpu(x, w, bias, pre, y);
  cpu(RoundTo(x, dt), RoundTo(w, dt), RoundTo(bias, dt), npre, ny);
  DeviceBuffer gx(x, dt), gw(w, dt), gb(bias, dt), gy(R * ldc, dt), gpre(R * ldc, dt);
  MatmulParams p = LinearParams(R, I, O, gx.get(), gw.get(), gb.get(), gy.get());
  p.dtype = dt;
  p.ldc = ldc;
  MatmulEpilogueParams e;
  e.epilogue = MatmulEpilogue::kGeluTanh, e.pre_activation = gpre.get();
  const absl::Status s = cuda::Matmul(ctx(), p, e);
  ASSERT_TRUE(s.ok()) << s;
  const auto rows = [&](const std::vector<float>& strided) {  // (R, ldc) -> (R, O)
    std::vector<float> out;
    for (int64_t r = 0; r < R; ++r)
      out.insert(out.end(), strided.begin() + r * ldc, strided.begin() + r * ldc + O);
    return out;
  };
  Expect("gelu(x W^T + b)", rows(gy.ToFloats()), y, ny, true);
  Expect("pre-activation x W^T + b", rows(gpre.ToFloats()), pre, npre, true);
}

TEST_P(MatmulTest, GeluEpilogueEqualsMatmulThenGeluAndSavesPreActivation) {
  CheckGeluEpilogue(64, 96, 128, 128);  // cuBLASLt's fused epilogue
}

TEST_P(MatmulTest, GeluEpilogueWithLdcNotAMultipleOf8RunsUnfused) {
  // ldc = 12: cuBLASLt's GELU aux leading dimension must divide by 8, so the GEMM then the GELU kernel run.
  CheckGeluEpilogue(4, 8, 12, 12);
}

TEST_P(MatmulTest, GeluEpilogueWithPaddedRows) {
  CheckGeluEpilogue(16, 32, 40, 48);  // C and the pre-activation at row stride 48 > N = 40
}

INSTANTIATE_TEST_SUITE_P(DTypes, MatmulTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(DTypeName(i.param));
                         });

}  // namespace
}  // namespace lmf::kernels::cuda
