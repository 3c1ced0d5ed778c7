// FlashAttention-2 CUDA kernels against the CPU attention (the fp32 reference): q/k/v read in place from a
// fused (B, T, (NH + 2 NKV) HS) buffer, GQA, causal and not, HS 64 and 128, T not a multiple of the tiles,
// more or fewer keys than queries (S != T), a mask with a fully masked row, bitwise determinism of the
// backward; bf16 tensor-core kernels and the fp32 CUDA-core ones, and the Hopper (wgmma) forward and
// backward variants on an sm_90 device. Skips without a CUDA device.
//
// bf16 tolerance (STYLE.md, as flash-attention's own tests): the kernel's max error against the fp32 CPU
// result may be at most 2x (forward) / 3x (gradients) the error of a plain bf16 computation of the same
// attention, done here on the CPU the way a bf16 framework does it: bf16 inputs, fp32 accumulation, and
// every matrix product and the softmax output rounded to bf16 (S, P, O; dP, dS, dQ, dK, dV).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/attention.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/testing/compare.h"

namespace lmf::kernels::cuda {
namespace {

using ::lmf::kernels::testing::RandomNormal;
using testing::DeviceBuffer;
using testing::MaxAbsDiff;
using testing::RoundToBF16;
using testing::WithinBf16Tolerance;

float R(float x) { return BF16ToFloat(FloatToBF16(x)); }

struct Geometry {
  int64_t B, T, NH, NKV, HS;
  bool causal;
  int64_t S = 0;  // keys; 0: S = T
  int64_t window = 0;  // sliding window (0: none)
  float softcap = 0;   // logit soft-cap (0: none)
  int64_t keys() const { return S > 0 ? S : T; }
  int64_t rows() const { return std::max(T, keys()); }   // fused rows per batch: q reads T of them, k/v S
  int64_t width() const { return (NH + 2 * NKV) * HS; }  // fused row
  AttentionParams Params(const void* qkv, void* out, float* lse, size_t elem) const {
    AttentionParams p;
    p.B = B, p.T = T, p.S = keys(), p.NH = NH, p.NKV = NKV, p.HS = HS, p.causal = causal, p.window = window;
    p.softcap = softcap;
    p.scale = 1.0f / std::sqrt(static_cast<float>(HS));
    const char* base = static_cast<const char*>(qkv);
    p.q = base, p.k = base + NH * HS * elem, p.v = base + (NH + NKV) * HS * elem;
    p.q_stride_b = p.k_stride_b = p.v_stride_b = rows() * width();
    p.q_stride_t = p.k_stride_t = p.v_stride_t = width();
    p.q_stride_h = p.k_stride_h = p.v_stride_h = HS;
    p.out = out, p.out_stride_b = T * NH * HS, p.out_stride_t = NH * HS, p.out_stride_h = HS;
    p.lse = lse;
    return p;
  }
};

// The plain bf16 computation (see the file comment), over the same fused layout; dqkv is written.
void NaiveBf16Attention(const Geometry& g, const std::vector<uint8_t>* mask, const std::vector<float>& qkv,
                        const std::vector<float>& dout, std::vector<float>& out, std::vector<float>& lse,
                        std::vector<float>& dqkv) {
  const int64_t T = g.T, S = g.keys(), rows = g.rows(), HS = g.HS, W = g.width(), G = g.NH / g.NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  out.assign(g.B * T * g.NH * HS, 0.0f), lse.assign(g.B * g.NH * T, 0.0f), dqkv.assign(qkv.size(), 0.0f);
  std::vector<float> P(T * S), dP(T * S);
  for (int64_t b = 0; b < g.B; ++b) {
    for (int64_t h = 0; h < g.NH; ++h) {
      const int64_t kvh = h / G;
      auto q = [&](int64_t t, int64_t d) { return qkv[(b * rows + t) * W + h * HS + d]; };
      auto k = [&](int64_t u, int64_t d) { return qkv[(b * rows + u) * W + (g.NH + kvh) * HS + d]; };
      auto v = [&](int64_t u, int64_t d) { return qkv[(b * rows + u) * W + (g.NH + g.NKV + kvh) * HS + d]; };
      auto hidden = [&](int64_t t, int64_t u) {
        return (g.causal && u > t) || (g.window > 0 && u <= t - g.window) ||
               (mask != nullptr && (*mask)[t * S + u] == 0);
      };
      for (int64_t t = 0; t < T; ++t) {
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t u = 0; u < S; ++u) {
          float s = 0;
          for (int64_t d = 0; d < HS; ++d) s += q(t, d) * k(u, d);
          const float x = R(R(s) * scale);
          P[t * S + u] = hidden(t, u)    ? -std::numeric_limits<float>::infinity()
                         : g.softcap > 0 ? R(g.softcap * std::tanh(x / g.softcap))
                                         : x;
          mx = std::max(mx, P[t * S + u]);
        }
        double sum = 0;
        for (int64_t u = 0; u < S; ++u) sum += std::isinf(P[t * S + u]) ? 0.0 : std::exp(P[t * S + u] - mx);
        lse[(b * g.NH + h) * T + t] =
            sum > 0 ? static_cast<float>(mx + std::log(sum)) : -std::numeric_limits<float>::infinity();
        for (int64_t u = 0; u < S; ++u)
          P[t * S + u] = (sum > 0 && !std::isinf(P[t * S + u]))
                             ? R(static_cast<float>(std::exp(P[t * S + u] - mx) / sum))
                             : 0.0f;
        for (int64_t d = 0; d < HS; ++d) {
          float o = 0;
          for (int64_t u = 0; u < S; ++u) o += P[t * S + u] * v(u, d);
          out[((b * T + t) * g.NH + h) * HS + d] = R(o);
        }
      }
      // Backward.
      auto dO = [&](int64_t t, int64_t d) { return dout[((b * T + t) * g.NH + h) * HS + d]; };
      for (int64_t t = 0; t < T; ++t) {
        float D = 0;
        for (int64_t d = 0; d < HS; ++d) D += dO(t, d) * out[((b * T + t) * g.NH + h) * HS + d];
        for (int64_t u = 0; u < S; ++u) {
          float dp = 0;
          for (int64_t d = 0; d < HS; ++d) dp += dO(t, d) * v(u, d);
          float ds = P[t * S + u] * (R(dp) - D);
          if (g.softcap > 0) {  // the cap's derivative at the (recomputed) score
            float s = 0;
            for (int64_t d = 0; d < HS; ++d) s += q(t, d) * k(u, d);
            const float th = std::tanh(R(R(s) * scale) / g.softcap);
            ds *= 1.0f - th * th;
          }
          dP[t * S + u] = R(ds);  // dS
        }
        for (int64_t d = 0; d < HS; ++d) {
          float dq = 0;
          for (int64_t u = 0; u < S; ++u) dq += dP[t * S + u] * k(u, d);
          dqkv[(b * rows + t) * W + h * HS + d] = R(dq * scale);
        }
      }
      for (int64_t u = 0; u < S; ++u) {
        for (int64_t d = 0; d < HS; ++d) {
          float dk = 0, dv = 0;
          for (int64_t t = 0; t < T; ++t) dk += dP[t * S + u] * q(t, d), dv += P[t * S + u] * dO(t, d);
          // GQA: sum the group's contributions (each rounded, as a framework summing per-head grads would).
          dqkv[(b * rows + u) * W + (g.NH + kvh) * HS + d] =
              R(dqkv[(b * rows + u) * W + (g.NH + kvh) * HS + d] + R(dk * scale));
          dqkv[(b * rows + u) * W + (g.NH + g.NKV + kvh) * HS + d] =
              R(dqkv[(b * rows + u) * W + (g.NH + g.NKV + kvh) * HS + d] + R(dv));
        }
      }
    }
  }
}

class AttentionTest : public testing::GpuTest, public ::testing::WithParamInterface<std::tuple<int, bool>> {};

// dt kBF16: the plain-bf16 rule above. dt kF32 (the CUDA-core kernels): within rtol 1e-4, atol 2e-5 of the
// CPU result; both compute in fp32, in different orders, and the gradients pass through dP - D, a difference
// of O(1) terms, so absolute errors of a few 1e-6 are expected.
// `wgmma`: the forward is AttentionForwardVariant::kWgmma. `backward`: the backward variant; with
// kWgmmaDkDv its dq must also be bitwise the FA2 backward's (the same dq kernel on the same inputs), with
// kWgmma its dk and dv bitwise kWgmmaDkDv's (the same dk/dv kernel).
void RunAndCompare(const Context& gctx, const Geometry& g, const std::vector<uint8_t>* mask, uint64_t seed,
                   DType dt = DType::kBF16, bool wgmma = false,
                   AttentionBackwardVariant backward = AttentionBackwardVariant::kMmaSync) {
  Context cpu = Context::Cpu();
  const int64_t n_qkv = g.B * g.rows() * g.width(), n_out = g.B * g.T * g.NH * g.HS, n_lse = g.B * g.NH * g.T;
  const auto qkv = RandomNormal(n_qkv, seed), dout = RandomNormal(n_out, seed + 1);
  // fp32 CPU reference on the unrounded inputs.
  std::vector<float> out(n_out), lse(n_lse), dqkv(n_qkv, 0.0f);
  AttentionParams p = g.Params(qkv.data(), out.data(), lse.data(), sizeof(float));
  if (mask != nullptr) p.mask = mask->data(), p.mask_stride_t = g.keys();
  kernels::AttentionForward(cpu, p);
  AttentionBackwardParams bp;
  bp.forward = p, bp.dout = dout.data();
  bp.dq = dqkv.data(), bp.dk = dqkv.data() + g.NH * g.HS, bp.dv = dqkv.data() + (g.NH + g.NKV) * g.HS;
  kernels::AttentionBackward(cpu, bp);
  // Plain bf16 computation on rounded inputs.
  std::vector<float> nout, nlse, ndqkv;
  if (dt == DType::kBF16) NaiveBf16Attention(g, mask, RoundToBF16(qkv), RoundToBF16(dout), nout, nlse, ndqkv);

  const size_t es = DTypeSize(dt);
  DeviceBuffer gqkv(qkv, dt), gdout(dout, dt), gout(n_out, dt), glse(n_lse, DType::kF32);
  DeviceBuffer gdqkv(n_qkv, dt), gdqkv2(n_qkv, dt);
  DeviceBuffer gmask =
      mask ? DeviceBuffer::Ints(std::vector<int32_t>((mask->size() + 3) / 4)) : DeviceBuffer();
  if (mask != nullptr) cudaMemcpy(gmask.get(), mask->data(), mask->size(), cudaMemcpyHostToDevice);
  AttentionParams gp = g.Params(gqkv.get(), gout.get(), glse.as<float>(), es);
  gp.dtype = dt;
  if (mask != nullptr) gp.mask = gmask.as<uint8_t>(), gp.mask_stride_t = g.keys();
  absl::Status s = wgmma ? cuda::AttentionForwardWithVariant(gctx, gp, AttentionForwardVariant::kWgmma)
                         : cuda::AttentionForward(gctx, gp);
  ASSERT_TRUE(s.ok()) << s;
  AttentionBackwardParams gbp;
  gbp.forward = gp, gbp.dout = gdout.get();
  auto set_grads = [&](DeviceBuffer& buf) {
    char* base = buf.as<char>();
    gbp.dq = base, gbp.dk = base + g.NH * g.HS * es, gbp.dv = base + (g.NH + g.NKV) * g.HS * es;
  };
  set_grads(gdqkv);
  s = cuda::AttentionBackwardWithVariant(gctx, gbp, backward);
  ASSERT_TRUE(s.ok()) << s;
  set_grads(gdqkv2);
  ASSERT_TRUE(cuda::AttentionBackwardWithVariant(gctx, gbp, backward).ok());
  if (backward == AttentionBackwardVariant::kWgmmaDkDv) {
    DeviceBuffer gdqkv3(n_qkv, dt);
    set_grads(gdqkv3);
    ASSERT_TRUE(cuda::AttentionBackward(gctx, gbp).ok());
    const std::vector<float> a = gdqkv.ToFloats(), b = gdqkv3.ToFloats();
    int64_t dq_differs = 0;
    for (int64_t r = 0; r < g.B * g.rows(); ++r)
      for (int64_t i = 0; i < g.NH * g.HS; ++i) {
        const float x = a[r * g.width() + i], y = b[r * g.width() + i];
        dq_differs += !(x == y || (std::isnan(x) && std::isnan(y)));
      }
    EXPECT_EQ(dq_differs, 0) << "wgmma dk/dv backward: dq not bitwise the FA2 backward's";
  }
  if (backward == AttentionBackwardVariant::kWgmma) {
    DeviceBuffer gdqkv3(n_qkv, dt);
    set_grads(gdqkv3);
    ASSERT_TRUE(cuda::AttentionBackwardWithVariant(gctx, gbp, AttentionBackwardVariant::kWgmmaDkDv).ok());
    const std::vector<float> a = gdqkv.ToFloats(), b = gdqkv3.ToFloats();
    int64_t dkdv_differs = 0;
    for (int64_t r = 0; r < g.B * g.rows(); ++r)
      for (int64_t i = g.NH * g.HS; i < g.width(); ++i) {
        const float x = a[r * g.width() + i], y = b[r * g.width() + i];
        dkdv_differs += !(x == y || (std::isnan(x) && std::isnan(y)));
      }
    EXPECT_EQ(dkdv_differs, 0) << "wgmma backward: dk, dv not bitwise the wgmma dk/dv backward's";
  }

  EXPECT_EQ(gdqkv.Bytes(), gdqkv2.Bytes()) << "attention backward differs between two identical runs";
  // Fused rows past T (the q columns) or past S (the k, v columns) hold no gradient: the kernels must leave
  // them alone (the buffer's NaN poison stays); both references have 0 there.
  std::vector<float> kd = gdqkv.ToFloats();
  int64_t written_outside = 0;
  for (int64_t b = 0; b < g.B; ++b) {
    for (int64_t r = 0; r < g.rows(); ++r) {
      for (int64_t i = 0; i < g.width(); ++i) {
        if (r < (i < g.NH * g.HS ? g.T : g.keys())) continue;
        float& x = kd[(b * g.rows() + r) * g.width() + i];
        written_outside += !std::isnan(x);
        x = 0;
      }
    }
  }
  EXPECT_EQ(written_outside, 0) << "attention backward wrote fused rows outside dq, dk, dv";
  if (dt == DType::kF32) {
    std::vector<float> kl = glse.ToFloats();
    for (int64_t i = 0; i < n_lse; ++i) {
      if (std::isinf(lse[i])) {
        EXPECT_TRUE(std::isinf(kl[i]) && kl[i] < 0) << "lse[" << i << "] = " << kl[i];
        kl[i] = lse[i];
      }
    }
    EXPECT_TRUE(testing::CloseF32("f32 attention out", gout.ToFloats(), out, 1e-4, 2e-5));
    EXPECT_TRUE(testing::CloseF32("f32 attention lse", kl, lse, 1e-4, 2e-5));
    EXPECT_TRUE(testing::CloseF32("f32 attention dqkv", kd, dqkv, 1e-4, 2e-5));
    return;
  }
  EXPECT_TRUE(WithinBf16Tolerance("attention out", gout.ToFloats(), out, nout, 2.0, 1e-5));
  // lse: -inf rows must match exactly; the rest by the rule.
  std::vector<float> kl = glse.ToFloats(), rl = lse, nl = nlse;
  for (int64_t i = 0; i < n_lse; ++i) {
    if (std::isinf(rl[i])) {
      EXPECT_TRUE(std::isinf(kl[i]) && kl[i] < 0) << "lse[" << i << "] = " << kl[i] << ", expected -inf";
      kl[i] = rl[i] = nl[i] = 0;
    }
  }
  EXPECT_TRUE(WithinBf16Tolerance("attention lse", kl, rl, nl, 2.0, 1e-5));
  // dq|dk|dv interleaved in the fused buffer: one comparison covers all three (the 3x rule per element max).
  EXPECT_TRUE(WithinBf16Tolerance("attention dqkv", kd, dqkv, ndqkv, 3.0, 1e-5));
}

TEST_P(AttentionTest, GqaFromFusedQkvMatchesCpu) {
  const auto [hs, causal] = GetParam();
  RunAndCompare(ctx(), Geometry{2, 200, 4, 2, hs, causal}, nullptr, 100 + hs + causal);
}

TEST_P(AttentionTest, MultiQueryWithMaskAndAFullyMaskedRow) {
  const auto [hs, causal] = GetParam();
  const int64_t T = 77;
  std::vector<uint8_t> mask(T * T, 1);
  for (int64_t u = 0; u < T; ++u) mask[5 * T + u] = 0;  // query 5 sees nothing
  for (int64_t t = 0; t < T; ++t) mask[t * T + 3] = 0;  // key 3 hidden from everyone
  RunAndCompare(ctx(), Geometry{1, T, 4, 1, hs, causal}, &mask, 300 + hs + causal);
}

// Sliding windows: 40 keys over 150 (tiles crossing the window's edge and tiles wholly before it), 2 (the
// last query to see key block 0 starts query block 64) and 1.
TEST_P(AttentionTest, SlidingWindowMatchesCpu) {
  const auto [hs, causal] = GetParam();
  Geometry g{1, 150, 4, 2, hs, causal};
  for (int64_t window : {40, 2, 1}) {
    SCOPED_TRACE(window);
    g.window = window;
    RunAndCompare(ctx(), g, nullptr, 900 + hs + causal + window);
  }
}

// Logit soft-capping at 1.5 (the scores of these inputs are a few units: the tanh bends all of them), with
// and without a window.
TEST_P(AttentionTest, SoftCapMatchesCpu) {
  const auto [hs, causal] = GetParam();
  Geometry g{1, 100, 4, 2, hs, causal};
  g.softcap = 1.5f;
  RunAndCompare(ctx(), g, nullptr, 950 + hs + causal);
  g.window = 30;
  RunAndCompare(ctx(), g, nullptr, 960 + hs + causal);
}

// S != T (cross-attention shapes; causal stays top-left aligned): keys the queries never reach get zero
// dk/dv; queries past S see every key. Neither count is a multiple of a tile.
TEST_P(AttentionTest, MoreAndFewerKeysThanQueriesMatchCpu) {
  const auto [hs, causal] = GetParam();
  RunAndCompare(ctx(), Geometry{2, 70, 4, 2, hs, causal, /*S=*/150}, nullptr, 800 + hs + causal);
  RunAndCompare(ctx(), Geometry{1, 150, 4, 1, hs, causal, /*S=*/70}, nullptr, 900 + hs + causal);
  RunAndCompare(ctx(), Geometry{1, 70, 4, 2, hs, causal, /*S=*/150}, nullptr, 1000 + hs + causal,
                DType::kF32);
}

TEST_P(AttentionTest, LdmatrixForwardVariantIsBitwiseTheSame) {
  const auto [hs, causal] = GetParam();
  const Geometry g{2, 200, 4, 2, hs, causal};
  const int64_t n_out = g.B * g.T * g.NH * g.HS, n_lse = g.B * g.NH * g.T;
  DeviceBuffer qkv(RandomNormal(g.B * g.T * g.width(), 700 + hs), DType::kBF16);
  DeviceBuffer out1(n_out, DType::kBF16), out2(n_out, DType::kBF16), lse1(n_lse, DType::kF32),
      lse2(n_lse, DType::kF32);
  AttentionParams p = g.Params(qkv.get(), out1.get(), lse1.as<float>(), 2);
  p.dtype = DType::kBF16;
  ASSERT_TRUE(cuda::AttentionForward(ctx(), p).ok());
  p.out = out2.get(), p.lse = lse2.as<float>();
  const absl::Status s = cuda::AttentionForwardWithVariant(ctx(), p, AttentionForwardVariant::kLdmatrixV);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out1.Bytes(), out2.Bytes()) << "ldmatrix variant: different output";
  EXPECT_EQ(lse1.Bytes(), lse2.Bytes()) << "ldmatrix variant: different lse";
}

