// The lab CUDA memory-bound kernels against the CPU kernels (the reference) on the same random inputs, in
// fp32 (|gpu - cpu| <= 1e-5 |cpu| + atol) and bf16 (the STYLE.md rule, see gpu_test_util.h), plus bitwise
// run-to-run determinism of every reduction. Skips without a CUDA device.
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/adamw/adamw.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/embedding/embedding.h"
#include "kernels/grad_norm/grad_norm.h"
#include "kernels/layernorm/layernorm.h"
#include "kernels/residual/residual.h"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/rope/rope.h"
#include "kernels/swiglu/swiglu.h"
#include "kernels/testing/compare.h"
#include "lab/cuda/cross_entropy.h"
#include "lab/cuda/embedding.h"
#include "kernels/cuda/gpu_test_util.h"
#include "lab/cuda/norm.h"
#include "lab/cuda/optimizer.h"
#include "lab/cuda/pointwise.h"

namespace lmf::kernels::cuda {
namespace {

using ::lmf::kernels::testing::RandomInts;
using ::lmf::kernels::testing::RandomNormal;
using testing::CloseF32;
using testing::DeviceBuffer;
using testing::RoundTo;
using testing::WithinBf16Tolerance;

class MemoryBoundTest : public testing::GpuTest, public ::testing::WithParamInterface<DType> {
 protected:
  DType dt() const { return GetParam(); }
  // fp32: close to the CPU result. bf16: within `multiple` x the naive bf16 error. `naive` is the CPU result
  // on rounded inputs; it is rounded here when the output is stored in dtype (`rounded_output`).
  void Expect(const std::string& what, const std::vector<float>& gpu, const std::vector<float>& ref,
              const std::vector<float>& naive, bool rounded_output = true, double multiple = 2.0,
              double rtol = 1e-5, double atol = 1e-6) {
    if (dt() == DType::kF32) {
      EXPECT_TRUE(CloseF32(what, gpu, ref, rtol, atol));
    } else {
      EXPECT_TRUE(WithinBf16Tolerance(what, gpu, ref, rounded_output ? RoundTo(naive, DType::kBF16) : naive,
                                      multiple));
    }
  }
  Context cpu_ = Context::Cpu();
};

TEST_P(MemoryBoundTest, RmsNormForwardAndBackwardMatchCpu) {
  const int64_t N = 67, C = 768;
  const auto x = RandomNormal(N * C, 1), w = RandomNormal(C, 2), dout = RandomNormal(N * C, 3);
  const auto dw0 = RandomNormal(C, 4);
  auto cpu = [&](const std::vector<float>& xi, const std::vector<float>& wi, const std::vector<float>& di,
                 std::vector<float>& out, std::vector<float>& rstd, std::vector<float>& dx,
                 std::vector<float>& dw) {
    out.resize(N * C), rstd.resize(N), dx.resize(N * C), dw = dw0;
    RmsNormForwardParams f{DType::kF32, N, C, 1e-5f, xi.data(), wi.data(), out.data(), rstd.data()};
    kernels::RmsNormForward(cpu_, f);
    RmsNormBackwardParams b{DType::kF32, N,         C,         xi.data(), wi.data(),
                            rstd.data(), di.data(), dx.data(), dw.data()};
    kernels::RmsNormBackward(cpu_, b);
  };
  std::vector<float> out, rstd, dx, dw, nout, nrstd, ndx, ndw;
  cpu(x, w, dout, out, rstd, dx, dw);
  cpu(RoundTo(x, dt()), RoundTo(w, dt()), RoundTo(dout, dt()), nout, nrstd, ndx, ndw);

  DeviceBuffer gx(x, dt()), gw(w, dt()), gd(dout, dt()), gout(N * C, dt()), grstd(N, DType::kF32);
  DeviceBuffer gdx(N * C, dt()), gdw(dw0, DType::kF32);
  RmsNormForwardParams f{dt(), N, C, 1e-5f, gx.get(), gw.get(), gout.get(), grstd.as<float>()};
  ASSERT_TRUE(cuda::RmsNormForward(ctx(), f).ok());
  RmsNormBackwardParams b{dt(), N, C, gx.get(), gw.get(), grstd.as<float>(), gd.get(), gdx.get(), gdw.get()};
  ASSERT_TRUE(cuda::RmsNormBackward(ctx(), b).ok());
  Expect("rmsnorm out", gout.ToFloats(), out, nout);
  Expect("rmsnorm rstd", grstd.ToFloats(), rstd, nrstd, /*rounded_output=*/false);
  Expect("rmsnorm dx", gdx.ToFloats(), dx, ndx, true, 2.0, 1e-5, 1e-5);
  // dweight sums N products: fp32 accumulation order differs from the CPU's (atol 1e-4 for sums of ~67
  // terms).
  Expect("rmsnorm dweight (+=)", gdw.ToFloats(), dw, ndw, /*rounded_output=*/false, 2.0, 1e-5, 1e-4);

  // Deterministic: the same call again gives the same bits.
  DeviceBuffer gdw2(dw0, DType::kF32);
  b.dweight = gdw2.get();
  ASSERT_TRUE(cuda::RmsNormBackward(ctx(), b).ok());
  EXPECT_EQ(gdw.Bytes(), gdw2.Bytes());
}

TEST_P(MemoryBoundTest, LayerNormForwardAndBackwardMatchCpu) {
  const int64_t N = 45, C = 1001;  // not a multiple of 8: the scalar (non-vector) path
  auto x = RandomNormal(N * C, 11);
  for (float& v : x) v += 3.0f;  // a mean far from zero exercises the two-pass variance
  const auto w = RandomNormal(C, 12), bias = RandomNormal(C, 13), dout = RandomNormal(N * C, 14);
  const auto dw0 = RandomNormal(C, 15), db0 = RandomNormal(C, 16);
  auto cpu = [&](const std::vector<float>& xi, const std::vector<float>& wi, const std::vector<float>& bi,
                 const std::vector<float>& di, std::vector<std::vector<float>>& r) {
    r.assign(6, {});
    r[0].resize(N * C), r[1].resize(N), r[2].resize(N), r[3].resize(N * C), r[4] = dw0, r[5] = db0;
    LayerNormForwardParams f{DType::kF32, N,         C,           1e-5f,       xi.data(),
                             wi.data(),   bi.data(), r[0].data(), r[1].data(), r[2].data()};
    kernels::LayerNormForward(cpu_, f);
    LayerNormBackwardParams b{DType::kF32, N,         C,           xi.data(),   wi.data(),  r[1].data(),
                              r[2].data(), di.data(), r[3].data(), r[4].data(), r[5].data()};
    kernels::LayerNormBackward(cpu_, b);
  };
  std::vector<std::vector<float>> ref, naive;
  cpu(x, w, bias, dout, ref);
  cpu(RoundTo(x, dt()), RoundTo(w, dt()), RoundTo(bias, dt()), RoundTo(dout, dt()), naive);

  DeviceBuffer gx(x, dt()), gw(w, dt()), gb(bias, dt()), gd(dout, dt()), gout(N * C, dt());
  DeviceBuffer gmean(N, DType::kF32), grstd(N, DType::kF32), gdx(N * C, dt()), gdw(dw0, DType::kF32),
      gdb(db0, DType::kF32);
  LayerNormForwardParams f{
      dt(), N, C, 1e-5f, gx.get(), gw.get(), gb.get(), gout.get(), gmean.as<float>(), grstd.as<float>()};
  ASSERT_TRUE(cuda::LayerNormForward(ctx(), f).ok());
  LayerNormBackwardParams b{
      dt(),     N,         C,         gx.get(), gw.get(), gmean.as<float>(), grstd.as<float>(),
      gd.get(), gdx.get(), gdw.get(), gdb.get()};
  ASSERT_TRUE(cuda::LayerNormBackward(ctx(), b).ok());
  Expect("layernorm out", gout.ToFloats(), ref[0], naive[0], true, 2.0, 1e-5, 1e-5);
  Expect("layernorm mean", gmean.ToFloats(), ref[1], naive[1], false);
  Expect("layernorm rstd", grstd.ToFloats(), ref[2], naive[2], false);
  Expect("layernorm dx", gdx.ToFloats(), ref[3], naive[3], true, 2.0, 1e-5, 1e-5);
  Expect("layernorm dweight (+=)", gdw.ToFloats(), ref[4], naive[4], false, 2.0, 1e-5, 1e-4);
  Expect("layernorm dbias (+=)", gdb.ToFloats(), ref[5], naive[5], false, 2.0, 1e-5, 1e-4);
}

TEST_P(MemoryBoundTest, FusedResidualNormsEqualResidualAddThenNorm) {
  const int64_t N = 33, C = 512;
  const auto res = RandomNormal(N * C, 21), x = RandomNormal(N * C, 22), w = RandomNormal(C, 23),
             bias = RandomNormal(C, 24);
  // Reference: the residual add (rounded to dtype, as the kernel stores it), then the CPU norm.
  auto sum_of = [&](const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> s(N * C);
    ResidualForwardParams rp{DType::kF32, N * C, a.data(), b.data(), s.data()};
    kernels::ResidualForward(cpu_, rp);
    return s;
  };
  const auto sum = sum_of(res, x);
  const auto nsum = RoundTo(sum_of(RoundTo(res, dt()), RoundTo(x, dt())), dt());
  std::vector<float> rms(N * C), nrms(N * C), ln(N * C), nln(N * C), rstd(N), mean(N);
  kernels::RmsNormForward(
      cpu_, RmsNormForwardParams{DType::kF32, N, C, 1e-5f, sum.data(), w.data(), rms.data(), rstd.data()});
  const auto wr = RoundTo(w, dt()), br = RoundTo(bias, dt());
  kernels::RmsNormForward(
      cpu_, RmsNormForwardParams{DType::kF32, N, C, 1e-5f, nsum.data(), wr.data(), nrms.data(), rstd.data()});
  kernels::LayerNormForward(cpu_, LayerNormForwardParams{DType::kF32, N, C, 1e-5f, sum.data(), w.data(),
                                                         bias.data(), ln.data(), mean.data(), rstd.data()});
  kernels::LayerNormForward(cpu_, LayerNormForwardParams{DType::kF32, N, C, 1e-5f, nsum.data(), wr.data(),
                                                         br.data(), nln.data(), mean.data(), rstd.data()});

  DeviceBuffer gres(res, dt()), gx(x, dt()), gw(w, dt()), gb(bias, dt()), gsum(N * C, dt()),
      gout(N * C, dt());
  ResidualRmsNormForwardParams rp{dt(),     N,          C,        1e-5f,      gres.get(),
                                  gx.get(), gsum.get(), gw.get(), gout.get(), nullptr};
  ASSERT_TRUE(cuda::ResidualRmsNormForward(ctx(), rp).ok());
  Expect("residual_out", gsum.ToFloats(), sum, nsum);
  Expect("residual + rmsnorm", gout.ToFloats(), rms, nrms, true, 2.0, 1e-5, 1e-5);
  // In place: residual_out aliases residual.
  ResidualLayerNormForwardParams lp{dt(),       N,        C,        1e-5f,      gres.get(), gx.get(),
                                    gres.get(), gw.get(), gb.get(), gout.get(), nullptr,    nullptr};
  ASSERT_TRUE(cuda::ResidualLayerNormForward(ctx(), lp).ok());
  Expect("residual_out in place", gres.ToFloats(), sum, nsum);
  Expect("residual + layernorm", gout.ToFloats(), ln, nln, true, 2.0, 1e-5, 1e-5);
}

TEST_P(MemoryBoundTest, ActivationsMatchCpu) {
  const int64_t n = 10007;
  auto x = RandomNormal(n, 31, 3.0f);
  x[0] = 0.0f;  // ReLU'(0) = 0
  const auto dout = RandomNormal(n, 32);
  for (Activation kind : {Activation::kSilu, Activation::kGeluTanh, Activation::kRelu}) {
    SCOPED_TRACE(ActivationName(kind));
    auto cpu = [&](const std::vector<float>& xi, const std::vector<float>& di, std::vector<float>& y,
                   std::vector<float>& dx) {
      y.resize(n), dx.resize(n);
      kernels::ActivationForward(cpu_, ActivationForwardParams{DType::kF32, kind, n, xi.data(), y.data()});
      kernels::ActivationBackward(
          cpu_, ActivationBackwardParams{DType::kF32, kind, n, xi.data(), di.data(), dx.data()});
    };
    std::vector<float> y, dx, ny, ndx;
    cpu(x, dout, y, dx);
    cpu(RoundTo(x, dt()), RoundTo(dout, dt()), ny, ndx);
    DeviceBuffer gx(x, dt()), gd(dout, dt()), gy(n, dt()), gdx(n, dt());
    ASSERT_TRUE(
        cuda::ActivationForward(ctx(), ActivationForwardParams{dt(), kind, n, gx.get(), gy.get()}).ok());
    ASSERT_TRUE(cuda::ActivationBackward(
                    ctx(), ActivationBackwardParams{dt(), kind, n, gx.get(), gd.get(), gdx.get()})
                    .ok());
    // __expf differs from the CPU's exp by a few ulps: rtol 1e-5 with atol 1e-6 still holds for |y| >~ 0.1.
    Expect("activation out", gy.ToFloats(), y, ny, true, 2.0, 1e-5, 1e-6);
    Expect("activation dx", gdx.ToFloats(), dx, ndx, true, 2.0, 1e-5, 1e-6);
  }
}

TEST_P(MemoryBoundTest, SwiGluReadsAndWritesHalvesOfAFusedBuffer) {
  // H = 304: 16-byte accesses in both dtypes; H = 300: one element at a time in bf16 (300 % 8 != 0).
  for (const int64_t H : {304, 300}) {
    SCOPED_TRACE(H);
    const int64_t N = 37;
    const auto gu = RandomNormal(N * 2 * H, 41, 2.0f), dout = RandomNormal(N * H, 42);
    auto cpu = [&](const std::vector<float>& in, const std::vector<float>& di, std::vector<float>& y,
                   std::vector<float>& dgu) {
      y.resize(N * H), dgu.assign(N * 2 * H, 0.0f);
      kernels::SwiGluForward(
          cpu_, SwiGluForwardParams{DType::kF32, N, H, in.data(), 2 * H, in.data() + H, 2 * H, y.data()});
      kernels::SwiGluBackward(cpu_, SwiGluBackwardParams{DType::kF32, N, H, in.data(), 2 * H, in.data() + H,
                                                         2 * H, di.data(), dgu.data(), dgu.data() + H});
    };
    std::vector<float> y, dgu, ny, ndgu;
    cpu(gu, dout, y, dgu);
    cpu(RoundTo(gu, dt()), RoundTo(dout, dt()), ny, ndgu);
    DeviceBuffer ggu(gu, dt()), gd(dout, dt()), gy(N * H, dt()), gdgu(N * 2 * H, dt());
    const size_t es = DTypeSize(dt());
    char* base = ggu.as<char>();
    char* dbase = gdgu.as<char>();
    ASSERT_TRUE(cuda::SwiGluForward(
                    ctx(), SwiGluForwardParams{dt(), N, H, base, 2 * H, base + H * es, 2 * H, gy.get()})
                    .ok());
    ASSERT_TRUE(cuda::SwiGluBackward(ctx(), SwiGluBackwardParams{dt(), N, H, base, 2 * H, base + H * es,
                                                                 2 * H, gd.get(), dbase, dbase + H * es})
                    .ok());
    Expect("swiglu out", gy.ToFloats(), y, ny, true, 2.0, 1e-5, 1e-6);
    Expect("swiglu dgate|dup", gdgu.ToFloats(), dgu, ndgu, true, 2.0, 1e-5, 1e-6);
  }
}

TEST_P(MemoryBoundTest, RopeWithStridesAndPerBatchPositionsMatchesCpu) {
  const int64_t B = 2, T = 19, NH = 3, HS = 64,
                C3 = 3 * NH * HS;  // q read in place from a fused (B, T, 3C) buffer
  const auto qkv = RandomNormal(B * T * C3, 51);
  const auto pos = RandomInts(B * T, 100000, 52);  // long positions: angles need double precision
  auto params = [&](const void* in, void* out) {
    RopeParams p;
    p.dtype = DType::kF32, p.B = B, p.T = T, p.NH = NH, p.HS = HS, p.theta = 10000.0f;
    p.in = in, p.in_stride_b = T * C3, p.in_stride_t = C3, p.in_stride_h = HS;
    p.out = out, p.out_stride_b = T * NH * HS, p.out_stride_t = NH * HS, p.out_stride_h = HS;
    p.positions = pos.data(), p.positions_stride_b = T;
    return p;
  };
  auto cpu = [&](const std::vector<float>& in, std::vector<float>& y, std::vector<float>& back) {
    y.resize(B * T * NH * HS), back.resize(B * T * NH * HS);
    kernels::RopeForward(cpu_, params(in.data(), y.data()));
    RopeParams bp = params(in.data(), back.data());  // backward applied to the same input: inverse rotation
    kernels::RopeBackward(cpu_, bp);
  };
  std::vector<float> y, back, ny, nback;
  cpu(qkv, y, back);
  cpu(RoundTo(qkv, dt()), ny, nback);
  DeviceBuffer gin(qkv, dt()), gy(B * T * NH * HS, dt()), gback(B * T * NH * HS, dt());
  DeviceBuffer gpos = DeviceBuffer::Ints(pos);
  RopeParams p = params(gin.get(), gy.get());
  p.dtype = dt(), p.positions = gpos.as<int32_t>();
  ASSERT_TRUE(cuda::RopeForward(ctx(), p).ok());
  p.out = gback.get();
  ASSERT_TRUE(cuda::RopeBackward(ctx(), p).ok());
  Expect("rope out", gy.ToFloats(), y, ny, true, 2.0, 1e-5, 1e-5);
  Expect("rope backward", gback.ToFloats(), back, nback, true, 2.0, 1e-5, 1e-5);
}

TEST_P(MemoryBoundTest, ResidualBackwardAccumulatesIntoBothInputs) {
  const int64_t n = 5000;
  const auto a = RandomNormal(n, 61), b = RandomNormal(n, 62), d = RandomNormal(n, 63);
  std::vector<float> out(n), da = a, db = b;
  kernels::ResidualForward(cpu_, ResidualForwardParams{DType::kF32, n, a.data(), b.data(), out.data()});
  kernels::ResidualBackward(cpu_, ResidualBackwardParams{DType::kF32, n, d.data(), da.data(), db.data()});
  const auto ar = RoundTo(a, dt()), br = RoundTo(b, dt()), dr = RoundTo(d, dt());
  std::vector<float> nout(n), nda = ar, ndb = br;
  kernels::ResidualForward(cpu_, ResidualForwardParams{DType::kF32, n, ar.data(), br.data(), nout.data()});
  kernels::ResidualBackward(cpu_, ResidualBackwardParams{DType::kF32, n, dr.data(), nda.data(), ndb.data()});
  DeviceBuffer ga(a, dt()), gb(b, dt()), gd(d, dt()), gout(n, dt());
  ASSERT_TRUE(
      cuda::ResidualForward(ctx(), ResidualForwardParams{dt(), n, ga.get(), gb.get(), gout.get()}).ok());
  ASSERT_TRUE(
      cuda::ResidualBackward(ctx(), ResidualBackwardParams{dt(), n, gd.get(), ga.get(), gb.get()}).ok());
  Expect("residual out", gout.ToFloats(), out, nout);
  Expect("residual da (+=)", ga.ToFloats(), da, nda);
  Expect("residual db (+=)", gb.ToFloats(), db, ndb);
}

TEST_P(MemoryBoundTest, EmbeddingBackwardIsDeterministicWithRepeatedIds) {
  const int64_t N = 4096, V = 300, C = 96;
  const auto table = RandomNormal(V * C, 71), dout = RandomNormal(N * C, 72), dt0 = RandomNormal(V * C, 73);
  auto ids = RandomInts(N, 40, 74);  // many repeats: ids < 40 of 300
  ids[5] = V - 1;
  std::vector<float> out(N * C), dtab = dt0, nout(N * C), ndtab = dt0;
  kernels::EmbeddingForward(
      cpu_, EmbeddingForwardParams{DType::kF32, N, V, C, ids.data(), table.data(), out.data()});
  kernels::EmbeddingBackward(
      cpu_, EmbeddingBackwardParams{DType::kF32, N, V, C, ids.data(), dout.data(), dtab.data()});
  const auto tr = RoundTo(table, dt()), dr = RoundTo(dout, dt());
  kernels::EmbeddingForward(cpu_,
                            EmbeddingForwardParams{DType::kF32, N, V, C, ids.data(), tr.data(), nout.data()});
  kernels::EmbeddingBackward(
      cpu_, EmbeddingBackwardParams{DType::kF32, N, V, C, ids.data(), dr.data(), ndtab.data()});

  DeviceBuffer gids = DeviceBuffer::Ints(ids), gt(table, dt()), gd(dout, dt()), gout(N * C, dt());
  DeviceBuffer g1(dt0, DType::kF32), g2(dt0, DType::kF32);
  ASSERT_TRUE(cuda::EmbeddingForward(
                  ctx(), EmbeddingForwardParams{dt(), N, V, C, gids.as<int32_t>(), gt.get(), gout.get()})
                  .ok());
  EmbeddingBackwardParams bp{dt(), N, V, C, gids.as<int32_t>(), gd.get(), g1.get()};
  ASSERT_TRUE(cuda::EmbeddingBackward(ctx(), bp).ok());
  bp.dtable = g2.get();
  ASSERT_TRUE(cuda::EmbeddingBackward(ctx(), bp).ok());
  Expect("embedding out", gout.ToFloats(), out, nout);
  // Each dtable row sums ~100 rows of dout: summation order differs from the CPU's (atol 1e-4).
  Expect("embedding dtable (+=)", g1.ToFloats(), dtab, ndtab, false, 2.0, 1e-5, 1e-4);
  EXPECT_EQ(g1.Bytes(), g2.Bytes()) << "embedding backward differs between two identical runs";
}

TEST_P(MemoryBoundTest, EmbeddingRejectsOutOfRangeIds) {
  const int64_t N = 8, V = 10, C = 4;
  std::vector<int32_t> ids = {0, 1, 2, 3, 10, 5, -1, 7};
  DeviceBuffer gids = DeviceBuffer::Ints(ids), gt(std::vector<float>(V * C, 1.0f), dt()), gout(N * C, dt());
  const absl::Status s = cuda::EmbeddingForward(
      ctx(), EmbeddingForwardParams{dt(), N, V, C, gids.as<int32_t>(), gt.get(), gout.get()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("id 10 at row 4"), std::string::npos) << s;
}

TEST_P(MemoryBoundTest, CrossEntropyFusedInPlaceMatchesCpu) {
  const int64_t N = 24, V = 5003;
  auto targets = RandomInts(N, static_cast<int32_t>(V), 82);
  targets[3] = -100;  // ignored row
  const auto dlosses = RandomNormal(N, 83);
  // A padded row stride (16-byte vector path) without z-loss, and an odd unpadded one (scalar path) with it.
  for (const std::pair<float, int64_t>& config :
       {std::pair<float, int64_t>{0.0f, 5056}, std::pair<float, int64_t>{1e-4f, V}}) {
    const float z = config.first;
    const int64_t stride = config.second;
    SCOPED_TRACE(::testing::Message() << "z_loss=" << z << " row_stride=" << stride);
    const auto logits = RandomNormal(N * stride, 81, 3.0f);
    auto cpu = [&](std::vector<float> lg, std::vector<float>& loss, std::vector<float>& lse,
                   std::vector<float>& grad) {
      loss.resize(N), lse.resize(N);
      CrossEntropyParams p;
      p.N = N, p.V = V, p.row_stride = stride, p.z_loss = z, p.logits = lg.data(), p.targets = targets.data();
      p.losses = loss.data(), p.lse = lse.data(), p.dlosses = dlosses.data(), p.dlogits = lg.data();
      kernels::CrossEntropyForward(cpu_, p);
      grad = lg;
    };
    std::vector<float> loss, lse, grad, nloss, nlse, ngrad;
    cpu(logits, loss, lse, grad);
    cpu(RoundTo(logits, dt()), nloss, nlse, ngrad);
    DeviceBuffer glog(logits, dt()), gdl(dlosses, DType::kF32), gloss(N, DType::kF32), glse(N, DType::kF32);
    DeviceBuffer gt = DeviceBuffer::Ints(targets);
    CrossEntropyParams p;
    p.dtype = dt(), p.N = N, p.V = V, p.row_stride = stride, p.z_loss = z, p.logits = glog.get();
    p.targets = gt.as<int32_t>(), p.losses = gloss.as<float>(), p.lse = glse.as<float>(),
    p.dlosses = gdl.as<float>();
    p.dlogits = glog.get();  // in place
    ASSERT_TRUE(cuda::CrossEntropyForward(ctx(), p).ok());
    Expect("cross-entropy losses", gloss.ToFloats(), loss, nloss, false, 2.0, 1e-5, 1e-5);
    Expect("cross-entropy lse", glse.ToFloats(), lse, nlse, false, 2.0, 1e-5, 1e-5);
    Expect("cross-entropy dlogits (in place, padding zeroed)", glog.ToFloats(), grad, ngrad, true, 2.0, 1e-5,
           1e-7);

    // Backward from the saved lse into a separate buffer gives the same gradient.
    DeviceBuffer glog2(logits, dt()), gg(N * stride, dt());
    p.logits = glog2.get(), p.dlogits = gg.get();
    ASSERT_TRUE(cuda::CrossEntropyBackward(ctx(), p).ok());
    Expect("cross-entropy backward", gg.ToFloats(), grad, ngrad, true, 2.0, 1e-5, 1e-7);
  }
}

TEST_P(MemoryBoundTest, MultiTensorAdamWMatchesPerTensorCpuSteps) {
  const std::vector<int64_t> sizes = {1, 1000, 40000};  // one chunk, partial chunks, several chunks
  const DType gdt = dt();
  std::vector<std::vector<float>> param, grad, m, v, nparam, nm, nv;
  std::vector<DeviceBuffer> gp, gg, gm, gv, gcopy;
  std::vector<AdamWTensor> tensors;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    param.push_back(RandomNormal(n, 90 + i)), grad.push_back(RandomNormal(n, 95 + i));
    m.push_back(std::vector<float>(n, 0.0f)), v.push_back(std::vector<float>(n, 0.0f));
    nparam.push_back(param.back()), nm.push_back(m.back()), nv.push_back(v.back());
    gp.emplace_back(param.back(), DType::kF32), gg.emplace_back(grad.back(), gdt);
    gm.emplace_back(m.back(), DType::kF32), gv.emplace_back(v.back(), DType::kF32),
        gcopy.emplace_back(n, DType::kBF16);
  }
  for (size_t i = 0; i < sizes.size(); ++i)
    tensors.push_back(AdamWTensor{sizes[i], gp[i].as<float>(), gg[i].get(), gm[i].as<float>(),
                                  gv[i].as<float>(), gcopy[i].get()});
  for (int64_t step = 1; step <= 3; ++step) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      AdamWParams cp;
      cp.n = sizes[i], cp.lr = 1e-2f, cp.weight_decay = 0.1f, cp.step = step, cp.grad_scale = 0.5f;
      cp.param = param[i].data(), cp.grad = grad[i].data(), cp.m = m[i].data(), cp.v = v[i].data();
      kernels::AdamWStep(cpu_, cp);
      const auto gr = RoundTo(grad[i], gdt);
      cp.param = nparam[i].data(), cp.grad = gr.data(), cp.m = nm[i].data(), cp.v = nv[i].data();
      kernels::AdamWStep(cpu_, cp);
    }
    MultiTensorAdamWParams p;
    p.grad_dtype = gdt, p.tensors = tensors.data(), p.num_tensors = static_cast<int64_t>(tensors.size());
    p.lr = 1e-2f, p.weight_decay = 0.1f, p.step = step, p.grad_scale = 0.5f;
    ASSERT_TRUE(cuda::MultiTensorAdamW(ctx(), p).ok());
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE(sizes[i]);
    // The fp32 master weights: sqrt/div are correctly rounded on both sides; 1e-5 relative covers FMA
    // contraction.
    Expect("adamw param", gp[i].ToFloats(), param[i], nparam[i], false, 2.0, 1e-5, 1e-6);
    Expect("adamw m", gm[i].ToFloats(), m[i], nm[i], false, 2.0, 1e-5, 1e-7);
    Expect("adamw v", gv[i].ToFloats(), v[i], nv[i], false, 2.0, 1e-5, 1e-9);
    EXPECT_EQ(gcopy[i].ToFloats(), RoundTo(gp[i].ToFloats(), DType::kBF16))
        << "bf16 copy of the master weights";
  }
}

