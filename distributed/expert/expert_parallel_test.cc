// Expert parallelism inside the data-parallel step equals the single-process step: on 2 Gloo processes
// (ep=2) and on 4 (ep=4; data=2 x ep=2), a small mixture-of-experts model (both layers MoE, shared experts,
// balancing loss, router z-loss and the auxiliary-loss-free bias; dropless, and with a capacity that drops;
// and with noisy top-k gating, whose noise is keyed by each token's index in the step, so that every layout
// draws one process's noise, in the second layer too) takes two optimizer steps of 4 micro-batches, and
// every rank checks against the same steps run here in one process: the loss, the aux loss and the gradient norm, every gradient it holds (its expert blocks
// under their global names, and every dense one), its weights after each update and the expert-selection
// biases after each EndStep. Tolerance: fp32 sums taken in another order (a rank's micro-batches first, then
// over ranks; the expert rows in another order), 1e-5 of the largest value of each compared set (relative
// 1e-5 for scalars), about 100x the rounding of such sums and far below any real difference (a missing
// rank's share changes a gradient by half).
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distributed/data_parallel_step.h"
#include "distributed/expert/expert_exchange.h"
#include "distributed/mesh.h"
#include "distributed/step_testing.h"
#include "distributed/test_ranks.h"
#include "gtest/gtest.h"
#include "kernels/core/context.h"
#include "model/optimizer/adamw.h"

