// AdamW: five steps with weight decay and betas (0.9, 0.95) follow torch.optim.AdamW's parameters and
// moments; the CS336 1000-step trajectory (Linear(3, 2), squared error) ends at the snapshot's weights;
// MultiTensorAdamW equals per-tensor steps, and with zero_grads updates the same and clears the gradients.
#include "kernels/adamw/adamw.h"

#include <cstdint>
#include <vector>

#include "base/shared_data.h"
#include "base/thread_pool.h"
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

// grad_norm.h's ClipScale, written out so that this test does not depend on kernels/grad_norm.
float ClipScaleForTest(float norm, float max_norm) {
  const float s = max_norm / (norm + 1e-6f);
  return s < 1.0f ? s : 1.0f;
}

TEST(AdamW, MultiTensorStepEqualsPerTensorStepsWithClippingAndBf16Copy) {
  const Context ctx = Context::Cpu();
  const std::vector<int64_t> sizes = {1, 37, 20000};
  const float norm = 4.0f, max_norm = 1.0f;  // clip scale 1 / (4 + 1e-6)
  std::vector<std::vector<float>> param, grad, m, v, want, wm, wv;
  std::vector<std::vector<uint16_t>> copy;
  for (size_t i = 0; i < sizes.size(); ++i) {
    param.push_back(testing::RandomNormal(sizes[i], 10 + i)),
        grad.push_back(testing::RandomNormal(sizes[i], 20 + i));
    m.push_back(std::vector<float>(sizes[i], 0.0f)), v.push_back(std::vector<float>(sizes[i], 0.0f));
    want.push_back(param.back()), wm.push_back(m.back()), wv.push_back(v.back());
    copy.push_back(std::vector<uint16_t>(sizes[i], 0));
  }
  std::vector<AdamWTensor> tensors;
  for (size_t i = 0; i < sizes.size(); ++i)
    tensors.push_back(AdamWTensor{sizes[i], param[i].data(), grad[i].data(), m[i].data(), v[i].data(),
                                  i == 1 ? nullptr : copy[i].data()});  // tensor 1 has no bf16 copy
  for (int64_t step = 1; step <= 2; ++step) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      AdamWParams p;
      p.n = sizes[i], p.param = want[i].data(), p.grad = grad[i].data(), p.m = wm[i].data(),
      p.v = wv[i].data();
      p.lr = 1e-2f, p.weight_decay = 0.1f, p.step = step,
      p.grad_scale = 0.5f * ClipScaleForTest(norm, max_norm);
      AdamWStep(ctx, p);
    }
    MultiTensorAdamWParams mp;
    mp.tensors = tensors.data(), mp.num_tensors = static_cast<int64_t>(tensors.size());
    mp.lr = 1e-2f, mp.weight_decay = 0.1f, mp.step = step, mp.grad_scale = 0.5f;
    mp.norm = &norm, mp.max_norm = max_norm;
    MultiTensorAdamW(ctx, mp);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE(sizes[i]);
    EXPECT_EQ(param[i], want[i]);
    EXPECT_EQ(m[i], wm[i]);
    EXPECT_EQ(v[i], wv[i]);
    for (int64_t j = 0; j < sizes[i] && i != 1; ++j) ASSERT_EQ(copy[i][j], FloatToBF16(param[i][j])) << j;
  }
  EXPECT_EQ(copy[1], std::vector<uint16_t>(sizes[1], 0)) << "a null param_copy is not written";
}

// zero_grads: the same parameters and moments, bit for bit, as the update without it (it reads each
// gradient before clearing it), every gradient element zero afterwards, over sizes with and without a
// scalar tail and several threads.
TEST(AdamW, ZeroGradsUpdatesAsWithoutAndLeavesEveryGradientZero) {
  ThreadPool pool(2);
  Context ctx = Context::Cpu(&pool);
  const std::vector<int64_t> sizes = {1, 8, 13, 40003};
  std::vector<std::vector<float>> param, grad, m, v;
  for (size_t i = 0; i < sizes.size(); ++i) {
    param.push_back(testing::RandomNormal(sizes[i], 30 + i));
    grad.push_back(testing::RandomNormal(sizes[i], 40 + i));
    m.push_back(testing::RandomNormal(sizes[i], 50 + i, 0.1f));
    v.push_back(std::vector<float>(sizes[i], 0.01f));
  }
  auto want = param, wm = m, wv = v, zeroed = grad;
  auto run = [&](std::vector<std::vector<float>>& p, std::vector<std::vector<float>>& g,
                 std::vector<std::vector<float>>& mm, std::vector<std::vector<float>>& vv, bool zero_grads) {
    std::vector<AdamWTensor> tensors;
    for (size_t i = 0; i < sizes.size(); ++i)
      tensors.push_back(AdamWTensor{sizes[i], p[i].data(), g[i].data(), mm[i].data(), vv[i].data(), nullptr});
    MultiTensorAdamWParams mp;
    mp.tensors = tensors.data(), mp.num_tensors = static_cast<int64_t>(tensors.size());
    mp.lr = 1e-2f, mp.weight_decay = 0.1f, mp.step = 3, mp.grad_scale = 0.7f, mp.zero_grads = zero_grads;
    MultiTensorAdamW(ctx, mp);
  };
  run(want, grad, wm, wv, /*zero_grads=*/false);
  run(param, zeroed, m, v, /*zero_grads=*/true);
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE(sizes[i]);
    EXPECT_EQ(param[i], want[i]);
    EXPECT_EQ(m[i], wm[i]);
    EXPECT_EQ(v[i], wv[i]);
    EXPECT_EQ(zeroed[i], std::vector<float>(sizes[i], 0.0f));
    EXPECT_NE(grad[i], std::vector<float>(sizes[i], 0.0f)) << "without zero_grads the gradient is kept";
  }
}

}  // namespace
}  // namespace lmf::kernels