// Whether the device runs the sm_90a code of the wgmma forward (compute capability exactly 9.0).
bool IsSm90(const Context& ctx) {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx.device.index);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ctx.device.index);
  return major == 9 && minor == 0;
}

// The Hopper forward (wgmma) on the shapes above: fused GQA, MQA with a mask and a fully masked row, more and
// fewer keys than queries; the same tolerance rule as the mma.sync forward (it is not bitwise the same). Its
// blocks are two warpgroups of 64 queries: T = 200 and 77 leave the last block's upper warpgroup partly
// valid, T = 150 and 300 entirely past T (300: after 5 key steps of the lower one), T = 50 too in the only
// block.
TEST_P(AttentionTest, WgmmaForwardMatchesCpu) {
  if (!IsSm90(ctx())) GTEST_SKIP() << "the wgmma forward needs an sm_90 (H100/H200) device";
  const auto [hs, causal] = GetParam();
  RunAndCompare(ctx(), Geometry{2, 200, 4, 2, hs, causal}, nullptr, 1100 + hs + causal, DType::kBF16, true);
  const int64_t T = 77;
  std::vector<uint8_t> mask(T * T, 1);
  for (int64_t u = 0; u < T; ++u) mask[5 * T + u] = 0;  // query 5 sees nothing
  for (int64_t t = 0; t < T; ++t) mask[t * T + 3] = 0;  // key 3 hidden from everyone
  RunAndCompare(ctx(), Geometry{1, T, 4, 1, hs, causal}, &mask, 1200 + hs + causal, DType::kBF16, true);
  RunAndCompare(ctx(), Geometry{2, 70, 4, 2, hs, causal, /*S=*/150}, nullptr, 1300 + hs + causal,
                DType::kBF16, true);
  RunAndCompare(ctx(), Geometry{1, 150, 4, 1, hs, causal, /*S=*/70}, nullptr, 1400 + hs + causal,
                DType::kBF16, true);
  RunAndCompare(ctx(), Geometry{1, 300, 4, 2, hs, causal}, nullptr, 1500 + hs + causal, DType::kBF16, true);
  RunAndCompare(ctx(), Geometry{2, 50, 2, 1, hs, causal}, nullptr, 1600 + hs + causal, DType::kBF16, true);
  // A window of 40 over 300: tiles before a block's window skipped, the upper warpgroup joining a step later.
  Geometry windowed{1, 300, 4, 2, hs, causal};
  windowed.window = 40;
  RunAndCompare(ctx(), windowed, nullptr, 1700 + hs + causal, DType::kBF16, true);
}

