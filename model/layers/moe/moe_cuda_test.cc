// The mixture-of-experts layer on CUDA (moe_device.cc) against its CPU path (moe.cc) on the same weights and
// inputs: output, both router losses, the step counts and every gradient (dh and each parameter's), for five
// variants that between them cover every part of the device path: softmax-then-top-k with the balancing loss,
// the z-loss and shared experts; top-k-then-softmax GELU experts with biases and dropping by score; sigmoid
// scores with normalised, scaled gates, group-limited routing and a non-zero selection bias; noisy top-k
// gating (a training forward: the CUDA noise must equal the CPU's draw for draw, or the selections and the
// noise router's gradient differ); dropping by position with per-sequence balancing. Tagged gpu:
// skips without a device; CI runs it on the CPU emulation of CUDA in //model/emulation:moe_emulation_test.
//
// fp32: |cuda - cpu| <= 1e-5 of each tensor's scale (its largest value; floored at 1% of the largest
// gradient for tiny ones): both are fp32 with sums of at most C + F + E terms in different orders (a few
// ulps), while a wrong index, gate, term or sign errs by a sizeable fraction of the scale.
//
// bf16, by STYLE.md's rule against a plain bf16 computation, as the whole-model test does: `want` is the
// fp32 CPU layer, `naive` the fp32 CPU layer with the expert and shared-expert weights rounded to bf16 (the
// compute copies' values); both see the bf16-rounded h and dout (the bf16 layer's inputs are bf16), and so
// the same fp32 router logits as the CUDA path, whose router stays fp32 (so the routing is the same). The
// CUDA layer also stores the gathered rows' products (pre-activations, activation, expert outputs), the
// output and the activation gradients in bf16 (~6 roundings on the way, each of the size of a weight
// rounding); in quadrature that is 2-3 times the weights-only error, and we allow 10 times, in relative L2
// per tensor (measured on the emulation: 0.5-8 times, most near 2). Some gradients do not depend on the
// weights at all (the output bias's, a sum of the rows' gate * dout, which the CUDA path stores in bf16), so
// their weights-only error is 0: every tensor may also err by 4 bf16 unit roundoffs (4 * 2^-9, 0.8%) in
// relative L2. A wrong index, gate or term errs by tens of percent. The router losses read fp32 logits of the
// same fp32 inputs: 1e-5 relative.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cast/cast.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/memory/memory.h"
#include "kernels/moe_route/moe_route.h"
#include "kernels/testing/compare.h"
#include "model/layers/moe/moe.h"

