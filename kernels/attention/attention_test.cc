// Attention: for GQA + causal, MQA + mask, MHA over several query/key blocks, and causal + mask, the
// tiled and plain forwards and the backward match PyTorch (float64); the backward matches central
// differences; the two CS336 SDPA snapshots (3-D and 4-D with masks) match at their tolerance; q/k/v read
// in place from a fused qkv buffer give the same result.
#include "kernels/attention/attention.h"

#include <cmath>

#include "base/shared_data.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/fixture.h"

namespace lmf::kernels {
namespace {

using testing::AllClose;

// fp32 dot products of length HS <= 16 and softmax sums over <= 70 keys, against float64: 2e-5 relative
// and 2e-6 absolute (outputs and gradients are O(1), elements near zero get the absolute part).
constexpr double kRtol = 2e-5, kAtol = 2e-6;

struct Case {
  int64_t B, T, S, NH, NKV, HS;
  bool causal, masked;
};

Case ReadCase(const testing::Fixture& f, const std::string& name) {
  auto d = f.npz().Get(name + "_dims");
  LMF_CHECK(d.ok()) << d.status();
  auto v = (*d)->ToInt64();
  return Case{v[0], v[1], v[2], v[3], v[4], v[5], v[6] != 0, v[7] != 0};
}

class AttentionFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(AttentionFixture, ForwardBothAlgorithmsAndBackwardMatchPyTorch) {
  testing::Fixture f("kernels/testdata/attention.npz");
  const std::string name = GetParam();
  const Case c = ReadCase(f, name);
  auto q = f.F(name + "_q", c.B * c.T * c.NH * c.HS), k = f.F(name + "_k", c.B * c.S * c.NKV * c.HS);
  auto v = f.F(name + "_v", c.B * c.S * c.NKV * c.HS), dout = f.F(name + "_dout", c.B * c.T * c.NH * c.HS);
  std::vector<int32_t> mask_values;
  std::vector<uint8_t> mask;
  if (c.masked) {
    mask_values = f.I(name + "_mask", c.B * c.NH * c.T * c.S);
    mask.assign(mask_values.begin(), mask_values.end());
  }
  Context ctx = Context::Cpu();
  for (AttentionAlgorithm algorithm : {AttentionAlgorithm::kTiled, AttentionAlgorithm::kPlain}) {
    const std::string what = name + (algorithm == AttentionAlgorithm::kTiled ? " tiled" : " plain");
    std::vector<float> out(q.size()), lse(c.B * c.NH * c.T), dq(q.size()), dk(k.size()), dv(v.size());
    AttentionParams p = ContiguousAttentionParams(c.B, c.T, c.S, c.NH, c.NKV, c.HS, c.causal, q.data(),
                                                  k.data(), v.data(), out.data(), lse.data());
    p.algorithm = algorithm;
    if (c.masked) {
      p.mask = mask.data(), p.mask_stride_b = c.NH * c.T * c.S, p.mask_stride_h = c.T * c.S,
      p.mask_stride_t = c.S;
    }
    AttentionForward(ctx, p);
    EXPECT_TRUE(AllClose(what + " out", out, f.F(name + "_out"), kRtol, kAtol));
    EXPECT_TRUE(AllClose(what + " lse", lse, f.F(name + "_lse"), kRtol, kAtol));
    for (AttentionBackwardSchedule schedule :
         {AttentionBackwardSchedule::kPerKvHead, AttentionBackwardSchedule::kKeysThenQueries}) {
      const std::string how =
          what + (schedule == AttentionBackwardSchedule::kPerKvHead ? " per-kv-head" : " keys-then-queries");
      std::fill(dq.begin(), dq.end(), 9.0f);
      std::fill(dk.begin(), dk.end(), 9.0f);
      std::fill(dv.begin(), dv.end(), 9.0f);
      AttentionBackwardParams b{p, dout.data(), dq.data(), dk.data(), dv.data(), schedule};
      AttentionBackward(ctx, b);
      EXPECT_TRUE(AllClose(how + " dq (written over 9s)", dq, f.F(name + "_dq"), kRtol, kAtol));
      EXPECT_TRUE(AllClose(how + " dk (written over 9s)", dk, f.F(name + "_dk"), kRtol, kAtol));
      EXPECT_TRUE(AllClose(how + " dv (written over 9s)", dv, f.F(name + "_dv"), kRtol, kAtol));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionFixture,
                         ::testing::Values("gqa_causal", "mqa_masked", "mha_causal_long",
                                           "gqa_causal_masked"));

TEST(Attention, BackwardMatchesCentralDifferences) {
  const int64_t B = 1, T = 6, NH = 2, NKV = 1, HS = 4;
  auto q = testing::RandomNormal(B * T * NH * HS, 1), k = testing::RandomNormal(B * T * NKV * HS, 2);
  auto v = testing::RandomNormal(B * T * NKV * HS, 3), r = testing::RandomNormal(B * T * NH * HS, 4);
  std::vector<float> out(q.size()), lse(B * NH * T);
  Context ctx = Context::Cpu();
  auto params = [&] {
    return ContiguousAttentionParams(B, T, T, NH, NKV, HS, true, q.data(), k.data(), v.data(), out.data(),
                                     lse.data());
  };
  auto loss = [&] {
    AttentionForward(ctx, params());
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * r[i];
    return s;
  };
  loss();
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  AttentionBackward(ctx, {params(), r.data(), dq.data(), dk.data(), dv.data()});
  // h = 1e-2 in fp32 on a loss of O(1): noise ~1e-5 / 1e-2, truncation O(h^2); formula errors are O(1).
  EXPECT_TRUE(testing::CheckGradient("dq", q, loss, dq, 1e-2, 1e-2, 1e-3));
  EXPECT_TRUE(testing::CheckGradient("dk", k, loss, dk, 1e-2, 1e-2, 1e-3));
  EXPECT_TRUE(testing::CheckGradient("dv", v, loss, dv, 1e-2, 1e-2, 1e-3));
}

// A sliding window is the mask that hides keys u <= t - window: the window gives what that mask tensor gives
// (itself checked against PyTorch above), over several query and key blocks, causal or not, windows of 1,
// within a block, across blocks and beyond T, for both forwards and both backward schedules. The window
// skips blocks the mask computes as all -inf, which adds exact zeros, so the results are bitwise the same.
TEST(Attention, SlidingWindowEqualsItsMask) {
  const int64_t B = 2, NH = 4, NKV = 2, HS = 8;
  Context ctx = Context::Cpu();
  for (const bool causal : {true, false}) {
    const int64_t T = causal ? 70 : 45, S = 70;
    auto q = testing::RandomNormal(B * T * NH * HS, 11), k = testing::RandomNormal(B * S * NKV * HS, 12);
    auto v = testing::RandomNormal(B * S * NKV * HS, 13), dout = testing::RandomNormal(B * T * NH * HS, 14);
    // 2, 60 and 66 put the last query that sees a key block first in a query block (blocks of 64).
    for (const int64_t window : {1, 2, 5, 33, 60, 66, 100}) {
      std::vector<uint8_t> mask(T * S);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t u = 0; u < S; ++u) mask[t * S + u] = u > t - window;
      }
      for (AttentionAlgorithm algorithm : {AttentionAlgorithm::kTiled, AttentionAlgorithm::kPlain}) {
        for (AttentionBackwardSchedule schedule :
             {AttentionBackwardSchedule::kPerKvHead, AttentionBackwardSchedule::kKeysThenQueries}) {
          SCOPED_TRACE(::testing::Message()
                       << "causal " << causal << " window " << window << " algorithm "
                       << static_cast<int>(algorithm) << " schedule " << static_cast<int>(schedule));
          std::vector<float> out[2], lse[2], dq[2], dk[2], dv[2];
          for (int with_mask = 0; with_mask < 2; ++with_mask) {
            out[with_mask].assign(q.size(), 0), lse[with_mask].assign(B * NH * T, 0);
            dq[with_mask].assign(q.size(), 9), dk[with_mask].assign(k.size(), 9),
                dv[with_mask].assign(v.size(), 9);
            AttentionParams p =
                ContiguousAttentionParams(B, T, S, NH, NKV, HS, causal, q.data(), k.data(), v.data(),
                                          out[with_mask].data(), lse[with_mask].data());
            p.algorithm = algorithm;
            if (with_mask) {
              p.mask = mask.data(), p.mask_stride_t = S;  // broadcast over batch and heads
            } else {
              p.window = window;
            }
            AttentionForward(ctx, p);
            AttentionBackward(ctx, {p, dout.data(), dq[with_mask].data(), dk[with_mask].data(),
                                    dv[with_mask].data(), schedule});
          }
          EXPECT_EQ(out[0], out[1]);
          EXPECT_EQ(lse[0], lse[1]);
          EXPECT_EQ(dq[0], dq[1]);
          EXPECT_EQ(dk[0], dk[1]);
          EXPECT_EQ(dv[0], dv[1]);
        }
      }
    }
  }
}

// Logit soft-capping: both forwards against the definition computed in double (scores of a few units capped
// at 2, so the tanh bends every score), over two query and key blocks, GQA, causal; the backward (both
// schedules) against central differences.
TEST(Attention, SoftCapMatchesItsDefinitionAndCentralDifferences) {
  const int64_t B = 1, T = 70, NH = 2, NKV = 1, HS = 8;
  const float cap = 2.0f;
  auto q = testing::RandomNormal(B * T * NH * HS, 21), k = testing::RandomNormal(B * T * NKV * HS, 22);
  auto v = testing::RandomNormal(B * T * NKV * HS, 23);
  for (float& x : q) x *= 2.0f;  // scores of a few units: the cap matters
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> want_out(q.size()), want_lse(B * NH * T);
  for (int64_t h = 0; h < NH; ++h) {
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> s(t + 1);
      double mx = -INFINITY;
      for (int64_t u = 0; u <= t; ++u) {
        double dot = 0;
        for (int64_t d = 0; d < HS; ++d) dot += double{q[(t * NH + h) * HS + d]} * k[u * HS + d];
        s[u] = cap * std::tanh(scale * dot / cap);
        mx = std::max(mx, s[u]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      want_lse[h * T + t] = mx + std::log(sum);
      for (int64_t u = 0; u <= t; ++u) {
        for (int64_t d = 0; d < HS; ++d) want_out[(t * NH + h) * HS + d] += s[u] / sum * v[u * HS + d];
      }
    }
  }
  Context ctx = Context::Cpu();
  std::vector<float> out(q.size()), lse(B * NH * T);
  auto params = [&](AttentionAlgorithm algorithm) {
    AttentionParams p = ContiguousAttentionParams(B, T, T, NH, NKV, HS, true, q.data(), k.data(), v.data(),
                                                  out.data(), lse.data());
    p.softcap = cap, p.algorithm = algorithm;
    return p;
  };
  for (AttentionAlgorithm algorithm : {AttentionAlgorithm::kTiled, AttentionAlgorithm::kPlain}) {
    AttentionForward(ctx, params(algorithm));
    EXPECT_TRUE(
        AllClose("softcap out", out, std::vector<float>(want_out.begin(), want_out.end()), kRtol, kAtol));
    EXPECT_TRUE(
        AllClose("softcap lse", lse, std::vector<float>(want_lse.begin(), want_lse.end()), kRtol, kAtol));
  }
  auto r = testing::RandomNormal(q.size(), 24);
  auto loss = [&] {
    AttentionForward(ctx, params(AttentionAlgorithm::kTiled));
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * r[i];
    return s;
  };
  for (AttentionBackwardSchedule schedule :
       {AttentionBackwardSchedule::kPerKvHead, AttentionBackwardSchedule::kKeysThenQueries}) {
    loss();
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    AttentionBackward(
        ctx, {params(AttentionAlgorithm::kTiled), r.data(), dq.data(), dk.data(), dv.data(), schedule});
    // As BackwardMatchesCentralDifferences: h = 1e-2 on a loss of O(1).
    EXPECT_TRUE(testing::CheckGradient("softcap dq", q, loss, dq, 1e-2, 1e-2, 1e-3));
    EXPECT_TRUE(testing::CheckGradient("softcap dk", k, loss, dk, 1e-2, 1e-2, 1e-3));
    EXPECT_TRUE(testing::CheckGradient("softcap dv", v, loss, dv, 1e-2, 1e-2, 1e-3));
  }
}

TEST(Attention, FusedQkvBufferEqualsSeparateTensors) {
  const int64_t B = 2, T = 40, NH = 4, NKV = 2, HS = 8;
  const int64_t W = (NH + 2 * NKV) * HS;  // one row of the fused projection: [q | k | v]
  auto qkv = testing::RandomNormal(B * T * W, 5);
  std::vector<float> q(B * T * NH * HS), k(B * T * NKV * HS), v(B * T * NKV * HS);
  for (int64_t bt = 0; bt < B * T; ++bt) {
    for (int64_t i = 0; i < NH * HS; ++i) q[bt * NH * HS + i] = qkv[bt * W + i];
    for (int64_t i = 0; i < NKV * HS; ++i) {
      k[bt * NKV * HS + i] = qkv[bt * W + NH * HS + i];
      v[bt * NKV * HS + i] = qkv[bt * W + (NH + NKV) * HS + i];
    }
  }
  Context ctx = Context::Cpu();
  std::vector<float> out1(q.size()), out2(q.size()), lse(B * NH * T);
  AttentionForward(ctx, ContiguousAttentionParams(B, T, T, NH, NKV, HS, true, q.data(), k.data(), v.data(),
                                                  out1.data(), lse.data()));
  AttentionParams p = ContiguousAttentionParams(B, T, T, NH, NKV, HS, true, qkv.data(), qkv.data() + NH * HS,
                                                qkv.data() + (NH + NKV) * HS, out2.data(), lse.data());
  p.q_stride_b = p.k_stride_b = p.v_stride_b = T * W;
  p.q_stride_t = p.k_stride_t = p.v_stride_t = W;
  AttentionForward(ctx, p);
  EXPECT_EQ(out1, out2);
}

// CS336 scaled_dot_product_attention(q, k, v, mask): q (4, 12, 64), k/v (4, 16, 64), mask True = attend.
void RunCs336(bool four_d) {
  LMF_SHARED_DATA_OR_SKIP(inputs_path, "cs336/derived/a1_test_inputs.npz");
  const std::string snap =
      four_d ? "test_4d_scaled_dot_product_attention" : "test_scaled_dot_product_attention";
  LMF_SHARED_DATA_OR_SKIP(snapshot_path, "cs336/assignment1-basics/tests/_snapshots/" + snap + ".npz");
  testing::Fixture inputs(inputs_path), snapshot(snapshot_path);
  const int64_t T = 12, S = 16, HS = 64;
  auto q = inputs.F("q", 4 * T * HS), k = inputs.F("k", 4 * S * HS), v = inputs.F("v", 4 * S * HS);
  auto m = inputs.I("mask", 4 * T * S);
  std::vector<uint8_t> mask(m.begin(), m.end());
  std::vector<float> out(q.size()), lse(4 * T);
  // 3-D: batch 4, one head. 4-D: "(batch head)" split into (2, 2); memory is (batch, head, time, HS).
  const int64_t B = four_d ? 2 : 4, NH = four_d ? 2 : 1;
  AttentionParams p;
  p.B = B, p.T = T, p.S = S, p.NH = NH, p.NKV = NH, p.HS = HS, p.scale = 1.0f / std::sqrt(64.0f);
  p.q = q.data(), p.q_stride_b = NH * T * HS, p.q_stride_h = T * HS, p.q_stride_t = HS;
  p.k = k.data(), p.k_stride_b = NH * S * HS, p.k_stride_h = S * HS, p.k_stride_t = HS;
  p.v = v.data(), p.v_stride_b = NH * S * HS, p.v_stride_h = S * HS, p.v_stride_t = HS;
  p.out = out.data(), p.out_stride_b = NH * T * HS, p.out_stride_h = T * HS, p.out_stride_t = HS;
  p.lse = lse.data();
  p.mask = mask.data(), p.mask_stride_b = NH * T * S, p.mask_stride_h = T * S, p.mask_stride_t = S;
  Context ctx = Context::Cpu();
  AttentionForward(ctx, p);
  // The snapshot test's rule: assert_allclose(actual, expected, atol=1e-5) (rtol numpy's default 1e-7).
  EXPECT_TRUE(
      AllClose("cs336 " + snap, out, snapshot.F("array", static_cast<int64_t>(out.size())), 1e-7, 1e-5));
}

TEST(Attention, MatchesCs336Snapshot3d) { RunCs336(false); }
TEST(Attention, MatchesCs336Snapshot4d) { RunCs336(true); }

}  // namespace
}  // namespace lmf::kernels

namespace lmf::kernels {
namespace {

TEST(AttentionDeathTest, KvHeadsMustDivideHeadsAndLseIsRequired) {
  std::vector<float> x(2 * 3 * 4 * 8), out(x.size()), lse(2 * 3 * 4);
  Context ctx = Context::Cpu();
  AttentionParams p =
      ContiguousAttentionParams(2, 4, 4, 3, 2, 8, true, x.data(), x.data(), x.data(), out.data(), lse.data());
  EXPECT_DEATH(AttentionForward(ctx, p), "NKV=2 does not divide NH=3");
  p.NKV = 3, p.lse = nullptr;
  EXPECT_DEATH(AttentionForward(ctx, p), "lse buffer");
}

TEST(Attention, FullyMaskedQueryGivesZeroOutputAndGradients) {
  const int64_t T = 3, HS = 4;
  auto q = testing::RandomNormal(T * HS, 1), k = testing::RandomNormal(T * HS, 2),
       v = testing::RandomNormal(T * HS, 3);
  std::vector<uint8_t> mask = {1, 1, 1, 0, 0, 0, 1, 0, 1};  // query 1 sees nothing
  std::vector<float> out(T * HS), lse(T), dq(T * HS), dk(T * HS), dv(T * HS);
  auto dout = testing::RandomNormal(T * HS, 4);
  Context ctx = Context::Cpu();
  for (AttentionAlgorithm algorithm : {AttentionAlgorithm::kTiled, AttentionAlgorithm::kPlain}) {
    AttentionParams p = ContiguousAttentionParams(1, T, T, 1, 1, HS, false, q.data(), k.data(), v.data(),
                                                  out.data(), lse.data());
    p.algorithm = algorithm, p.mask = mask.data(), p.mask_stride_t = T;
    AttentionForward(ctx, p);
    EXPECT_EQ(lse[1], -INFINITY);
    for (int64_t d = 0; d < HS; ++d) EXPECT_EQ(out[HS + d], 0.0f);
    for (float o : out) EXPECT_TRUE(std::isfinite(o));
    AttentionBackward(ctx, {p, dout.data(), dq.data(), dk.data(), dv.data()});
    for (int64_t d = 0; d < HS; ++d) EXPECT_EQ(dq[HS + d], 0.0f);
    for (float g : dk) EXPECT_TRUE(std::isfinite(g));
  }
}

}  // namespace
}  // namespace lmf::kernels

namespace lmf::kernels {
namespace {

TEST(Attention, ResultsDoNotDependOnTheThreadCount) {
  const int64_t B = 2, T = 100, NH = 4, NKV = 2, HS = 16;
  auto q = testing::RandomNormal(B * T * NH * HS, 31), k = testing::RandomNormal(B * T * NKV * HS, 32);
  auto v = testing::RandomNormal(B * T * NKV * HS, 33), dout = testing::RandomNormal(B * T * NH * HS, 34);
  ThreadPool one(1), three(3);
  std::vector<std::vector<float>> results;
  for (ThreadPool* pool : {&one, &three}) {
    for (AttentionBackwardSchedule schedule :
         {AttentionBackwardSchedule::kPerKvHead, AttentionBackwardSchedule::kKeysThenQueries}) {
      Context ctx = Context::Cpu(pool);
      std::vector<float> out(q.size()), lse(B * NH * T), dq(q.size()), dk(k.size()), dv(v.size());
      AttentionParams p = ContiguousAttentionParams(B, T, T, NH, NKV, HS, true, q.data(), k.data(), v.data(),
                                                    out.data(), lse.data());
      AttentionForward(ctx, p);
      AttentionBackward(ctx, {p, dout.data(), dq.data(), dk.data(), dv.data(), schedule});
      for (auto* r : {&out, &lse, &dq, &dk, &dv}) results.push_back(*r);
    }
  }
  // Every work item computes the same tiles in the same order whatever thread runs it: bitwise equal.
  const size_t per_run = 5, runs_per_pool = 2;
  for (size_t i = 0; i < per_run * runs_per_pool; ++i)
    EXPECT_EQ(results[i], results[i + per_run * runs_per_pool]) << i;
}

// The AVX-512 tiles of the small GEMMs (kernels/cpu/isa.h) do each element's FMA chain as the AVX2 tiles
// do: forward and backward are bitwise the same under both, at head sizes that take every tile width (8:
// the AVX2 8-column tile only; 24: 16 + 8; 64 and 80: 64, 64 + 16), with tails (T = 100: a partial
// block), GQA, a mask, a window and a soft-cap.
TEST(Attention, Avx512AndAvx2GiveBitwiseTheSameResults) {
  if (!vec::CpuHasAvx512()) GTEST_SKIP() << "this CPU has no AVX-512: only the AVX2 forms can run";
  const int64_t B = 2, T = 100, NH = 4, NKV = 2;
  std::vector<uint8_t> mask(T * T);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = (i * 7919) % 11 != 0;
  for (const int64_t HS : {8, 24, 64, 80}) {
    for (int variant = 0; variant < 3; ++variant) {  // plain causal; mask + window; not causal + soft-cap
      SCOPED_TRACE(::testing::Message() << "HS " << HS << " variant " << variant);
      auto q = testing::RandomNormal(B * T * NH * HS, 41), k = testing::RandomNormal(B * T * NKV * HS, 42);
      auto v = testing::RandomNormal(B * T * NKV * HS, 43), dout = testing::RandomNormal(B * T * NH * HS, 44);
      std::vector<float> results[2][5];
      for (const bool avx512 : {false, true}) {
        const bool before = vec::SetUseAvx512ForTesting(avx512);
        EXPECT_EQ(vec::UseAvx512(), avx512);
        std::vector<float> out(q.size()), lse(B * NH * T), dq(q.size()), dk(k.size()), dv(v.size());
        AttentionParams p = ContiguousAttentionParams(B, T, T, NH, NKV, HS, variant != 2, q.data(), k.data(),
                                                      v.data(), out.data(), lse.data());
        if (variant == 1) {
          p.mask = mask.data();  // broadcast over batch and heads
          p.mask_stride_t = T;
          p.window = 40;
        }
        if (variant == 2) p.softcap = 1.5f;
        Context ctx = Context::Cpu();
        AttentionForward(ctx, p);
        AttentionBackward(ctx, {p, dout.data(), dq.data(), dk.data(), dv.data()});
        vec::SetUseAvx512ForTesting(before);
        int i = 0;
        for (auto* r : {&out, &lse, &dq, &dk, &dv}) results[avx512][i++] = *r;
      }
      for (int i = 0; i < 5; ++i) EXPECT_EQ(results[0][i], results[1][i]) << "result " << i;
    }
  }
}

TEST(Attention, SupportedAnswersPerBackendDTypeAndHeadSize) {
  EXPECT_TRUE(AttentionSupported(Device::Cpu(), DType::kF32, 48));  // the CPU kernels take any head size
  EXPECT_TRUE(AttentionSupported(Device::Cpu(), DType::kBF16, 24));  // bf16 storage, the same fp32 kernels
  EXPECT_FALSE(AttentionSupported(Device::Cpu(), DType::kF16, 64));
  EXPECT_FALSE(AttentionSupported(Device::Cpu(), DType::kF32, 0));
#if LMF_WITH_CUDA
  EXPECT_TRUE(AttentionSupported(Device::Cuda(0), DType::kBF16, 64));
  EXPECT_TRUE(AttentionSupported(Device::Cuda(0), DType::kBF16, 128));
  EXPECT_FALSE(AttentionSupported(Device::Cuda(0), DType::kBF16, 32));  // tensor-core kernels: 64 and 128
  EXPECT_TRUE(AttentionSupported(Device::Cuda(0), DType::kF32, 32));
  EXPECT_FALSE(AttentionSupported(Device::Cuda(0), DType::kF32, 96));
#else
  EXPECT_FALSE(AttentionSupported(Device::Cuda(0), DType::kBF16, 64));  // no CUDA backend in this binary
#endif
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

// Causal GQA with q, k, v (and their gradients) strided inside fused buffers, as the model lays them out.
TEST(AttentionBf16, StridedGqaForwardAndBackwardWithinTheNaiveBf16Bounds) {
  const int64_t B = 2, T = 70, NH = 4, NKV = 2, HS = 24, row = (NH + 2 * NKV) * HS;
  const auto qkv = RandomNormal(B * T * row, 1), dout = RandomNormal(B * T * NH * HS, 2);
  auto run = [&](DType dt, bool round) {
    DTypeBuffer in(round ? RoundToBF16(qkv) : qkv, dt), d(round ? RoundToBF16(dout) : dout, dt),
        out(B * T * NH * HS, dt), grad(B * T * row, dt);
    std::vector<float> lse(B * NH * T);
    const size_t es = DTypeSize(dt);
    char* base = static_cast<char*>(in.data());
    char* gbase = static_cast<char*>(grad.data());
    AttentionParams p;
    p.dtype = dt, p.B = B, p.T = T, p.S = T, p.NH = NH, p.NKV = NKV, p.HS = HS, p.scale = 1.0f / std::sqrt(24.0f);
    p.causal = true;
    p.q = base, p.k = base + es * NH * HS, p.v = base + es * (NH + NKV) * HS;
    p.q_stride_b = p.k_stride_b = p.v_stride_b = T * row, p.q_stride_t = p.k_stride_t = p.v_stride_t = row;
    p.q_stride_h = p.k_stride_h = p.v_stride_h = HS;
    p.out = out.data(), p.out_stride_b = T * NH * HS, p.out_stride_t = NH * HS, p.out_stride_h = HS;
    p.lse = lse.data();
    const Context ctx = Context::Cpu();
    AttentionForward(ctx, p);
    AttentionBackwardParams bp;
    bp.forward = p;
    bp.dout = d.data(), bp.dq = gbase, bp.dk = gbase + es * NH * HS, bp.dv = gbase + es * (NH + NKV) * HS;
    AttentionBackward(ctx, bp);
    return std::vector<std::vector<float>>{out.ToFloats(), lse, grad.ToFloats()};
  };
  const auto ref = run(DType::kF32, false), naive = run(DType::kF32, true), bf16 = run(DType::kBF16, false);
  // The CPU keeps P and dS in fp32 (the CUDA kernel stores them in bf16 and gets 3x for the gradients), so
  // 2x holds for every output here.
  EXPECT_TRUE(WithinBf16Tolerance("out", bf16[0], ref[0], RoundToBF16(naive[0]), 2));
  EXPECT_TRUE(WithinBf16Tolerance("lse (fp32)", bf16[1], ref[1], naive[1], 2));
  EXPECT_TRUE(WithinBf16Tolerance("dq|dk|dv", bf16[2], ref[2], RoundToBF16(naive[2]), 2));
}

}  // namespace
}  // namespace lmf::kernels