// The wgmma backward variants on the forward's shapes, after the FA2 forward: dq, dk, dv by the same tolerance
// rule as the mma.sync backward (not bitwise); the checks per variant are in RunAndCompare.
void RunWgmmaBackwardShapes(const Context& ctx, int64_t hs, bool causal, AttentionBackwardVariant variant) {
  RunAndCompare(ctx, Geometry{2, 200, 4, 2, hs, causal}, nullptr, 1500 + hs + causal, DType::kBF16, false,
                variant);
  const int64_t T = 77;
  std::vector<uint8_t> mask(T * T, 1);
  for (int64_t u = 0; u < T; ++u) mask[5 * T + u] = 0;  // query 5 sees nothing
  for (int64_t t = 0; t < T; ++t) mask[t * T + 3] = 0;  // key 3 hidden from everyone
  RunAndCompare(ctx, Geometry{1, T, 4, 1, hs, causal}, &mask, 1600 + hs + causal, DType::kBF16, false, variant);
  RunAndCompare(ctx, Geometry{2, 70, 4, 2, hs, causal, /*S=*/150}, nullptr, 1700 + hs + causal, DType::kBF16,
                false, variant);
  RunAndCompare(ctx, Geometry{1, 150, 4, 1, hs, causal, /*S=*/70}, nullptr, 1800 + hs + causal, DType::kBF16,
                false, variant);
  // Logit soft-capping at 1.5: the cap's derivative recovered from P and the lse.
  Geometry capped{1, 100, 4, 2, hs, causal};
  capped.softcap = 1.5f;
  RunAndCompare(ctx, capped, nullptr, 1900 + hs + causal, DType::kBF16, false, variant);
  // A window of 40 over 300: key tiles (dq) and query blocks (dk/dv) outside it skipped.
  Geometry windowed{1, 300, 4, 2, hs, causal};
  windowed.window = 40;
  RunAndCompare(ctx, windowed, nullptr, 2000 + hs + causal, DType::kBF16, false, variant);
}