namespace lmf::distributed::expert {
namespace {

using testing::Checks;
using testing::ExpectAllPassed;
using testing::RandomBatches;
using testing::RunRanks;

constexpr int64_t kB = 2, kT = 8, kMicroBatches = 4, kSteps = 2;

model::ModelConfig TinyMoe(double capacity_factor, bool noisy_gating = false) {
  model::ModelConfig c = model::Cs336Config(/*vocab=*/32, /*context=*/8, /*d_model=*/16, /*layers=*/2,
                                            /*heads=*/2, /*d_ff=*/32);
  model::MoeSpec moe;
  moe.n_experts = 4, moe.top_k = 2, moe.d_expert = 16, moe.shared_d_ff = 8;
  moe.aux_loss = 0.01, moe.router_z_loss = 0.001, moe.expert_bias = true, moe.bias_update_rate = 1e-2;
  moe.capacity_factor = capacity_factor;
  moe.noisy_gating = noisy_gating;
  c.moe = moe;
  return c;
}

// Name -> values of every parameter's gradient or value, or of every buffer.
using Tensors = std::map<std::string, std::vector<float>>;
Tensors Grads(const model::LanguageModel& m) {
  Tensors out;
  m.VisitParameters([&](const std::string& name, const model::Parameter& p) {
    out[name].assign(p.grad.data<float>(), p.grad.data<float>() + p.grad.numel());
  });
  return out;
}
Tensors Values(const model::LanguageModel& m) {
  Tensors out;
  m.VisitParameters([&](const std::string& name, const model::Parameter& p) {
    out[name].assign(p.data(), p.data() + p.value.numel());
  });
  m.VisitBuffers([&](const std::string& name, const kernels::Tensor& t) {
    out[name].assign(t.data<float>(), t.data<float>() + t.numel());
  });
  return out;
}

// Every tensor of `got` is in `want` and agrees to 1e-5 of the largest |value| in `want`.
void ExpectClose(Checks& checks, const Tensors& got, const Tensors& want, const std::string& what) {
  float largest = 0;
  for (const auto& [name, values] : want) {
    for (float v : values) largest = std::max(largest, std::fabs(v));
  }
  for (const auto& [name, values] : got) {
    auto it = want.find(name);
    if (!checks.Expect(it != want.end() && it->second.size() == values.size(), what + ": " + name + " unknown")) {
      continue;
    }
    float worst = 0;
    for (size_t i = 0; i < values.size(); ++i) worst = std::max(worst, std::fabs(values[i] - it->second[i]));
    checks.Expect(worst <= 1e-5f * largest, absl::StrCat(what, " ", name, ": off by ", worst, " (largest ", largest, ")"));
  }
}

bool Near(double a, double b) { return std::fabs(a - b) <= 1e-5 * std::max(std::fabs(b), 1e-3); }

int CheckExpertParallel(Collectives& world, int data, int expert, double capacity_factor, bool overlap,
                        bool noisy_gating = false) {
  Checks checks(world.rank());
  absl::StatusOr<std::unique_ptr<ParallelMesh>> mesh = ParallelMesh::Build(world, MeshShape{data, 1, expert});
  if (!checks.Ok(mesh.status(), "mesh")) return checks.exit_code();
  GroupExpertExchange exchange((*mesh)->expert());
  const model::ModelConfig config = TinyMoe(capacity_factor, noisy_gating);

  // The single-process run of the same steps, on every rank.
  std::unique_ptr<model::LanguageModel> one = *model::LanguageModel::Create(config, kernels::Context::Cpu());
  one->InitializeParameters(5);
  model::AdamW one_adamw(model::AdamWConfig{}, *one);
  model::SingleProcessStep one_step;
  RandomBatches one_data(config.vocab_size, kB * kT, 11);

  absl::StatusOr<std::unique_ptr<model::LanguageModel>> ep =
      model::LanguageModel::Create(config, kernels::Context::Cpu(), kernels::DType::kF32, {}, &exchange);
  if (!checks.Ok(ep.status(), "expert-parallel model")) return checks.exit_code();
  (*ep)->InitializeParameters(5);
  model::AdamW ep_adamw(model::AdamWConfig{}, **ep);
  DataParallelStep ep_step(world, overlap, ExpertParallelism{&(*mesh)->data(), &(*mesh)->expert(), &exchange});
  RandomBatches ep_data(config.vocab_size, kB * kT, 11);
  if (!checks.Ok(ep_step.SyncParameters(**ep), "sync")) return checks.exit_code();
  checks.Expect(Grads(**ep).size() < Grads(*one).size(), "a rank holds part of the experts");

  model::StepInput input;
  input.micro_batches = kMicroBatches, input.b = kB, input.t = kT, input.lr = 1e-2, input.seed = 21;
  for (int step = 1; step <= kSteps; ++step) {
    input.step = step - 1;
    absl::StatusOr<model::StepResult> want = one_step.Step(*one, one_adamw, one_data, input);
    absl::StatusOr<model::StepResult> got = ep_step.Step(**ep, ep_adamw, ep_data, input);
    if (!checks.Ok(want.status(), "one process") || !checks.Ok(got.status(), "expert parallel")) break;
    const std::string at = absl::StrCat("step ", step);
    checks.Expect(Near(got->loss, want->loss), absl::StrCat(at, " loss ", got->loss, " vs ", want->loss));
    checks.Expect(want->aux_loss > 0 && Near(got->aux_loss, want->aux_loss),
                  absl::StrCat(at, " aux loss ", got->aux_loss, " vs ", want->aux_loss));
    checks.Expect(Near(got->grad_norm, want->grad_norm),
                  absl::StrCat(at, " gradient norm ", got->grad_norm, " vs ", want->grad_norm));
    checks.Expect(Near(got->expert_load_max_over_mean, want->expert_load_max_over_mean) &&
                      Near(got->dropped_share, want->dropped_share),
                  absl::StrCat(at, " expert load ", got->expert_load_max_over_mean, " vs ",
                               want->expert_load_max_over_mean, ", dropped ", got->dropped_share, " vs ",
                               want->dropped_share));
    if (capacity_factor > 0) checks.Expect(want->dropped_share > 0, at + ": the capacity drops some rows");
    ExpectClose(checks, Grads(**ep), Grads(*one), at + " gradient");
    ExpectClose(checks, Values(**ep), Values(*one), at + " weights and biases after the update");
  }
  return checks.exit_code();
}

TEST(ExpertParallel, TwoRanksOfTwoExpertBlocksEqualOneProcess) {
  ExpectAllPassed(RunRanks(2, [](Collectives& g) { return CheckExpertParallel(g, 1, 2, 0.0, true); }));
}

TEST(ExpertParallel, FourRanksOfOneExpertEachEqualOneProcessWithDropping) {
  ExpectAllPassed(RunRanks(4, [](Collectives& g) { return CheckExpertParallel(g, 1, 4, 1.0, true); }));
}

TEST(ExpertParallel, DataTwoByExpertTwoEqualsOneProcess) {
  ExpectAllPassed(RunRanks(4, [](Collectives& g) { return CheckExpertParallel(g, 2, 2, 0.0, true); }));
  ExpectAllPassed(RunRanks(4, [](Collectives& g) { return CheckExpertParallel(g, 2, 2, 1.0, false); }));
}

TEST(ExpertParallel, NoisyGatingOnTwoAndOnDataTwoByExpertTwoRanksEqualsOneProcess) {
  ExpectAllPassed(RunRanks(2, [](Collectives& g) { return CheckExpertParallel(g, 1, 2, 0.0, true, true); }));
  ExpectAllPassed(RunRanks(4, [](Collectives& g) { return CheckExpertParallel(g, 2, 2, 1.0, false, true); }));
}

TEST(ExpertParallel, ExpertsThatDoNotDivideOverTheRanksAreRefused) {
  ExpectAllPassed(RunRanks(2, [](Collectives& g) {
    Checks checks(g.rank());
    GroupExpertExchange exchange(g);
    model::ModelConfig config = TinyMoe(0.0);
    config.moe->n_experts = 3;
    checks.FailsWith(model::LanguageModel::Create(config, kernels::Context::Cpu(), kernels::DType::kF32, {}, &exchange)
                         .status(),
                     {"n_experts=3", "2 expert-parallel ranks"}, "3 experts over 2 ranks");
    return checks.exit_code();
  }));
}

}  // namespace
}  // namespace lmf::distributed::expert
