// The device router's CPU reference (kernels/moe_route, the code its CUDA kernels run per token) against the
// host router (router.h) and dispatcher (dispatch.h) the CPU layer uses: on random logits for every router
// kind, with and without normalised gates, groups and the selection bias, capacity dropping by position and
// by score, both balancing scopes, the z-loss, the gradient and noisy gating.
// Exact: the selections, the plan and the noise (the same arithmetic in the same order). Gates and dlogits
// within 2 fp32 ulps relative (1e-6 of the largest dlogit for near-zero ones), the losses 1e-12 relative:
// both round where router.cc rounds, so they agree bitwise in practice; the tolerance only states what the
// contract is.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/moe_route/moe_route.h"
#include "kernels/testing/compare.h"
#include "model/layers/moe/dispatch.h"
#include "model/layers/moe/router.h"

namespace lmf::model::moe {
namespace {

using kernels::testing::RandomNormal;

constexpr int64_t kB = 3, kT = 11, kN = kB * kT, kE = 8;
const kernels::Context kCpu = kernels::Context::Cpu();

std::vector<MoeSpec> Specs() {
  std::vector<MoeSpec> specs;
  for (RouterKind kind : {RouterKind::kSoftmaxTopK, RouterKind::kTopKSoftmax, RouterKind::kSigmoidTopK}) {
    for (int variant = 0; variant < 3; ++variant) {
      MoeSpec s;
      s.n_experts = kE, s.top_k = variant == 2 ? 3 : 2, s.router = kind;
      s.normalize_gates = variant >= 1, s.route_scale = variant == 1 ? 2.5 : 1.0;
      if (variant == 1) s.n_groups = 4, s.topk_groups = 2, s.expert_bias = true;
      s.capacity_factor = variant == 0 ? 0.0 : 0.8;
      s.drop = variant == 2 ? DropPolicy::kByScore : DropPolicy::kByPosition;
      s.aux_loss = 0.01, s.router_z_loss = 0.001;
      s.aux_loss_scope = variant == 2 ? BalanceScope::kSequence : BalanceScope::kMicroBatch;
      specs.push_back(s);
    }
  }
  return specs;
}

void ExpectUlps(const std::string& what, const std::vector<float>& got, const std::vector<float>& want, double atol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_LE(std::fabs(double{got[i]} - want[i]), 2.4e-7 * std::fabs(double{want[i]}) + atol) << what << " " << i;
  }
}

TEST(RouterKernelTest, TheDeviceRoutersReferenceRoutesAsTheHostRouter) {
  int case_index = 0;
  for (const MoeSpec& spec : Specs()) {
    SCOPED_TRACE("case " + std::to_string(case_index++) + ": " + RouterKindName(spec.router));
    const int64_t k = spec.top_k, nk = kN * k;
    const kernels::MoeRouterSpec device = DeviceRouterSpec(spec);
    std::vector<float> z = RandomNormal(kN * kE, 10 + case_index), zn = RandomNormal(kN * kE, 50 + case_index, 0.5f);
    const std::vector<float> bias = RandomNormal(kE, 90, 0.1f), dgates = RandomNormal(nk, 91);
    const float* b = spec.expert_bias ? bias.data() : nullptr;
    // Noisy logits: the host's H and the kernel's.
    std::vector<float> eps(kN * kE), host_eps(kN * kE), h = z, host_h = z;
    kernels::cpu::MoeGatingNoise(kCpu, {kN, kE, 99, 4, 3, 17, zn.data(), eps.data(), h.data()});
    GatingNoise(99, 4, 3, 17, kN, kE, host_eps.data());
    AddGatingNoise(kN, kE, zn.data(), host_eps.data(), host_h.data());
    ASSERT_EQ(eps, host_eps);
    ASSERT_EQ(h, host_h);
    // Selection, gates, plan.
    std::vector<int32_t> experts(nk), host_experts(nk);
    std::vector<float> gates(nk), host_gates(nk);
    kernels::cpu::MoeRoute(kCpu, {device, kN, h.data(), b, experts.data(), gates.data()});
    Route(spec, kN, h.data(), b, host_experts.data(), host_gates.data());
    ASSERT_EQ(experts, host_experts);
    ExpectUlps("gates", gates, host_gates, 0);
    Dispatch dispatch;
    BuildDispatch(spec, kN, host_experts.data(), host_gates.data(), dispatch);
    std::vector<int32_t> selected(kE), counts(kE), offsets(kE + 1), rows(nk), slots(nk);
    kernels::cpu::MoeDispatchPlan(kCpu, {kN, kE, k, ExpertCapacity(spec, kN), spec.drop == DropPolicy::kByScore,
                                         experts.data(), gates.data(), selected.data(), counts.data(), offsets.data(),
                                         rows.data(), slots.data(), nullptr});
    for (int64_t i = 0; i < kE; ++i) {
      EXPECT_EQ(counts[i], dispatch.counts[i]) << i;
      EXPECT_EQ(offsets[i], dispatch.offsets[i]) << i;
    }
    EXPECT_EQ(offsets[kE], dispatch.rows());
    EXPECT_EQ(slots, dispatch.assignment_row);
    EXPECT_EQ(std::vector<int32_t>(rows.begin(), rows.begin() + offsets[kE]),
              std::vector<int32_t>(dispatch.row_assignment.begin(), dispatch.row_assignment.begin() + dispatch.rows()));
    if (spec.capacity_factor > 0) {
      EXPECT_GT(dispatch.dropped, 0) << "the case should drop";
    }
    // Losses and the gradient.
    const bool per_sequence = spec.aux_loss_scope == BalanceScope::kSequence;
    const int64_t segments = per_sequence ? kB : 1, length = per_sequence ? kT : kN;
    std::vector<float> probs(kN * kE), dlogits(kN * kE), host_dlogits(kN * kE);
    std::vector<double> sums(kN + segments * kE), losses(2);
    std::vector<int32_t> seg_counts(segments * kE);
    kernels::cpu::MoeRouterLoss(kCpu, {device, segments, length, spec.aux_loss, spec.router_z_loss, h.data(),
                                       experts.data(), losses.data(), probs.data(), sums.data()});
    const double balance = BalanceLoss(spec, kB, kT, h.data(), host_experts.data());
    const double zloss = RouterZLoss(spec, kN, h.data());
    EXPECT_NEAR(losses[0], balance, 1e-12 * balance);
    EXPECT_NEAR(losses[1], zloss, 1e-12 * zloss);
    kernels::cpu::MoeRouteBackward(kCpu, {device, segments, length, spec.aux_loss, spec.router_z_loss, h.data(),
                                          experts.data(), dgates.data(), dlogits.data(), seg_counts.data()});
    RouteBackward(spec, kN, h.data(), host_experts.data(), dgates.data(), host_dlogits.data());
    BalanceLossBackward(spec, kB, kT, h.data(), host_experts.data(), host_dlogits.data());
    RouterZLossBackward(spec, kN, h.data(), host_dlogits.data());
    double largest = 0;
    for (float v : host_dlogits) largest = std::max(largest, std::fabs(double{v}));
    ExpectUlps("dlogits", dlogits, host_dlogits, 1e-6 * largest);
    std::vector<float> dzn(kN * kE), host_dzn(kN * kE);
    kernels::cpu::MoeGatingNoiseBackward(kCpu, {kN, kE, zn.data(), eps.data(), dlogits.data(), dzn.data()});
    GatingNoiseBackward(kN, kE, zn.data(), host_eps.data(), host_dlogits.data(), host_dzn.data());
    ExpectUlps("dnoise_logits", dzn, host_dzn, 1e-6 * largest);
  }
}

}  // namespace
}  // namespace lmf::model::moe
