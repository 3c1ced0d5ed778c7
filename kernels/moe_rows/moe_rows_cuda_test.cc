// CUDA row moves of a mixture of experts (moe_rows.h) against the CPU kernels on the same random dispatch:
// N = 37 tokens, k = 3, C = 200 (the channel loop wraps a 128-thread block), 8 experts, a tenth of the
// assignments dropped. Tagged gpu: skips without a CUDA device (runs in the GPU bundle and, emulated, in CI).
// Tolerances: fp32 |gpu - cpu| <= 1e-5 |cpu| + 1e-6 (the dgates dot: atol 1e-4, an fp32 block sum of 200
// products against the CPU's double sum); bf16 the STYLE.md rule with multiple 2 (the kernels store nothing
// in bf16 but their outputs; dgates is fp32, compared unrounded).
#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/moe_rows/moe_rows.h"
#include "kernels/testing/compare.h"

namespace lmf::kernels::cuda {
namespace {

using ::lmf::kernels::testing::RandomNormal;
using testing::DeviceBuffer;
using testing::RoundTo;

constexpr int64_t kN = 37, kK = 3, kC = 200, kExperts = 8;

// A random dispatch: each assignment an expert, a tenth dropped, rows sorted by expert then assignment.
struct RandomDispatch {
  std::vector<int32_t> row_assignment, assignment_row;
  std::vector<float> gates;
  int64_t m = 0;
};
RandomDispatch MakeDispatch() {
  std::mt19937 gen(29);
  std::uniform_int_distribution<int> expert(0, kExperts - 1), drop(0, 9);
  std::vector<int> of(kN * kK);
  for (int& e : of) e = drop(gen) == 0 ? -1 : expert(gen);
  RandomDispatch d;
  d.assignment_row.assign(kN * kK, -1);
  for (int e = 0; e < kExperts; ++e) {
    for (int64_t a = 0; a < kN * kK; ++a) {
      if (of[a] != e) continue;
      d.assignment_row[a] = static_cast<int32_t>(d.row_assignment.size());
      d.row_assignment.push_back(static_cast<int32_t>(a));
    }
  }
  d.m = static_cast<int64_t>(d.row_assignment.size());
  d.gates = RandomNormal(kN * kK, 30);
  return d;
}

class MoeRowsCudaTest : public testing::DTypeGpuTest {};

TEST_P(MoeRowsCudaTest, GatherAndCombineMatchTheCpu) {
  const RandomDispatch d = MakeDispatch();
  const auto x = RandomNormal(kN * kC, 31), rows_in = RandomNormal(d.m * kC, 32), out0 = RandomNormal(kN * kC, 33);
  // The CPU on the unrounded and on the rounded inputs; the combine accumulates onto out0.
  const auto run_cpu = [&](const std::vector<float>& xs, const std::vector<float>& rs, std::vector<float>& rows,
                           std::vector<float>& out) {
    rows.assign(d.m * kC, 0.0f);
    cpu::MoeGather(cpu_, {DType::kF32, d.m, kC, kK, d.row_assignment.data(), xs.data(), rows.data()});
    cpu::MoeCombine(cpu_, {DType::kF32, kN, kK, kC, d.assignment_row.data(), d.gates.data(), rs.data(), out.data(),
                           true});
  };
  std::vector<float> rows, out = out0, nrows, nout = RoundTo(out0, dt());
  run_cpu(x, rows_in, rows, out);
  run_cpu(RoundTo(x, dt()), RoundTo(rows_in, dt()), nrows, nout);
  const DeviceBuffer ra = DeviceBuffer::Ints(d.row_assignment), ar = DeviceBuffer::Ints(d.assignment_row);
  DeviceBuffer gx(x, dt()), grows(d.m * kC, dt()), grows_in(rows_in, dt()), gout(out0, dt()),
      ggates(d.gates, DType::kF32);
  ASSERT_TRUE(cuda::MoeGather(ctx(), {dt(), d.m, kC, kK, ra.as<int32_t>(), gx.get(), grows.get()}).ok());
  ASSERT_TRUE(cuda::MoeCombine(ctx(), {dt(), kN, kK, kC, ar.as<int32_t>(), ggates.as<float>(), grows_in.get(),
                                       gout.get(), true})
                  .ok());
  Sync();
  Expect("gather rows", grows.ToFloats(), rows, nrows);
  Expect("combine out (+=)", gout.ToFloats(), out, nout);
}

TEST_P(MoeRowsCudaTest, CombineBackwardAndScatterAddMatchTheCpu) {
  const RandomDispatch d = MakeDispatch();
  const auto rows = RandomNormal(d.m * kC, 34), dout = RandomNormal(kN * kC, 35), base = RandomNormal(kN * kC, 36);
  const auto run_cpu = [&](const std::vector<float>& rs, const std::vector<float>& ds, std::vector<float>& drows,
                           std::vector<float>& dgates, std::vector<float>& dx) {
    drows.assign(d.m * kC, 0.0f), dgates.assign(kN * kK, 0.0f), dx.assign(kN * kC, 0.0f);
    cpu::MoeCombineBackward(cpu_, {DType::kF32, kN, kK, kC, d.assignment_row.data(), d.gates.data(), rs.data(),
                                   ds.data(), drows.data(), dgates.data()});
    // The scatter-add of rows (as drows) onto the fp32 base.
    cpu::MoeScatterAdd(cpu_, {DType::kF32, kN, kK, kC, d.assignment_row.data(), rs.data(), base.data(), dx.data()});
  };
  std::vector<float> drows, dgates, dx, ndrows, ndgates, ndx;
  run_cpu(rows, dout, drows, dgates, dx);
  run_cpu(RoundTo(rows, dt()), RoundTo(dout, dt()), ndrows, ndgates, ndx);
  const DeviceBuffer ar = DeviceBuffer::Ints(d.assignment_row);
  DeviceBuffer grows(rows, dt()), gdout(dout, dt()), gdrows(d.m * kC, dt()), gdgates(kN * kK, DType::kF32),
      ggates(d.gates, DType::kF32), gbase(base, DType::kF32), gdx(kN * kC, dt());
  gdgates.Fill(-7.0f);  // the dropped assignments' zeros must be written
  ASSERT_TRUE(cuda::MoeCombineBackward(ctx(), {dt(), kN, kK, kC, ar.as<int32_t>(), ggates.as<float>(), grows.get(),
                                               gdout.get(), gdrows.get(), gdgates.as<float>()})
                  .ok());
  ASSERT_TRUE(cuda::MoeScatterAdd(ctx(), {dt(), kN, kK, kC, ar.as<int32_t>(), grows.get(), gbase.as<float>(),
                                          gdx.get()})
                  .ok());
  Sync();
  Expect("combine drows", gdrows.ToFloats(), drows, ndrows);
  Expect("combine dgates (fp32)", gdgates.ToFloats(), dgates, ndgates, /*rounded_output=*/false, 2.0, 1e-5, 1e-4);
  Expect("scatter-add dx", gdx.ToFloats(), dx, ndx);
}

INSTANTIATE_TEST_SUITE_P(DTypes, MoeRowsCudaTest, testing::GpuTestDTypes(), testing::DTypeTestName);

}  // namespace
}  // namespace lmf::kernels::cuda