namespace lmf::model {
namespace {

using kernels::DType;
using kernels::testing::RandomNormal;

constexpr int64_t kB = 2, kT = 5, kC = 16;

struct Case {
  std::string name;
  MoeSpec spec;
  bool biases = false;
};

std::vector<Case> Cases() {
  std::vector<Case> cases(5);
  MoeSpec& a = cases[0].spec;
  cases[0].name = "softmax_topk_losses_shared";
  a.n_experts = 4, a.top_k = 2, a.d_expert = 8, a.router = RouterKind::kSoftmaxTopK;
  a.aux_loss = 0.01, a.router_z_loss = 0.001, a.shared_d_ff = 12;
  MoeSpec& b = cases[1].spec;
  cases[1].name = "topk_softmax_gelu_biases_dropping";
  b.n_experts = 4, b.top_k = 2, b.d_expert = 8, b.router = RouterKind::kTopKSoftmax, b.expert_kind = FfnKind::kGELU;
  b.capacity_factor = 0.75, b.drop = DropPolicy::kByScore, b.aux_loss = 0.01;
  cases[1].biases = true;
  MoeSpec& c = cases[2].spec;
  cases[2].name = "sigmoid_grouped_bias";
  c.n_experts = 8, c.top_k = 2, c.d_expert = 4, c.router = RouterKind::kSigmoidTopK, c.normalize_gates = true;
  c.route_scale = 2.5, c.n_groups = 4, c.topk_groups = 2, c.expert_bias = true, c.aux_loss = 0.01;
  MoeSpec& d = cases[3].spec;
  cases[3].name = "noisy_gating_z_loss";
  d.n_experts = 4, d.top_k = 2, d.d_expert = 8, d.noisy_gating = true, d.router_z_loss = 0.001, d.aux_loss = 0.01;
  MoeSpec& f = cases[4].spec;
  cases[4].name = "drop_by_position_per_sequence";
  f.n_experts = 8, f.top_k = 3, f.d_expert = 4, f.router = RouterKind::kSoftmaxTopK, f.normalize_gates = true;
  f.capacity_factor = 0.6, f.drop = DropPolicy::kByPosition, f.aux_loss = 0.01;
  f.aux_loss_scope = BalanceScope::kSequence;
  return cases;
}

// What one forward and backward gives, on the host.
struct Result {
  std::vector<float> out, dh;
  std::map<std::string, std::vector<float>> grads;
  double balance_loss = 0, z_loss = 0;
  int64_t dropped = 0, saved_bytes = 0;
  std::vector<float> load;
};

std::vector<float> ToHost(const kernels::Context& ctx, const kernels::Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  kernels::CopyToHostAsFloats(ctx, out.data(), t.data(), t.dtype(), t.numel());
  return out;
}

// A layer on ctx in dtype with the case's weights (each parameter N(0, 0.3), by name; `round_experts`
// rounds every weight but the router's to bf16) and selection bias.
std::unique_ptr<MixtureOfExperts> MakeLayer(const Case& c, const kernels::Context& ctx, DType dtype,
                                            bool round_experts, StepCounters* counters) {
  ModelConfig model = Cs336Config(32, 16, kC, 1, 2, 16);
  model.biases = c.biases;
  auto layer = std::make_unique<MixtureOfExperts>(c.spec, model, ctx, dtype, counters);
  uint64_t seed = 100;
  layer->VisitParameters("ffn", [&](const std::string& name, const Parameter& p) {
    std::vector<float> v = RandomNormal(p.value.numel(), seed++, 0.3f);
    if (round_experts && name.find(".router.") == std::string::npos) v = kernels::cuda::testing::RoundToBF16(v);
    kernels::CopyToDevice(ctx, p.value.data(), v.data(), v.size() * sizeof(float));
    if (p.compute.data() != p.value.data()) {
      kernels::Cast(ctx, {p.value.numel(), DType::kF32, p.compute.dtype(), p.value.data(), p.compute.data()});
    }
  });
  layer->VisitBuffers("ffn", [&](const std::string&, const kernels::Tensor& bias) {
    std::vector<float> v = RandomNormal(bias.numel(), 77, 0.05f);
    kernels::CopyToDevice(ctx, bias.data(), v.data(), v.size() * sizeof(float));
  });
  return layer;
}

// Forward (accumulating onto `base`) and backward of the layer on h and dout (host values in dtype).
Result ForwardBackward(const MixtureOfExperts& layer, const kernels::Context& ctx, DType dtype, const std::vector<float>& h,
                       const std::vector<float>& base, const std::vector<float>& dout) {
  const int64_t n = kB * kT;
  const auto upload = [&](const std::vector<float>& v) {
    kernels::Tensor t = kernels::Tensor::Empty({n, kC}, dtype, ctx.allocator);
    if (dtype == DType::kF32) {
      kernels::CopyToDevice(ctx, t.data(), v.data(), v.size() * sizeof(float));
    } else {
      kernels::Tensor f = kernels::Tensor::Empty({n, kC}, DType::kF32, ctx.allocator);
      kernels::CopyToDevice(ctx, f.data(), v.data(), v.size() * sizeof(float));
      kernels::Cast(ctx, {n * kC, DType::kF32, dtype, f.data(), t.data()});
    }
    return t;
  };
  kernels::Tensor gh = upload(h), gout = upload(base), gdout = upload(dout);
  kernels::Tensor gdh = kernels::Tensor::Empty({n, kC}, dtype, ctx.allocator);
  std::unique_ptr<LayerActivations> saved = layer.NewActivations();
  Scratch scratch(ctx.allocator);
  ForwardMode mode = ForwardMode::Training(/*seed=*/11, /*step=*/3, /*first_token=*/20);  // draws noisy gating's noise
  mode.layer = 2;
  layer.Forward(ctx, kB, kT, gh.data(), gout.data(), /*accumulate=*/true, *saved, mode);
  layer.Backward(ctx, gh.data(), *saved, gdout.data(), gdh.data(), scratch);
  Result r;
  r.out = ToHost(ctx, gout), r.dh = ToHost(ctx, gdh);
  layer.VisitParameters("ffn", [&](const std::string& name, const Parameter& p) { r.grads[name] = ToHost(ctx, p.grad); });
  const auto& moe = static_cast<const MoeActivations&>(*saved);
  r.balance_loss = moe.balance_loss, r.z_loss = moe.z_loss, r.dropped = moe.dropped(), r.saved_bytes = moe.bytes();
  layer.VisitStepCounts("ffn", [&](const std::string& name, const kernels::Tensor& t) {
    if (name == "ffn.router.expert_load") r.load.assign(t.data<float>(), t.data<float>() + t.numel());
  });
  return r;
}

double Scale(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s = std::max(s, std::fabs(double{x}));
  return s;
}

double RelativeL2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) num += (got[i] - double{want[i]}) * (got[i] - double{want[i]}), den += double{want[i]} * want[i];
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

class MoeCudaTest : public kernels::cuda::testing::GpuTest, public ::testing::WithParamInterface<Case> {};

TEST_P(MoeCudaTest, F32MatchesTheCpuPath) {
  const Case& c = GetParam();
  const int64_t n = kB * kT;
  const auto h = RandomNormal(n * kC, 1), base = RandomNormal(n * kC, 2), dout = RandomNormal(n * kC, 3);
  StepCounters cpu_counters, gpu_counters;
  const kernels::Context cpu = kernels::Context::Cpu();
  const Result want = ForwardBackward(*MakeLayer(c, cpu, DType::kF32, false, &cpu_counters), cpu, DType::kF32, h, base, dout);
  const Result got = ForwardBackward(*MakeLayer(c, ctx(), DType::kF32, false, &gpu_counters), ctx(), DType::kF32, h, base, dout);
  double largest = 0;
  for (const auto& [name, g] : want.grads) largest = std::max(largest, Scale(g));
  const auto expect_close = [&](const std::string& what, const std::vector<float>& g, const std::vector<float>& w) {
    ASSERT_EQ(g.size(), w.size()) << what;
    const double scale = std::max(Scale(w), 1e-2 * largest);
    double worst = 0;
    for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::fabs(double{g[i]} - w[i]));
    EXPECT_LE(worst, 1e-5 * scale) << what << " (scale " << scale << ")";
  };
  expect_close("out (+=)", got.out, want.out);
  expect_close("dh", got.dh, want.dh);
  for (const auto& [name, g] : want.grads) expect_close("grad of " + name, got.grads.at(name), g);
  EXPECT_NEAR(got.balance_loss, want.balance_loss, 1e-5 * std::fabs(want.balance_loss) + 1e-12);
  EXPECT_NEAR(got.z_loss, want.z_loss, 1e-5 * std::fabs(want.z_loss) + 1e-12);
  EXPECT_EQ(got.dropped, want.dropped);
  EXPECT_EQ(got.load, want.load);
  EXPECT_EQ(got.saved_bytes, want.saved_bytes);
  EXPECT_EQ(gpu_counters.matmul_flops, cpu_counters.matmul_flops);
  if (c.spec.capacity_factor == 0) {  // dropless: the accounting's bytes are what the layer holds
    ModelConfig model = Cs336Config(32, 16, kC, 1, 2, 16);
    EXPECT_EQ(got.saved_bytes, MixtureOfExperts::SavedBytesPerToken(c.spec, model, DType::kF32) * n);
  }
}