// The Hopper dk/dv kernel (wgmma) with FA2's dq kernel: dq bitwise the FA2 backward's.
TEST_P(AttentionTest, WgmmaBackwardMatchesCpu) {
  if (!IsSm90(ctx())) GTEST_SKIP() << "the wgmma dk/dv backward needs an sm_90 (H100/H200) device";
  const auto [hs, causal] = GetParam();
  RunWgmmaBackwardShapes(ctx(), hs, causal, AttentionBackwardVariant::kWgmmaDkDv);
}

// The whole backward on wgmma (the wgmma dq kernel with the dk/dv one): dk and dv bitwise kWgmmaDkDv's.
TEST_P(AttentionTest, WgmmaWholeBackwardMatchesCpu) {
  if (!IsSm90(ctx())) GTEST_SKIP() << "the wgmma backward needs an sm_90 (H100/H200) device";
  const auto [hs, causal] = GetParam();
  RunWgmmaBackwardShapes(ctx(), hs, causal, AttentionBackwardVariant::kWgmma);
}

TEST_P(AttentionTest, Fp32CudaCoreKernelsMatchCpu) {
  const auto [hs, causal] = GetParam();
  RunAndCompare(ctx(), Geometry{2, 200, 4, 2, hs, causal}, nullptr, 500 + hs + causal, DType::kF32);
  const int64_t T = 77;
  std::vector<uint8_t> mask(T * T, 1);
  for (int64_t u = 0; u < T; ++u) mask[5 * T + u] = 0;
  RunAndCompare(ctx(), Geometry{1, T, 4, 1, hs, causal}, &mask, 600 + hs + causal, DType::kF32);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Combine(::testing::Values(64, 128), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<int, bool>>& i) {
                           return "hs" + std::to_string(std::get<0>(i.param)) +
                                  (std::get<1>(i.param) ? "_causal" : "_full");
                         });

