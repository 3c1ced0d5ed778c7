// CS336 assignment 2's DDP check (tests/test_ddp_individual_parameters.py on the fixture
// tests/fixtures/ddp_test_{data,labels}.pt; see ../shared/data/cs336/SOURCES.md) with lmforge's kernels and
// its Gloo group: the assignment's ToyModel (fc1 10->10 no bias, ReLU, fc2 10->50 with a frozen bias, ReLU,
// fc3 50->5 no bias, and a frozen parameter [2, 2]) trained with MSE and SGD (lr 0.1) for 5 steps on 2 ranks,
// 10 of the 20 fixture rows each, reshuffled after each step; each parameter's gradient summed over the
// ranks (Collectives::AllReduce) and divided by the world size, as DDP does. Checked as the original checks:
// after the broadcast from rank 0 every rank holds rank 0's weights (rank 1's own start differs); after each
// step rank 0's DDP parameters equal those of single-process training on all 20 rows, to torch.allclose's
// default tolerance (|ddp - single| <= 1e-8 + 1e-5 |single|: the two differ only in the order the
// weight-gradient GEMMs sum the rows); the frozen parameters never change.
//
// Not reproduced from the original, which needs PyTorch: the initial weights (here U(-1/sqrt(in),
// 1/sqrt(in)), torch.nn.Linear's distribution, from std::mt19937 seeded with the rank, where the original
// seeds torch with the rank) and the reshuffle (a Fisher-Yates shuffle from std::mt19937(42 + step), where
// the original calls torch.randperm after torch.manual_seed(42 + step)). The fixture holds the data only: the
// original's expected values are the single-process run, computed here as there. The data comes from
// cs336/derived/a2_ddp_test_data_labels.npz (the .pt tensors as npz); the test skips without LMF_SHARED_DATA.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/shared_data.h"
#include "distributed/collectives.h"
#include "distributed/test_ranks.h"
#include "kernels/activations/activations.h"
#include "kernels/matmul/matmul.h"
#include "kernels/testing/npz.h"
#include "gtest/gtest.h"

namespace lmf::distributed {
namespace {

constexpr int kRows = 20, kIn = 10, kHidden = 10, kWide = 50, kOut = 5, kSteps = 5;
constexpr float kLr = 0.1f;

struct ToyModel {
  std::vector<float> fc1, fc2, fc2_bias, fc3, fixed;  // (10, 10), (50, 10), (50) frozen, (5, 50), (2) frozen

  // The trainable parameters by name, each with its gradient's place in `grads` (same layout).
  std::vector<std::pair<std::string, std::vector<float>*>> Trainable() { return {{"fc1", &fc1}, {"fc2", &fc2}, {"fc3", &fc3}}; }
  std::vector<std::pair<std::string, std::vector<float>*>> All() {
    return {{"fc1", &fc1}, {"fc2", &fc2}, {"fc2_bias", &fc2_bias}, {"fc3", &fc3}, {"fixed", &fixed}};
  }
};

std::vector<float> Uniform(size_t n, int fan_in, std::mt19937& rng) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  std::uniform_real_distribution<float> u(-bound, bound);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

ToyModel InitialModel(int seed) {
  std::mt19937 rng(seed);
  ToyModel m;
  m.fc1 = Uniform(kHidden * kIn, kIn, rng);
  m.fc2 = Uniform(kWide * kHidden, kHidden, rng);
  m.fc2_bias = Uniform(kWide, kHidden, rng);
  m.fc3 = Uniform(kOut * kWide, kWide, rng);
  m.fixed = {2.0f, 2.0f};
  return m;
}

// One forward and backward of the MSE loss (mean over rows x outputs) on `rows` rows of x (R, 10) and
// y (R, 5): the gradients of fc1, fc2, fc3 (written).
std::vector<std::vector<float>> Gradients(ToyModel& m, const float* x, const float* y, int rows) {
  const kernels::Context ctx = kernels::Context::Cpu();
  std::vector<float> pre1(rows * kHidden), h1(rows * kHidden), pre2(rows * kWide), h2(rows * kWide), out(rows * kOut);
  kernels::Matmul(ctx, kernels::LinearParams(rows, kIn, kHidden, x, m.fc1.data(), nullptr, pre1.data()));
  const auto relu = [&](const std::vector<float>& in, std::vector<float>& result) {
    kernels::ActivationForwardParams p;
    p.kind = kernels::Activation::kRelu, p.n = static_cast<int64_t>(in.size()), p.x = in.data(), p.out = result.data();
    kernels::ActivationForward(ctx, p);
  };
  relu(pre1, h1);
  kernels::Matmul(ctx, kernels::LinearParams(rows, kHidden, kWide, h1.data(), m.fc2.data(), m.fc2_bias.data(), pre2.data()));
  relu(pre2, h2);
  kernels::Matmul(ctx, kernels::LinearParams(rows, kWide, kOut, h2.data(), m.fc3.data(), nullptr, out.data()));

  std::vector<float> dout(rows * kOut);  // d mean((out - y)^2) / d out
  for (int i = 0; i < rows * kOut; ++i) dout[i] = 2.0f * (out[i] - y[i]) / static_cast<float>(rows * kOut);
  std::vector<std::vector<float>> grads = {std::vector<float>(m.fc1.size()), std::vector<float>(m.fc2.size()),
                                           std::vector<float>(m.fc3.size())};
  std::vector<float> dh2(rows * kWide), dh1(rows * kHidden);
  const auto backward = [&](const kernels::MatmulParams& forward, const float* dc, float* da, float* db) {
    kernels::MatmulBackwardParams p;
    p.forward = forward, p.dc = dc, p.da = da, p.db = db;
    kernels::MatmulBackward(ctx, p);  // db accumulates into the zeroed gradient
  };
  const auto relu_backward = [&](const std::vector<float>& in, std::vector<float>& d) {
    kernels::ActivationBackwardParams p;
    p.kind = kernels::Activation::kRelu, p.n = static_cast<int64_t>(in.size()), p.x = in.data(), p.dout = d.data(),
    p.dx = d.data();
    kernels::ActivationBackward(ctx, p);
  };
  backward(kernels::LinearParams(rows, kWide, kOut, h2.data(), m.fc3.data(), nullptr, out.data()), dout.data(),
           dh2.data(), grads[2].data());
  relu_backward(pre2, dh2);
  backward(kernels::LinearParams(rows, kHidden, kWide, h1.data(), m.fc2.data(), nullptr, pre2.data()), dh2.data(),
           dh1.data(), grads[1].data());
  relu_backward(pre1, dh1);
  backward(kernels::LinearParams(rows, kIn, kHidden, x, m.fc1.data(), nullptr, pre1.data()), dh1.data(), nullptr,
           grads[0].data());
  return grads;
}

void SgdStep(ToyModel& m, const std::vector<std::vector<float>>& grads) {
  const auto trainable = m.Trainable();
  for (size_t i = 0; i < trainable.size(); ++i) {
    std::vector<float>& p = *trainable[i].second;
    for (size_t j = 0; j < p.size(); ++j) p[j] -= kLr * grads[i][j];
  }
}

// Whether every element is within torch.allclose's default tolerance of `expected`.
bool AllClose(const std::vector<float>& actual, const std::vector<float>& expected) {
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!(std::fabs(actual[i] - expected[i]) <= 1e-8f + 1e-5f * std::fabs(expected[i]))) return false;
  }
  return actual.size() == expected.size();
}