TEST_P(MoeCudaTest, Bf16IsWithinTenTimesTheErrorOfBf16Weights) {
  constexpr double kMultiple = 10, kRoundoffs = 4;
  const Case& c = GetParam();
  const int64_t n = kB * kT;
  using kernels::cuda::testing::RoundToBF16;
  const auto h = RoundToBF16(RandomNormal(n * kC, 1)), base = RoundToBF16(RandomNormal(n * kC, 2)),
             dout = RoundToBF16(RandomNormal(n * kC, 3));
  StepCounters counters;
  const kernels::Context cpu = kernels::Context::Cpu();
  const Result want = ForwardBackward(*MakeLayer(c, cpu, DType::kF32, false, &counters), cpu, DType::kF32, h, base, dout);
  const Result naive = ForwardBackward(*MakeLayer(c, cpu, DType::kF32, true, &counters), cpu, DType::kF32, h, base, dout);
  const Result got = ForwardBackward(*MakeLayer(c, ctx(), DType::kBF16, false, &counters), ctx(), DType::kBF16, h, base, dout);
  const auto expect_within = [&](const std::string& what, const std::vector<float>& g, const std::vector<float>& nv,
                                 const std::vector<float>& w) {
    ASSERT_EQ(g.size(), w.size()) << what;
    const double error = RelativeL2(g, w), naive_error = RelativeL2(nv, w);
    EXPECT_LE(error, std::max(kMultiple * naive_error, kRoundoffs * std::ldexp(1.0, -9))) << what;
    std::printf("%s %s bf16: relative L2 %.5f (bf16 weights %.5f)\n", c.name.c_str(), what.c_str(), error, naive_error);
  };
  expect_within("out (+=)", got.out, naive.out, want.out);
  expect_within("dh", got.dh, naive.dh, want.dh);
  for (const auto& [name, g] : want.grads) expect_within("grad of " + name, got.grads.at(name), naive.grads.at(name), g);
  EXPECT_NEAR(got.balance_loss, want.balance_loss, 1e-5 * std::fabs(want.balance_loss) + 1e-12);
  EXPECT_NEAR(got.z_loss, want.z_loss, 1e-5 * std::fabs(want.z_loss) + 1e-12);
  EXPECT_EQ(got.dropped, want.dropped);
  EXPECT_EQ(got.load, want.load);
  if (c.spec.capacity_factor == 0) {
    ModelConfig model = Cs336Config(32, 16, kC, 1, 2, 16);
    EXPECT_EQ(got.saved_bytes, MixtureOfExperts::SavedBytesPerToken(c.spec, model, DType::kBF16) * n);
  }
}

TEST(MoeCudaSupport, NoisyGatingRunsOnCudaAndTooManyExpertsAreRefusedNamingTheFieldAndDevice) {
  MoeSpec spec;
  spec.n_experts = 4, spec.top_k = 2, spec.d_expert = 8, spec.noisy_gating = true;
  EXPECT_TRUE(MixtureOfExperts::CheckSupport(spec, kernels::Device::Cuda(0), DType::kBF16).ok());
  spec.n_experts = kernels::kMaxRouteExperts + 1;
  const absl::Status s = MixtureOfExperts::CheckSupport(spec, kernels::Device::Cuda(0), DType::kBF16);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("n_experts"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("cuda:0"), std::string::npos) << s.message();
  EXPECT_TRUE(MixtureOfExperts::CheckSupport(spec, kernels::Device::Cpu(), DType::kF32).ok());
}

INSTANTIATE_TEST_SUITE_P(Variants, MoeCudaTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace lmf::model
