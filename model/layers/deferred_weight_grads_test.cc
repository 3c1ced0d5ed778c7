// Tests of DeferredWeightGrads on a Linear layer (the GEMM every weight gradient of the model goes through):
// - with deferral the backward writes the same input gradient and leaves the weight and bias gradients
//   alone; Run then adds exactly the undeferred backward's, bit for bit, for two backwards accumulated, with
//   a strided dy;
// - the queued work reads its own copy of dy: overwriting dy (a Scratch temporary reused by the next layer)
//   between B and W changes nothing; the copies are counted in bytes() and freed by Run;
// - RunOrDefer runs at once without a DeferredWeightGrads and queues in order with one.
#include "model/layers/deferred_weight_grads.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/core/context.h"
#include "model/layers/linear/linear.h"

namespace lmf::model {
namespace {

std::vector<float> Values(size_t n, double phase) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(0.71 * static_cast<double>(i) + phase));
  return v;
}

void Fill(const Parameter& p, double phase) {
  const std::vector<float> v = Values(static_cast<size_t>(p.value.numel()), phase);
  std::memcpy(p.value.data(), v.data(), v.size() * sizeof(float));
}

std::vector<float> Grad(const Parameter& p) { return {p.grad_data(), p.grad_data() + p.grad.numel()}; }

TEST(DeferredWeightGrads, LinearWeightGradientsEqualTheBackwardsBitForBit) {
  const kernels::Context ctx = kernels::Context::Cpu();
  const int64_t n = 37, in = 24, out = 19, ldy = 23;  // dy rows at a stride wider than OUT
  StepCounters plain_counters, split_counters;
  Linear plain(in, out, /*bias=*/true, ParameterKind::kMatrix, ctx, kernels::DType::kF32, &plain_counters);
  Linear split(in, out, /*bias=*/true, ParameterKind::kMatrix, ctx, kernels::DType::kF32, &split_counters);
  for (const Linear* layer : {&plain, &split}) {
    Fill(layer->weight(), 0.3);
    Fill(*layer->bias(), 1.1);
  }
  const std::vector<float> x0 = Values(n * in, 0.5), x1 = Values(n * in, 2.5);
  const std::vector<float> dy0 = Values(n * ldy, 1.5), dy1 = Values(n * ldy, 3.5);
  std::vector<float> want_dx0(n * in), want_dx1(n * in), got_dx0(n * in), got_dx1(n * in);
  plain.Backward(ctx, n, x0.data(), in, dy0.data(), ldy, want_dx0.data());
  plain.Backward(ctx, n, x1.data(), in, dy1.data(), ldy, want_dx1.data());

  DeferredWeightGrads first, second;
  std::vector<float> dy = dy0;  // the backward's buffer, reused for the next micro-batch before W
  split.Backward(ctx, n, x0.data(), in, dy.data(), ldy, got_dx0.data(), &first);
  dy = dy1;
  split.Backward(ctx, n, x1.data(), in, dy.data(), ldy, got_dx1.data(), &second);
  std::fill(dy.begin(), dy.end(), 1e6f);
  EXPECT_EQ(got_dx0, want_dx0);
  EXPECT_EQ(got_dx1, want_dx1);
  EXPECT_EQ(Grad(split.weight()), std::vector<float>(out * in, 0.0f)) << "B leaves dW to W";
  EXPECT_EQ(Grad(*split.bias()), std::vector<float>(out, 0.0f)) << "and db";
  EXPECT_EQ(first.size(), 1u);
  EXPECT_EQ(first.bytes(), static_cast<int64_t>(((n - 1) * ldy + out) * sizeof(float))) << "dy's span, kept";
  first.Run(ctx);
  second.Run(ctx);
  EXPECT_TRUE(first.empty() && second.empty());
  EXPECT_EQ(first.bytes() + second.bytes(), 0) << "Run frees the copies";
  EXPECT_EQ(Grad(split.weight()), Grad(plain.weight()));
  EXPECT_EQ(Grad(*split.bias()), Grad(*plain.bias()));
  EXPECT_EQ(split_counters.matmul_flops, plain_counters.matmul_flops);
}

TEST(DeferredWeightGrads, RunOrDeferRunsAtOnceOrQueuesInOrder) {
  const kernels::Context ctx = kernels::Context::Cpu();
  std::vector<int> ran;
  RunOrDefer(nullptr, ctx, [&](const kernels::Context&) { ran.push_back(0); });
  EXPECT_EQ(ran, std::vector<int>{0});
  DeferredWeightGrads deferred;
  RunOrDefer(&deferred, ctx, [&](const kernels::Context&) { ran.push_back(1); });
  RunOrDefer(&deferred, ctx, [&](const kernels::Context&) { ran.push_back(2); });
  EXPECT_EQ(ran, std::vector<int>{0});
  EXPECT_EQ(deferred.size(), 2u);
  deferred.Run(ctx);
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(deferred.empty());
}

}  // namespace
}  // namespace lmf::model