class AttentionLimitsTest : public testing::GpuTest {};

TEST_F(AttentionLimitsTest, UnsupportedHeadSizeAndDtypeAreReported) {
  Geometry g{1, 16, 2, 2, 96, false};
  DeviceBuffer qkv(g.B * g.T * g.width(), DType::kBF16), out(g.B * g.T * g.NH * g.HS, DType::kBF16),
      lse(32, DType::kF32);
  AttentionParams p = g.Params(qkv.get(), out.get(), lse.as<float>(), 2);
  p.dtype = DType::kBF16;
  EXPECT_EQ(cuda::AttentionForward(ctx(), p).code(), absl::StatusCode::kUnimplemented);
  p.HS = 64, p.dtype = DType::kF16;
  EXPECT_EQ(cuda::AttentionForward(ctx(), p).code(), absl::StatusCode::kUnimplemented);
}

TEST_F(AttentionLimitsTest, WgmmaForwardIsRefusedInF32AndOffHopper) {
  Geometry g{1, 16, 2, 2, 64, false};
  DeviceBuffer qkv(g.B * g.T * g.width(), DType::kBF16), out(g.B * g.T * g.NH * g.HS, DType::kBF16),
      lse(32, DType::kF32);
  AttentionParams p = g.Params(qkv.get(), out.get(), lse.as<float>(), 2);
  EXPECT_EQ(cuda::AttentionForwardWithVariant(ctx(), p, AttentionForwardVariant::kWgmma).code(),
            absl::StatusCode::kUnimplemented);  // f32
  if (IsSm90(ctx())) GTEST_SKIP() << "sm_90 device: the bf16 wgmma forward runs (WgmmaForwardMatchesCpu)";
  p.dtype = DType::kBF16;
  EXPECT_EQ(cuda::AttentionForwardWithVariant(ctx(), p, AttentionForwardVariant::kWgmma).code(),
            absl::StatusCode::kUnimplemented);
}

