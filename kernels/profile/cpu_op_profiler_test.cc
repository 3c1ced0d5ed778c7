// CpuOpProfiler: names and counts every top-level CPU op of the window, the ops and the time outside them add
// up to the window, nested ops and other threads' ops are not counted twice, one profiler at a time, nothing
// recorded after Finish.
#include "kernels/profile/cpu_op_profiler.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/matmul/matmul.h"
#include "kernels/memory/memory.h"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/testing/compare.h"

namespace lmf::kernels {
namespace {

const OpTime* Find(const OpProfile& profile, const std::string& op) {
  for (const OpTime& t : profile.ops)
    if (t.op == op) return &t;
  return nullptr;
}

struct Norm {
  static constexpr int64_t kN = 64, kC = 256;
  std::vector<float> x = testing::RandomNormal(kN * kC, 1), w = std::vector<float>(kC, 1.0f),
                     out = std::vector<float>(kN * kC);
  RmsNormForwardParams Params() {
    RmsNormForwardParams p;
    p.N = kN;
    p.C = kC;
    p.x = x.data();
    p.weight = w.data();
    p.out = out.data();
    return p;
  }
};

TEST(CpuOpProfiler, CountsEveryOpAndTheOpsAndTheRestAddUpToTheWindow) {
  const Context ctx = Context::Cpu();
  Norm norm;
  const int64_t n = 64;
  std::vector<float> a = testing::RandomNormal(n * n, 2), b = testing::RandomNormal(n * n, 3), c(n * n);
  MatmulParams mm;
  mm.M = mm.N = mm.K = n;
  mm.a = a.data();
  mm.lda = n;
  mm.b = b.data();
  mm.ldb = n;
  mm.c = c.data();
  mm.ldc = n;

  absl::StatusOr<std::unique_ptr<CpuOpProfiler>> profiler = CpuOpProfiler::Start(ctx);
  ASSERT_TRUE(profiler.ok()) << profiler.status();
  for (int i = 0; i < 3; ++i) RmsNormForward(ctx, norm.Params());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // host work outside any op
  for (int i = 0; i < 2; ++i) Matmul(ctx, mm);
  FillZero(ctx, c.data(), c.size() * sizeof(float));
  absl::StatusOr<OpProfile> profile = (*profiler)->Finish();
  ASSERT_TRUE(profile.ok()) << profile.status();

  ASSERT_EQ(profile->ops.size(), 3u);
  const OpTime *rms = Find(*profile, "RmsNormForward"), *matmul = Find(*profile, "Matmul"),
               *zero = Find(*profile, "fill with zeros");
  ASSERT_NE(rms, nullptr);
  ASSERT_NE(matmul, nullptr);
  ASSERT_NE(zero, nullptr);
  EXPECT_EQ(rms->calls, 3);
  EXPECT_EQ(matmul->calls, 2);
  EXPECT_EQ(zero->calls, 1);
  double in_ops = 0;
  for (const OpTime& op : profile->ops) {
    EXPECT_GT(op.total_ms, 0) << op.op;
    in_ops += op.total_ms;
  }
  // The sleep is outside every op: at least its 20 ms are outside, and none of it is in an op (the ops above
  // take well under a millisecond each on any machine this runs on, but only the sum is asserted).
  EXPECT_GE(profile->outside_ops_ms, 20.0);
  EXPECT_LT(in_ops, profile->window_ms - 20.0);
  // The ops and the rest are the window, up to the rounding of the ns-to-ms conversions.
  EXPECT_NEAR(in_ops + profile->outside_ops_ms, profile->window_ms, 1e-6 * profile->window_ms);
}

TEST(CpuOpProfiler, AnOpInsideAnotherIsPartOfTheOuterOp) {
  const Context ctx = Context::Cpu();
  Norm norm;
  absl::StatusOr<std::unique_ptr<CpuOpProfiler>> profiler = CpuOpProfiler::Start(ctx);
  ASSERT_TRUE(profiler.ok()) << profiler.status();
  {
    CpuOpScope outer("Outer");  // e.g. a CPU kernel that calls other entry points
    RmsNormForward(ctx, norm.Params());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    RmsNormForward(ctx, norm.Params());
  }
  RmsNormForward(ctx, norm.Params());
  absl::StatusOr<OpProfile> profile = (*profiler)->Finish();
  ASSERT_TRUE(profile.ok()) << profile.status();
  ASSERT_EQ(profile->ops.size(), 2u);
  const OpTime *outer = Find(*profile, "Outer"), *rms = Find(*profile, "RmsNormForward");
  ASSERT_NE(outer, nullptr);
  ASSERT_NE(rms, nullptr);
  EXPECT_EQ(outer->calls, 1);
  EXPECT_GE(outer->total_ms, 5.0);  // holds the sleep and both inner norms
  EXPECT_EQ(rms->calls, 1);         // only the one outside "Outer"
}

TEST(CpuOpProfiler, OpsOfOtherThreadsAreNotCounted) {
  const Context ctx = Context::Cpu();
  Norm main_norm, other_norm;
  absl::StatusOr<std::unique_ptr<CpuOpProfiler>> profiler = CpuOpProfiler::Start(ctx);
  ASSERT_TRUE(profiler.ok()) << profiler.status();
  std::thread other([&] {
    for (int i = 0; i < 4; ++i) RmsNormForward(ctx, other_norm.Params());
    CpuOpScope scope("OtherThreadOp");
  });
  other.join();
  RmsNormForward(ctx, main_norm.Params());
  absl::StatusOr<OpProfile> profile = (*profiler)->Finish();
  ASSERT_TRUE(profile.ok()) << profile.status();
  ASSERT_EQ(profile->ops.size(), 1u);
  EXPECT_EQ(profile->ops[0].op, "RmsNormForward");
  EXPECT_EQ(profile->ops[0].calls, 1);
}

TEST(CpuOpProfiler, OneAtATimeNothingAfterFinishAndOnlyOnTheCpu) {
  const Context ctx = Context::Cpu();
  Norm norm;
  absl::StatusOr<std::unique_ptr<CpuOpProfiler>> first = CpuOpProfiler::Start(ctx);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(CpuOpProfiler::Start(ctx).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*first)->Finish().ok());
  EXPECT_EQ((*first)->Finish().status().code(), absl::StatusCode::kFailedPrecondition);
  RmsNormForward(ctx, norm.Params());  // after Finish: seen by nobody

  absl::StatusOr<std::unique_ptr<CpuOpProfiler>> second = CpuOpProfiler::Start(ctx);  // the first released it
  ASSERT_TRUE(second.ok()) << second.status();
  absl::StatusOr<OpProfile> empty = (*second)->Finish();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->ops.empty());
  EXPECT_DOUBLE_EQ(empty->outside_ops_ms, empty->window_ms);

  Context cuda = Context::Cpu();
  cuda.device = Device::Cuda(0);  // never used to run anything: Start refuses it first
  EXPECT_EQ(CpuOpProfiler::Start(cuda).status().code(), absl::StatusCode::kFailedPrecondition);
  {
    absl::StatusOr<std::unique_ptr<CpuOpProfiler>> dropped = CpuOpProfiler::Start(ctx);
    ASSERT_TRUE(dropped.ok()) << dropped.status();
  }  // destroyed without Finish: releases the observer
  EXPECT_TRUE(CpuOpProfiler::Start(ctx).ok());
}

}  // namespace
}  // namespace lmf::kernels
