// The CPU reference of moe_route.h on hand-worked cases: selection with ties and groups, the gates of each
// kind, the dispatch plan with both drop policies, and the noise's dependence on the token index alone.
// (model/layers/moe/router_kernel_test checks it against the host router on random logits.)
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/moe_route/moe_route.h"

namespace lmf::kernels {
namespace {

const Context kCpu = Context::Cpu();

MoeRouterSpec Spec(MoeScoreKind kind, int64_t e, int64_t k) {
  MoeRouterSpec spec;
  spec.kind = kind, spec.E = e, spec.k = k;
  return spec;
}

TEST(MoeRouteTest, SoftmaxTopKTakesTheLargestProbabilitiesTiesToTheLowerIndex) {
  const std::vector<float> z = {0.5f, 2.0f, 0.5f, 1.0f, /* token 1: all equal */ 3, 3, 3, 3};
  std::vector<int32_t> experts(4);
  std::vector<float> gates(4);
  cpu::MoeRoute(kCpu, {Spec(MoeScoreKind::kSoftmaxTopK, 4, 2), 2, z.data(), nullptr, experts.data(), gates.data()});
  EXPECT_EQ(experts, (std::vector<int32_t>{1, 3, 0, 1}));
  const double sum = std::exp(0.5) * 2 + std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(gates[0], std::exp(2.0) / sum, 1e-7);
  EXPECT_NEAR(gates[1], std::exp(1.0) / sum, 1e-7);
  EXPECT_NEAR(gates[2], 0.25, 1e-7);
}

TEST(MoeRouteTest, TopKSoftmaxAndNormalisedSigmoidGatesWithRouteScale) {
  const std::vector<float> z = {0.0f, 1.0f, -1.0f, 2.0f};
  std::vector<int32_t> experts(2);
  std::vector<float> gates(2);
  MoeRouterSpec spec = Spec(MoeScoreKind::kTopKSoftmax, 4, 2);
  spec.route_scale = 2.0;
  cpu::MoeRoute(kCpu, {spec, 1, z.data(), nullptr, experts.data(), gates.data()});
  EXPECT_EQ(experts, (std::vector<int32_t>{3, 1}));
  EXPECT_NEAR(gates[0], 2.0 * std::exp(2.0) / (std::exp(2.0) + std::exp(1.0)), 1e-6);
  spec = Spec(MoeScoreKind::kSigmoidTopK, 4, 2);
  spec.normalize_gates = true, spec.route_scale = 2.5;
  cpu::MoeRoute(kCpu, {spec, 1, z.data(), nullptr, experts.data(), gates.data()});
  const double s3 = 1 / (1 + std::exp(-2.0)), s1 = 1 / (1 + std::exp(-1.0));
  EXPECT_NEAR(gates[0], 2.5 * s3 / (s3 + s1), 1e-6);
  EXPECT_NEAR(gates[1], 2.5 * s1 / (s3 + s1), 1e-6);
}

TEST(MoeRouteTest, GroupsScoreTheirTwoBestAndTheBiasChangesOnlyTheSelection) {
  // Group 0 = {0, 1}, group 1 = {2, 3}: expert 0 is the single best, but group 1's pair sums higher.
  const std::vector<float> z = {3.0f, -3.0f, 2.0f, 1.5f};
  MoeRouterSpec spec = Spec(MoeScoreKind::kTopKSoftmax, 4, 2);
  spec.n_groups = 2, spec.topk_groups = 1;
  std::vector<int32_t> experts(2);
  std::vector<float> gates(2);
  cpu::MoeRoute(kCpu, {spec, 1, z.data(), nullptr, experts.data(), gates.data()});
  EXPECT_EQ(experts, (std::vector<int32_t>{2, 3}));
  const std::vector<float> bias = {0.0f, 0.0f, -10.0f, 0.0f};  // group 1 now sums -6.5 < 0: group 0 wins
  std::vector<float> biased_gates(2);
  cpu::MoeRoute(kCpu, {spec, 1, z.data(), bias.data(), experts.data(), biased_gates.data()});
  EXPECT_EQ(experts, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(biased_gates[0], std::exp(3.0) / (std::exp(3.0) + std::exp(-3.0)), 1e-6) << "gates ignore the bias";
}

TEST(MoeRouteTest, DispatchPlanSortsByExpertAndDropsByPositionOrScore) {
  // N = 4 tokens, k = 2, E = 3, capacity 2: expert 0 is chosen by assignments 0, 2, 4, 6.
  const std::vector<int32_t> experts = {0, 1, 0, 2, 0, 1, 0, 2};
  const std::vector<float> gates = {0.1f, 0.9f, 0.7f, 0.3f, 0.7f, 0.2f, 0.8f, 0.5f};
  std::vector<int32_t> selected(3), counts(3), offsets(4), row_assignment(8), assignment_row(8);
  MoeDispatchPlanParams p{4, 3, 2, 2, false, experts.data(), gates.data(), selected.data(), counts.data(),
                          offsets.data(), row_assignment.data(), assignment_row.data(), nullptr};
  cpu::MoeDispatchPlan(kCpu, p);
  EXPECT_EQ(selected, (std::vector<int32_t>{4, 2, 2}));
  EXPECT_EQ(counts, (std::vector<int32_t>{2, 2, 2}));
  EXPECT_EQ(offsets, (std::vector<int32_t>{0, 2, 4, 6}));
  EXPECT_EQ(std::vector<int32_t>(row_assignment.begin(), row_assignment.begin() + 6),
            (std::vector<int32_t>{0, 2, 1, 5, 3, 7}));
  EXPECT_EQ(assignment_row, (std::vector<int32_t>{0, 2, 1, 4, -1, 3, -1, 5}));
  p.drop_by_score = true;  // expert 0 keeps gates 0.8 (a 6) and the earlier of the two 0.7s (a 2)
  cpu::MoeDispatchPlan(kCpu, p);
  EXPECT_EQ(std::vector<int32_t>(row_assignment.begin(), row_assignment.begin() + 2), (std::vector<int32_t>{2, 6}));
  EXPECT_EQ(assignment_row[0], -1);
  EXPECT_EQ(assignment_row[4], -1);
}

TEST(MoeRouteTest, NoiseDependsOnTheTokenIndexNotOnTheCall) {
  constexpr int64_t kN = 6, kE = 5;
  std::vector<float> zn(kN * kE, 0.3f), whole(kN * kE, 1.0f), eps(kN * kE), split(kN * kE, 1.0f), eps2(kN * kE);
  cpu::MoeGatingNoise(kCpu, {kN, kE, 7, 3, 1, 10, zn.data(), eps.data(), whole.data()});
  cpu::MoeGatingNoise(kCpu, {2, kE, 7, 3, 1, 10, zn.data(), eps2.data(), split.data()});
  cpu::MoeGatingNoise(kCpu, {4, kE, 7, 3, 1, 12, zn.data() + 2 * kE, eps2.data() + 2 * kE, split.data() + 2 * kE});
  EXPECT_EQ(eps, eps2);
  EXPECT_EQ(whole, split);
  double mean = 0;
  for (float v : eps) mean += v;
  EXPECT_LT(std::fabs(mean / eps.size()), 0.6) << "standard normals";
  EXPECT_NEAR(whole[0], 1.0 + eps[0] * std::log1p(std::exp(0.3)), 1e-6);
}

}  // namespace
}  // namespace lmf::kernels