TEST_P(MemoryBoundTest, GlobalGradNormAndClippingMatchCpuAndAreDeterministic) {
  const std::vector<int64_t> sizes = {7, 100000, 16384, 33};
  std::vector<std::vector<float>> grads;
  std::vector<DeviceBuffer> bufs;
  std::vector<GradSpan> cpu_spans, gpu_spans;
  for (size_t i = 0; i < sizes.size(); ++i) {
    grads.push_back(RoundTo(RandomNormal(sizes[i], 200 + i), dt()));  // the same values on both sides
    bufs.emplace_back(grads.back(), dt());
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    cpu_spans.push_back(GradSpan{grads[i].data(), sizes[i]});
    gpu_spans.push_back(GradSpan{bufs[i].get(), sizes[i]});
  }
  const float ref = kernels::GlobalGradNorm(cpu_, GradNormParams{DType::kF32, cpu_spans.data(), 4});
  const GradNormParams gp{dt(), gpu_spans.data(), 4};
  absl::StatusOr<float> a = cuda::GlobalGradNorm(ctx(), gp);
  absl::StatusOr<float> b = cuda::GlobalGradNorm(ctx(), gp);
  ASSERT_TRUE(a.ok() && b.ok());
  // Both sum squares in fp32 within 16K chunks and in double across: relative difference ~1e-6.
  EXPECT_NEAR(*a, ref, 1e-5 * ref);
  EXPECT_EQ(*a, *b) << "grad norm differs between two identical runs";
  absl::StatusOr<float> pre = cuda::ClipGradNorm(ctx(), gp, 1.0f);
  ASSERT_TRUE(pre.ok());
  EXPECT_EQ(*pre, *a);
  absl::StatusOr<float> after = cuda::GlobalGradNorm(ctx(), gp);
  ASSERT_TRUE(after.ok());
  // After clipping to 1 the norm is 1 (bf16 rounding of the scaled values: 2^-8 relative).
  EXPECT_NEAR(*after, 1.0f, dt() == DType::kF32 ? 1e-5 : 4e-3);
}

INSTANTIATE_TEST_SUITE_P(DTypes, MemoryBoundTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(DTypeName(i.param));
                         });

}  // namespace
}  // namespace lmf::kernels::cuda
