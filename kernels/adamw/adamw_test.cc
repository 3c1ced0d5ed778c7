// AdamW: five steps with weight decay and betas (0.9, 0.95) follow torch.optim.AdamW's parameters and
// moments; the CS336 1000-step trajectory (Linear(3, 2), squared error) ends at the snapshot's weights.
#include "kernels/adamw/adamw.h"

#include "base/shared_data.h"
#include "gtest/gtest.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/fixture.h"

namespace lmf::kernels {
namespace {

using testing::AllClose;

TEST(AdamW, FiveStepsMatchTorchOptimAdamW) {
  testing::Fixture f("kernels/testdata/adamw.npz");
  const int64_t n = 10, steps = 5;
  auto param = f.F("param0", n), grads = f.F("grads", steps * n), params = f.F("params", steps * n);
  auto hyper = f.F("hyper", 5);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  Context ctx = Context::Cpu();
  for (int64_t s = 0; s < steps; ++s) {
    AdamWParams p;
    p.n = n, p.param = param.data(), p.grad = grads.data() + s * n, p.m = m.data(), p.v = v.data();
    p.lr = hyper[0], p.beta1 = hyper[1], p.beta2 = hyper[2], p.eps = hyper[3], p.weight_decay = hyper[4];
    p.step = s + 1;
    AdamWStep(ctx, p);
    // Both sides compute in fp32 with the same operation order; bias-correction constants differ in the
    // last bit (double here, Python float there): a few ulp.
    std::vector<float> want(params.begin() + s * n, params.begin() + (s + 1) * n);
    EXPECT_TRUE(AllClose("param after step " + std::to_string(s + 1), param, want, 1e-6, 1e-7));
  }
  EXPECT_TRUE(AllClose("m", m, f.F("m"), 1e-6, 1e-8));
  EXPECT_TRUE(AllClose("v", v, f.F("v"), 1e-6, 1e-10));
}

TEST(AdamW, GradScaleEqualsScaledGradient) {
  const int64_t n = 33;
  auto p1 = testing::RandomNormal(n, 1), g = testing::RandomNormal(n, 2);
  auto p2 = p1;
  std::vector<float> g_scaled(n), m1(n, 0), v1(n, 0), m2(n, 0), v2(n, 0);
  for (int64_t i = 0; i < n; ++i) g_scaled[i] = g[i] * 0.25f;
  Context ctx = Context::Cpu();
  AdamWParams a;
  a.n = n, a.param = p1.data(), a.grad = g.data(), a.m = m1.data(), a.v = v1.data(), a.grad_scale = 0.25f;
  AdamWStep(ctx, a);
  AdamWParams b = a;
  b.param = p2.data(), b.grad = g_scaled.data(), b.m = m2.data(), b.v = v2.data(), b.grad_scale = 1.0f;
  AdamWStep(ctx, b);
  EXPECT_EQ(p1, p2);
}

TEST(AdamW, MatchesCs336ThousandStepTrajectory) {
  LMF_SHARED_DATA_OR_SKIP(inputs_path, "cs336/derived/a1_test_inputs.npz");
  LMF_SHARED_DATA_OR_SKIP(snapshot_path, "cs336/assignment1-basics/tests/_snapshots/test_adamw.npz");
  testing::Fixture inputs(inputs_path), snapshot(snapshot_path);
  auto w = inputs.F("adamw_w0", 6), xs = inputs.F("adamw_x", 3000);
  std::vector<float> m(6, 0.0f), v(6, 0.0f), grad(6);
  Context ctx = Context::Cpu();
  for (int64_t step = 1; step <= 1000; ++step) {
    const float* x = xs.data() + (step - 1) * 3;
    const float y[2] = {x[0] + x[1], -x[2]};
    // loss = sum_i (y_i - (W x)_i)^2; dL/dW_ij = -2 (y_i - (W x)_i) x_j
    for (int i = 0; i < 2; ++i) {
      const float pred = w[i * 3] * x[0] + w[i * 3 + 1] * x[1] + w[i * 3 + 2] * x[2];
      for (int j = 0; j < 3; ++j) grad[i * 3 + j] = -2.0f * (y[i] - pred) * x[j];
    }
    AdamWParams p;
    p.n = 6, p.param = w.data(), p.grad = grad.data(), p.m = m.data(), p.v = v.data();
    p.lr = 1e-3f, p.weight_decay = 0.01f, p.beta1 = 0.9f, p.beta2 = 0.999f, p.eps = 1e-8f, p.step = step;
    AdamWStep(ctx, p);
  }
  // The snapshot test's rule: assert_allclose(actual, expected, atol=1e-4) (rtol numpy's default 1e-7).
  EXPECT_TRUE(AllClose("cs336 adamw weights after 1000 steps", w, snapshot.F("array", 6), 1e-7, 1e-4));
}

}  // namespace
}  // namespace lmf::kernels
