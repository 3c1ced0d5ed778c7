// The CPU row moves of a mixture of experts (moe_rows.h) against their definition on a hand-made dispatch:
// 3 tokens, k = 2, one assignment dropped, rows in expert order. Every value is exact in fp32 (small
// integers and halves), so the comparisons are exact. Then a dispatch large enough to be split over the pool:
// two threads give bit for bit one thread's result.
#include "kernels/moe_rows/moe_rows.h"

#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "gtest/gtest.h"

namespace lmf::kernels {
namespace {

// Assignments a = token * 2 + j: (0,0)->row 2, (0,1)->row 0, (1,0)->row 3, (1,1) dropped, (2,0)->row 1,
// (2,1)->row 4.
const std::vector<int32_t> kRowAssignment = {1, 4, 0, 2, 5};
const std::vector<int32_t> kAssignmentRow = {2, 0, 3, -1, 1, 4};
const std::vector<float> kGates = {0.5f, 2.0f, 1.0f, 3.0f, -1.0f, 0.25f};
constexpr int64_t kN = 3, kK = 2, kC = 2, kM = 5;

TEST(MoeRowsTest, GatherCopiesEachRowsToken) {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  std::vector<float> rows(kM * kC, -7.0f);
  cpu::MoeGather(Context::Cpu(), {DType::kF32, kM, kC, kK, kRowAssignment.data(), x.data(), rows.data()});
  EXPECT_EQ(rows, (std::vector<float>{1, 2, 5, 6, 1, 2, 3, 4, 5, 6}));
}

TEST(MoeRowsTest, CombineSumsKeptRowsWeightedByGates) {
  const std::vector<float> rows = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<float> out(kN * kC, 100.0f);
  MoeCombineParams p{DType::kF32, kN, kK, kC, kAssignmentRow.data(), kGates.data(), rows.data(), out.data(), false};
  cpu::MoeCombine(Context::Cpu(), p);
  // token 0: 0.5 row2 + 2 row0; token 1: 1 row3 (row of (1,1) dropped); token 2: -1 row1 + 0.25 row4.
  const std::vector<float> want = {0.5f * 5 + 2 * 1, 0.5f * 6 + 2 * 2, 7, 8, -3 + 0.25f * 9, -4 + 0.25f * 10};
  EXPECT_EQ(out, want);
  p.accumulate = true;
  cpu::MoeCombine(Context::Cpu(), p);
  for (int64_t i = 0; i < kN * kC; ++i) EXPECT_EQ(out[i], 2 * want[i]) << i;
}

TEST(MoeRowsTest, CombineBackwardWritesRowGradientsAndGateDots) {
  const std::vector<float> rows = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::vector<float> dout = {1, -1, 2, 0.5f, -2, 4};
  std::vector<float> drows(kM * kC, -7.0f), dgates(kN * kK, -7.0f);
  cpu::MoeCombineBackward(Context::Cpu(), {DType::kF32, kN, kK, kC, kAssignmentRow.data(), kGates.data(), rows.data(),
                                           dout.data(), drows.data(), dgates.data()});
  EXPECT_EQ(drows, (std::vector<float>{2, -2, 2, -4, 0.5f, -0.5f, 2, 0.5f, -0.5f, 1}));
  EXPECT_EQ(dgates, (std::vector<float>{5 - 6, 1 - 2, 14 + 4, 0, -2 * 3 + 4 * 4, -18 + 40}));
}

TEST(MoeRowsTest, ScatterAddSumsEachTokensRowsOntoTheBase) {
  const std::vector<float> drows = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::vector<float> base = {0.5f, 0.5f, 1, 1, 2, 2};
  std::vector<float> dx(kN * kC, -7.0f);
  MoeScatterAddParams p{DType::kF32, kN, kK, kC, kAssignmentRow.data(), drows.data(), base.data(), dx.data()};
  cpu::MoeScatterAdd(Context::Cpu(), p);
  EXPECT_EQ(dx, (std::vector<float>{0.5f + 5 + 1, 0.5f + 6 + 2, 1 + 7, 1 + 8, 2 + 3 + 9, 2 + 4 + 10}));
  p.base = nullptr;
  cpu::MoeScatterAdd(Context::Cpu(), p);
  EXPECT_EQ(dx, (std::vector<float>{6, 8, 7, 8, 12, 14}));
}

// Every op on 4096 tokens, k = 2, C = 64 (a random dispatch with every fifth assignment dropped) with the
// given context: the outputs of gather, combine (= then +=), combine backward and scatter-add, concatenated.
std::vector<float> RunAllOps(const Context& ctx) {
  constexpr int64_t n = 4096, k = 2, c = 64;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<int32_t> assignment_row(n * k, -1), row_assignment;
  std::vector<int32_t> order(n * k);
  for (int64_t a = 0; a < n * k; ++a) order[a] = static_cast<int32_t>(a);
  std::shuffle(order.begin(), order.end(), rng);  // rows in a random order of the assignments
  for (int32_t a : order) {
    if (a % 5 == 3) continue;
    assignment_row[a] = static_cast<int32_t>(row_assignment.size());
    row_assignment.push_back(a);
  }
  const int64_t m = static_cast<int64_t>(row_assignment.size());
  std::vector<float> x(n * c), gates(n * k), dout(n * c), base(n * c), drows_in(m * c);
  for (auto* v : {&x, &gates, &dout, &base, &drows_in}) {
    for (float& f : *v) f = normal(rng);
  }
  std::vector<float> rows(m * c), out(n * c), drows(m * c), dgates(n * k), dx(n * c);
  MoeGather(ctx, {DType::kF32, m, c, k, row_assignment.data(), x.data(), rows.data()});
  MoeCombineParams combine{DType::kF32, n, k, c, assignment_row.data(), gates.data(), rows.data(), out.data(), false};
  MoeCombine(ctx, combine);
  combine.accumulate = true;
  MoeCombine(ctx, combine);
  MoeCombineBackward(ctx, {DType::kF32, n, k, c, assignment_row.data(), gates.data(), rows.data(), dout.data(),
                           drows.data(), dgates.data()});
  MoeScatterAdd(ctx, {DType::kF32, n, k, c, assignment_row.data(), drows_in.data(), base.data(), dx.data()});
  std::vector<float> all;
  for (const auto* v : {&rows, &out, &drows, &dgates, &dx}) all.insert(all.end(), v->begin(), v->end());
  return all;
}

TEST(MoeRowsTest, TwoThreadsGiveOneThreadsResultBitForBit) {
  ThreadPool one(1), two(2);
  const std::vector<float> serial = RunAllOps(Context::Cpu(&one));
  const std::vector<float> parallel = RunAllOps(Context::Cpu(&two));
  ASSERT_EQ(serial.size(), parallel.size());
  for (size_t i = 0; i < serial.size(); ++i) ASSERT_EQ(serial[i], parallel[i]) << "element " << i;
}

}  // namespace
}  // namespace lmf::kernels
