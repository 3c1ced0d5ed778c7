// The CUDA router (moe_route.h) against its CPU reference on the same random inputs: noise, selection and
// gates for every score kind (with groups, a bias, route_scale), the dispatch plan with both drop policies,
// the losses per micro-batch and per sequence, and the gradient. N = 36 tokens (3 sequences of 12), E = 8,
// k = 2 or 3. Tagged gpu: skips without a device; CI runs it on the CUDA emulation.
// Tolerances: selections, counts and the plan exactly (integers; the plan's inputs are the same on both);
// gates, eps and probabilities 2e-6 relative (the device's expf and double log/cos are within a few ulps of
// the host's; the emulation, on host libm, agrees bitwise); the losses 1e-6 relative (double sums of those);
// dlogits 1e-5 of the largest (fp32 sums of E terms).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/moe_route/moe_route.h"
#include "kernels/testing/compare.h"

namespace lmf::kernels::cuda {
namespace {

using ::lmf::kernels::testing::RandomNormal;
using testing::CloseF32;
using testing::DeviceBuffer;

constexpr int64_t kS = 3, kL = 12, kN = kS * kL, kE = 8;

std::vector<int32_t> Ints(const DeviceBuffer& b) {
  std::vector<int32_t> out(static_cast<size_t>(b.size()));
  std::vector<uint8_t> bytes = b.Bytes();
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

struct Variant {
  std::string name;
  MoeRouterSpec spec;
  bool bias = false;
};

std::vector<Variant> Variants() {
  std::vector<Variant> v(3);
  v[0].name = "softmax_topk", v[0].spec.kind = MoeScoreKind::kSoftmaxTopK, v[0].spec.E = kE, v[0].spec.k = 2;
  v[1].name = "topk_softmax_k3", v[1].spec.kind = MoeScoreKind::kTopKSoftmax, v[1].spec.E = kE, v[1].spec.k = 3;
  v[1].spec.route_scale = 1.5;
  v[2].name = "sigmoid_grouped_bias", v[2].spec.kind = MoeScoreKind::kSigmoidTopK, v[2].spec.E = kE;
  v[2].spec.k = 2, v[2].spec.normalize_gates = true, v[2].spec.route_scale = 2.5, v[2].spec.n_groups = 4;
  v[2].spec.topk_groups = 2, v[2].bias = true;
  return v;
}

class MoeRouteCudaTest : public testing::GpuTest, public ::testing::WithParamInterface<Variant> {
 protected:
  const Context cpu_ = Context::Cpu();
};

TEST_P(MoeRouteCudaTest, NoisySelectionGatesPlanLossesAndGradientMatchTheCpu) {
  const MoeRouterSpec spec = GetParam().spec;
  const int64_t k = spec.k, nk = kN * k;
  std::vector<float> z = RandomNormal(kN * kE, 41), zn = RandomNormal(kN * kE, 42, 0.5f);
  const std::vector<float> bias = RandomNormal(kE, 43, 0.1f), dgates = RandomNormal(nk, 44);
  // Noise: the CPU's and the device's eps and noisy logits.
  std::vector<float> eps(kN * kE);
  DeviceBuffer gz(z, DType::kF32), gzn(zn, DType::kF32), geps(kN * kE, DType::kF32);
  cpu::MoeGatingNoise(cpu_, {kN, kE, 1234, 5, 2, 40, zn.data(), eps.data(), z.data()});
  ASSERT_TRUE(cuda::MoeGatingNoise(ctx(), {kN, kE, 1234, 5, 2, 40, gzn.as<float>(), geps.as<float>(), gz.as<float>()}).ok());
  EXPECT_TRUE(CloseF32("eps", geps.ToFloats(), eps, 2e-6, 1e-7));
  EXPECT_TRUE(CloseF32("noisy logits", gz.ToFloats(), z, 2e-6, 1e-7));
  DeviceBuffer exact_z(z, DType::kF32);  // the CPU's noisy logits, so the selections below see equal inputs
  // Selection and gates.
  std::vector<int32_t> experts(nk);
  std::vector<float> gates(nk);
  const float* b = GetParam().bias ? bias.data() : nullptr;
  cpu::MoeRoute(cpu_, {spec, kN, z.data(), b, experts.data(), gates.data()});
  DeviceBuffer gbias(bias, DType::kF32), gexperts(nk, DType::kI32), ggates(nk, DType::kF32);
  ASSERT_TRUE(cuda::MoeRoute(ctx(), {spec, kN, exact_z.as<float>(), b != nullptr ? gbias.as<float>() : nullptr,
                                     gexperts.as<int32_t>(), ggates.as<float>()}).ok());
  EXPECT_EQ(Ints(gexperts), experts);
  EXPECT_TRUE(CloseF32("gates", ggates.ToFloats(), gates, 2e-6, 1e-7));
  // The plan, dropless and at capacity 5 (some experts drop) by position and by score.
  for (const int64_t capacity : {nk, int64_t{5}}) {
    for (const bool by_score : {false, true}) {
      std::vector<int32_t> sel(kE), counts(kE), offsets(kE + 1), rows(nk, -7), slots(nk);
      cpu::MoeDispatchPlan(cpu_, {kN, kE, k, capacity, by_score, experts.data(), gates.data(), sel.data(),
                                  counts.data(), offsets.data(), rows.data(), slots.data(), nullptr});
      DeviceBuffer gsel(kE, DType::kI32), gcounts(kE, DType::kI32), goffsets(kE + 1, DType::kI32);
      DeviceBuffer grows(nk, DType::kI32), gslots(nk, DType::kI32), gscratch(nk + kE + 1, DType::kI32);
      DeviceBuffer cpu_gates(gates, DType::kF32), cpu_experts = DeviceBuffer::Ints(experts);
      ASSERT_TRUE(cuda::MoeDispatchPlan(ctx(), {kN, kE, k, capacity, by_score, cpu_experts.as<int32_t>(),
                                                cpu_gates.as<float>(), gsel.as<int32_t>(), gcounts.as<int32_t>(),
                                                goffsets.as<int32_t>(), grows.as<int32_t>(), gslots.as<int32_t>(),
                                                gscratch.as<int32_t>()}).ok());
      const std::string what = "capacity " + std::to_string(capacity) + (by_score ? " by score" : " by position");
      EXPECT_EQ(Ints(gsel), sel) << what;
      EXPECT_EQ(Ints(gcounts), counts) << what;
      EXPECT_EQ(Ints(goffsets), offsets) << what;
      EXPECT_EQ(Ints(gslots), slots) << what;
      const std::vector<int32_t> got_rows = Ints(grows);
      EXPECT_EQ(std::vector<int32_t>(got_rows.begin(), got_rows.begin() + offsets[kE]),
                std::vector<int32_t>(rows.begin(), rows.begin() + offsets[kE])) << what;
      if (capacity < nk) {
        EXPECT_LT(offsets[kE], nk) << "the case should drop";
      }
    }
  }
  // The losses and the gradient, per sequence and per micro-batch.
  DeviceBuffer cpu_experts = DeviceBuffer::Ints(experts), gdgates(dgates, DType::kF32);
  for (const int64_t segments : {int64_t{1}, kS}) {
    const int64_t length = kN / segments;
    std::vector<float> probs(kN * kE), dlogits(kN * kE);
    std::vector<double> sums(kN + segments * kE), losses(2);
    std::vector<int32_t> seg_counts(segments * kE);
    cpu::MoeRouterLoss(cpu_, {spec, segments, length, 0.01, 0.001, z.data(), experts.data(), losses.data(),
                              probs.data(), sums.data()});
    DeviceBuffer gprobs(kN * kE, DType::kF32), gdlogits(kN * kE, DType::kF32), gseg(segments * kE, DType::kI32);
    DeviceBuffer glosses(4, DType::kF32), gsums(2 * (kN + segments * kE), DType::kF32);  // doubles in fp32 pairs
    ASSERT_TRUE(cuda::MoeRouterLoss(ctx(), {spec, segments, length, 0.01, 0.001, exact_z.as<float>(),
                                            cpu_experts.as<int32_t>(), glosses.as<double>(), gprobs.as<float>(),
                                            gsums.as<double>()}).ok());
    std::vector<double> got_losses(2);
    const std::vector<uint8_t> bytes = glosses.Bytes();
    std::memcpy(got_losses.data(), bytes.data(), 2 * sizeof(double));
    EXPECT_NEAR(got_losses[0], losses[0], 1e-6 * std::fabs(losses[0])) << "balance, segments " << segments;
    EXPECT_NEAR(got_losses[1], losses[1], 1e-6 * std::fabs(losses[1])) << "z, segments " << segments;
    EXPECT_GT(losses[0], 0);
    EXPECT_GT(losses[1], 0);
    cpu::MoeRouteBackward(cpu_, {spec, segments, length, 0.01, 0.001, z.data(), experts.data(), dgates.data(),
                                 dlogits.data(), seg_counts.data()});
    ASSERT_TRUE(cuda::MoeRouteBackward(ctx(), {spec, segments, length, 0.01, 0.001, exact_z.as<float>(),
                                               cpu_experts.as<int32_t>(), gdgates.as<float>(), gdlogits.as<float>(),
                                               gseg.as<int32_t>()}).ok());
    double largest = 0;
    for (float v : dlogits) largest = std::max(largest, std::fabs(double{v}));
    EXPECT_TRUE(CloseF32("dlogits", gdlogits.ToFloats(), dlogits, 1e-5, 1e-5 * largest));
  }
  // The noise's backward.
  std::vector<float> dzn(kN * kE);
  const std::vector<float> dz = RandomNormal(kN * kE, 45);
  cpu::MoeGatingNoiseBackward(cpu_, {kN, kE, zn.data(), eps.data(), dz.data(), dzn.data()});
  DeviceBuffer gdz(dz, DType::kF32), gdzn(kN * kE, DType::kF32), cpu_eps(eps, DType::kF32);
  ASSERT_TRUE(cuda::MoeGatingNoiseBackward(ctx(), {kN, kE, gzn.as<float>(), cpu_eps.as<float>(), gdz.as<float>(),
                                                   gdzn.as<float>()}).ok());
  EXPECT_TRUE(CloseF32("dnoise_logits", gdzn.ToFloats(), dzn, 2e-6, 1e-7));
  Sync();
}

TEST(MoeRouteCudaArgs, TooManyExpertsAndBadGroupsAreRefused) {
  MoeRouteParams p;
  p.spec.E = kMaxRouteExperts + 1, p.spec.k = 2;
  EXPECT_EQ(cuda::MoeRoute(Context::Cpu(), p).code(), absl::StatusCode::kInvalidArgument);
  p.spec.E = 8, p.spec.n_groups = 3;
  EXPECT_EQ(cuda::MoeRoute(Context::Cpu(), p).code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Kinds, MoeRouteCudaTest, ::testing::ValuesIn(Variants()),
                         [](const ::testing::TestParamInfo<Variant>& info) { return info.param.name; });

}  // namespace
}  // namespace lmf::kernels::cuda