// Both wgmma backwards (dk/dv only, and whole).
TEST_F(AttentionLimitsTest, WgmmaBackwardIsRefusedInF32AndOffHopper) {
  Geometry g{1, 16, 2, 2, 64, false};
  DeviceBuffer qkv(g.B * g.T * g.width(), DType::kBF16), out(g.B * g.T * g.NH * g.HS, DType::kBF16),
      lse(32, DType::kF32), grads(g.B * g.T * g.width(), DType::kBF16);
  AttentionParams p = g.Params(qkv.get(), out.get(), lse.as<float>(), 2);
  AttentionBackwardParams bp;
  bp.forward = p, bp.dout = out.get(), bp.dq = grads.get(), bp.dk = grads.get(), bp.dv = grads.get();
  for (const AttentionBackwardVariant v :
       {AttentionBackwardVariant::kWgmmaDkDv, AttentionBackwardVariant::kWgmma})
    EXPECT_EQ(cuda::AttentionBackwardWithVariant(ctx(), bp, v).code(), absl::StatusCode::kUnimplemented)
        << "f32, variant " << static_cast<int>(v);
  if (IsSm90(ctx())) GTEST_SKIP() << "sm_90 device: the bf16 wgmma backwards run (Wgmma*BackwardMatchesCpu)";
  bp.forward.dtype = DType::kBF16;
  for (const AttentionBackwardVariant v :
       {AttentionBackwardVariant::kWgmmaDkDv, AttentionBackwardVariant::kWgmma})
    EXPECT_EQ(cuda::AttentionBackwardWithVariant(ctx(), bp, v).code(), absl::StatusCode::kUnimplemented)
        << "off sm_90, variant " << static_cast<int>(v);
}

TEST_F(AttentionLimitsTest, NoKeysAndGridsBeyondCudaLimitsAreInvalidArguments) {
  Geometry g{1, 16, 2, 2, 64, false};
  DeviceBuffer qkv(g.B * g.T * g.width(), DType::kBF16), out(g.B * g.T * g.NH * g.HS, DType::kBF16),
      lse(32, DType::kF32);
  AttentionParams p = g.Params(qkv.get(), out.get(), lse.as<float>(), 2);
  p.dtype = DType::kBF16;
  p.S = 0;  // checked before any memory is touched, as are the sizes below
  EXPECT_EQ(cuda::AttentionForward(ctx(), p).code(), absl::StatusCode::kInvalidArgument);
  p.S = g.T, p.B = 70000;  // gridDim.z <= 65535
  EXPECT_EQ(cuda::AttentionForward(ctx(), p).code(), absl::StatusCode::kInvalidArgument);
  p.B = 1, p.NH = p.NKV = 70000;  // gridDim.y <= 65535
  EXPECT_EQ(cuda::AttentionForward(ctx(), p).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lmf::kernels::cuda
