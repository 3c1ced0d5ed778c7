// OpProfiler on a device: names and counts every op an entry point runs in the window, its times add up to
// the window, one profiler at a time, nothing recorded after Finish.
#include <vector>

#include "kernels/cuda/gpu_test_util.h"
#include "kernels/cuda/op_profiler.h"
#include "kernels/memory/memory.h"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/testing/compare.h"

namespace lmf::kernels::cuda {
namespace {

using testing::DeviceBuffer;
using OpProfilerTest = testing::GpuTest;

const OpTime* Find(const OpProfile& profile, const std::string& op) {
  for (const OpTime& t : profile.ops)
    if (t.op == op) return &t;
  return nullptr;
}

TEST_F(OpProfilerTest, CountsEveryOpAndTheTimesAddUpToTheWindow) {
  const int64_t n = 4096, c = 1024;
  DeviceBuffer x(kernels::testing::RandomNormal(n * c, 1), DType::kBF16),
      w(std::vector<float>(c, 1.0f), DType::kBF16);
  DeviceBuffer out(n * c, DType::kBF16);
  RmsNormForwardParams p;
  p.dtype = DType::kBF16;
  p.N = n;
  p.C = c;
  p.x = x.get();
  p.weight = w.get();
  p.out = out.get();
  Sync();
  absl::StatusOr<std::unique_ptr<OpProfiler>> profiler = OpProfiler::Start(ctx());
  ASSERT_TRUE(profiler.ok()) << profiler.status();
  EXPECT_EQ(OpProfiler::Start(ctx()).status().code(), absl::StatusCode::kFailedPrecondition);
  for (int i = 0; i < 3; ++i) kernels::RmsNormForward(ctx(), p);
  kernels::FillZero(ctx(), out.get(), n * c * 2);
  absl::StatusOr<OpProfile> profile = (*profiler)->Finish();
  ASSERT_TRUE(profile.ok()) << profile.status();
  kernels::RmsNormForward(ctx(), p);  // after Finish: not recorded, and no crash
  Sync();

  ASSERT_EQ(profile->ops.size(), 2u);
  const OpTime* norm = Find(*profile, "RmsNormForward");
  const OpTime* zero = Find(*profile, "fill with zeros");
  ASSERT_NE(norm, nullptr);
  ASSERT_NE(zero, nullptr);
  EXPECT_EQ(norm->calls, 3);
  EXPECT_EQ(zero->calls, 1);
  EXPECT_GT(norm->total_ms, 0.0);
  // Consecutive events: the op times and the tail tile the window (event times have ~0.5 us resolution).
  const double sum = norm->total_ms + zero->total_ms + profile->outside_ops_ms;
  EXPECT_NEAR(sum, profile->window_ms, 1e-2);
  EXPECT_EQ((*profiler)->Finish().status().code(), absl::StatusCode::kFailedPrecondition);
  profiler->reset();
  absl::StatusOr<std::unique_ptr<OpProfiler>> again = OpProfiler::Start(ctx());  // the slot is free again
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST_F(OpProfilerTest, RefusesAHostContext) {
  EXPECT_EQ(OpProfiler::Start(Context::Cpu()).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace lmf::kernels::cuda