// The fixture's rows reordered by a Fisher-Yates shuffle from std::mt19937(seed), x (20, 10) and y (20, 5).
void Shuffle(std::vector<float>& x, std::vector<float>& y, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int> order(kRows);
  for (int i = 0; i < kRows; ++i) order[i] = i;
  for (int i = kRows - 1; i > 0; --i) std::swap(order[i], order[std::uniform_int_distribution<int>(0, i)(rng)]);
  std::vector<float> nx(x.size()), ny(y.size());
  for (int i = 0; i < kRows; ++i) {
    std::copy_n(x.begin() + order[i] * kIn, kIn, nx.begin() + i * kIn);
    std::copy_n(y.begin() + order[i] * kOut, kOut, ny.begin() + i * kOut);
  }
  x = std::move(nx), y = std::move(ny);
}

// One rank of the original test: the DDP model from rank 0's broadcast start, its 10 rows of each step; the
// single-process model from this rank's own start, all 20 rows (compared on rank 0, where the starts agree).
int TrainRank(Collectives& group, std::vector<float> x, std::vector<float> y) {
  testing::Checks checks(group.rank());
  const int rank = group.rank(), world = group.world_size();
  ToyModel single = InitialModel(rank);
  ToyModel ddp = single;
  for (auto& [name, p] : ddp.All()) {
    if (!checks.Ok(group.Broadcast(p->data(), p->size(), 0), "broadcast " + name)) return checks.exit_code();
  }
  ToyModel rank0 = InitialModel(0);
  for (size_t i = 0; i < ddp.All().size(); ++i) {
    const std::string name = ddp.All()[i].first;
    checks.Expect(*ddp.All()[i].second == *rank0.All()[i].second, name + " is rank 0's after the broadcast");
    if (rank != 0 && name != "fixed")
      checks.Expect(*single.All()[i].second != *ddp.All()[i].second, name + ": rank 1 started elsewhere");
  }
  const int local = kRows / world;
  for (int step = 0; step < kSteps; ++step) {
    SgdStep(single, Gradients(single, x.data(), y.data(), kRows));
    std::vector<std::vector<float>> grads =
        Gradients(ddp, x.data() + rank * local * kIn, y.data() + rank * local * kOut, local);
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!checks.Ok(group.AllReduce(Buffer::Host(grads[i].data(), grads[i].size()), ReduceOp::kSum),
                     absl::StrCat("step ", step, ": the sum of ", ddp.Trainable()[i].first, "'s gradient")))
        return checks.exit_code();
      for (float& g : grads[i]) g /= static_cast<float>(world);
    }
    SgdStep(ddp, grads);
    if (rank == 0) {
      for (size_t i = 0; i < ddp.All().size(); ++i) {
        checks.Expect(AllClose(*ddp.All()[i].second, *single.All()[i].second),
                      absl::StrCat("step ", step, ": ", ddp.All()[i].first, " equals single-process training's"));
      }
    }
    Shuffle(x, y, 42 + step);
  }
  checks.Expect(ddp.fixed == std::vector<float>{2.0f, 2.0f} && ddp.fc2_bias == rank0.fc2_bias,
                "the frozen parameters kept their values");
  return checks.exit_code();
}

TEST(Cs336DdpFixture, TwoRanksTrainAsOneProcess) {
  LMF_SHARED_DATA_OR_SKIP(path, "cs336/derived/a2_ddp_test_data_labels.npz");
  absl::StatusOr<kernels::testing::NpzFile> npz = kernels::testing::NpzFile::Read(path);
  ASSERT_TRUE(npz.ok()) << npz.status();
  absl::StatusOr<std::vector<float>> x = npz->Floats("data", kRows * kIn), y = npz->Floats("labels", kRows * kOut);
  ASSERT_TRUE(x.ok() && y.ok()) << x.status() << " " << y.status();
  testing::ExpectAllPassed(testing::RunRanks(2, [&](Collectives& group) { return TrainRank(group, *x, *y); }));
}

}  // namespace
}  // namespace lmf::distributed
