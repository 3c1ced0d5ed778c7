// PipelineStep on Gloo processes over loopback: training steps over a data x pipeline mesh equal
// single-process gradient accumulation (SingleProcessStep) over the same micro-batches. Without clipping
// and with one data replica the losses and weights are bit for bit the single process's (PipelineStage's
// gradients are; each chunk's AdamW update reads only them). With two data replicas the gradients are
// summed in another order ((a + b) + (c + d) instead of a + b + c + d), and with clipping the global norm
// is summed over the stages in another order: those agree to fp32 rounding, amplified over 3 AdamW steps
// (whose update divides by sqrt(v) + eps): 1e-6 relative in the loss and 1e-5 of the largest weight. With
// ZeRO-1 (each chunk's moments sharded over the data group, owners broadcasting their update) two replicas
// agree with the single process as closely, untied and tied (the token table's two copies, each sharded over
// its own stage's data group, stay equal), and every replica holds the same weights; under pipeline x
// expert too (the dense moments over the stage's ranks, the expert blocks' over the data group). Every step's gradient
// noise scale (noise_grad_sq, noise_trace) is the one the single process logs (data = 1) or DataParallelStep
// over the same replicas (data = 2), to fp32 rounding; none with tied embeddings or ZB-H1. A rank that dies
// during a step makes the others fail, naming it (an expert peer under pipeline x expert too). ZB-H1 (its
// backward split into input and weight gradients) is checked the same way, bit for bit on 2 and 4 stages.
// Mixtures of experts (noisy gating, aux losses, expert bias, capacity) are checked the same way, and
// pipeline x expert against data x expert without a pipeline and against the single process (the tests say
// to what).
#include "distributed/pipeline/pipeline_step.h"

#include <unistd.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distributed/data_parallel_step.h"
#include "distributed/expert/expert_exchange.h"
#include "distributed/step_testing.h"
#include "distributed/test_ranks.h"
#include "distributed/zero.h"
#include "gtest/gtest.h"
#include "kernels/core/context.h"

namespace lmf::distributed::pipeline {
namespace {

using testing::Checks;
using testing::ExpectAllPassed;
using testing::RandomBatches;
using testing::RunRanks;

constexpr int64_t kB = 2, kT = 8;
constexpr int kSteps = 3;

model::ModelConfig Untied() { return model::Cs336Config(61, 16, 32, /*n_layers=*/4, 4, 64); }
model::ModelConfig Tied() { return model::Gpt2Config(59, 16, 32, /*n_layers=*/4, 4); }

std::unique_ptr<model::LanguageModel> Make(const model::ModelConfig& c, model::LayerRange range = {},
                                           model::moe::ExpertExchange* exchange = nullptr) {
  std::unique_ptr<model::LanguageModel> m =
      *model::LanguageModel::Create(c, kernels::Context::Cpu(), kernels::DType::kF32, range, exchange);
  m->InitializeParameters(/*seed=*/5);
  return m;
}

// A mixture of experts in layers 1-3 (layer 0 dense), so both halves of a 2-stage split hold MoE layers:
// noisy top-k gating (its noise keyed by the seed, the step and each token's index in the step), the
// balancing loss and router z-loss, the auxiliary-loss-free expert bias (updated from the step's expert
// loads), and a capacity that drops assignments (the dropped share).
model::ModelConfig Moe() {
  model::ModelConfig c = model::Cs336Config(61, 16, 32, /*n_layers=*/4, 4, 64);
  model::MoeSpec moe;
  moe.n_experts = 4, moe.top_k = 2, moe.d_expert = 16, moe.shared_d_ff = 16;
  moe.aux_loss = 0.01, moe.router_z_loss = 0.001, moe.expert_bias = true, moe.bias_update_rate = 1e-2;
  moe.noisy_gating = true, moe.capacity_factor = 1.0;
  c.moe = moe;
  c.first_k_dense = 1;
  return c;
}

// Step `step` (0-based) of the run with seed 11: the key of its training forwards' draws.
model::StepInput Input(int micro_batches, int step = 0) {
  model::StepInput input;
  input.micro_batches = micro_batches;
  input.b = kB;
  input.t = kT;
  input.lr = 3e-3;
  input.seed = 11;
  input.step = step;
  return input;
}

// A mixture of experts' step metrics: the auxiliary losses (with the same weights, sums of the same doubles
// taken in another order, per chunk and then over the ranks: 1e-12 relative; else as the loss, 1e-6), the
// expert loads gathered from the stages, in layer order, and the dropped share (whole-number counts summed
// exactly: equal; with weights that differ by rounding too, as no token of these steps is within rounding of
// a tie between two experts).
void ExpectSameExpertMetrics(const model::StepResult& want, const model::StepResult& got, bool exact,
                             const std::string& what, Checks& checks) {
  checks.Expect(std::fabs(got.aux_loss - want.aux_loss) <= (exact ? 1e-12 : 1e-6) * std::fabs(want.aux_loss),
                absl::StrCat(what, ": aux loss ", got.aux_loss, " vs single process ", want.aux_loss));
  checks.Expect(got.expert_loads == want.expert_loads,
                absl::StrCat(what, ": ", got.expert_loads.size(), " layers' expert loads vs the single process's ",
                             want.expert_loads.size(), " (or other values)"));
  checks.Expect(got.dropped_share == want.dropped_share && got.expert_load_max_over_mean ==
                                                              want.expert_load_max_over_mean,
                absl::StrCat(what, ": dropped share ", got.dropped_share, " vs ", want.dropped_share,
                             ", max/mean load ", got.expert_load_max_over_mean, " vs ",
                             want.expert_load_max_over_mean));
}

struct Case {
  explicit Case(model::ModelConfig c) : config(std::move(c)) {}
  model::ModelConfig config;
  int data = 1, pipeline = 2, expert = 1, chunks = 1, micro_batches = 4;
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  double max_grad_norm = 0;           // 0: no clipping
  std::vector<int64_t> stage_layers;  // empty: the even split
  bool exact = true;
  bool zero = false;  // ZeRO-1 over the stage's replicas (ShardChunk)
};

// The gradient noise scale's parts of a PipelineStep step against the reference's (the same micro-batches
// in one process, or split over DataParallelStep's replicas as the pipeline's replicas split them). Each part
// is a difference of |g_small|^2 and |G_big|^2 terms, which the two runs sum in other orders (the norm over
// the stages, the gradients over the replicas): agreeing to fp32 rounding relative to the terms' size (1e-6
// of it; measured at most 1e-7 over 3 steps, where the weights' rounding differences grow).
void ExpectNoiseScale(const Case& c, const model::StepResult& want, const model::StepResult& got,
                      const std::string& what, Checks& checks) {
  // Not measured with tied embeddings (the first micro-batch's table gradient spans two stages) nor under
  // ZB-H1 (its weight gradients land after later micro-batches' input gradients have added the norms' gains).
  // Nor with experts spread over ranks (a rank's expert gradients hold other ranks' tokens).
  if (c.config.tied_embeddings || c.kind == ScheduleKind::kZeroBubbleH1 || c.expert > 1) {
    checks.Expect(std::isnan(got.noise_trace) && std::isnan(got.noise_grad_sq),
                  absl::StrCat(what, ": tied embeddings or a split backward, noise scale ", got.noise_trace, " / ",
                               got.noise_grad_sq, " (want none)"));
    return;
  }
  const double small = kB * kT, big = small * c.micro_batches;
  const double big_sq = want.grad_norm * want.grad_norm;
  const double small_sq = big_sq + want.noise_trace * (1 / small - 1 / big);
  const double grad_sq_scale = (big * big_sq + small * small_sq) / (big - small);
  const double trace_scale = (small_sq + big_sq) / (1 / small - 1 / big);
  checks.Expect(std::isfinite(want.noise_trace) && std::isfinite(want.noise_grad_sq),
                absl::StrCat(what, ": the reference measures the noise scale"));
  checks.Expect(std::fabs(got.noise_grad_sq - want.noise_grad_sq) <= 1e-6 * grad_sq_scale,
                absl::StrCat(what, ": noise_grad_sq ", got.noise_grad_sq, " vs ", want.noise_grad_sq));
  checks.Expect(std::fabs(got.noise_trace - want.noise_trace) <= 1e-6 * trace_scale,
                absl::StrCat(what, ": noise_trace ", got.noise_trace, " vs ", want.noise_trace));
}

// Name -> values of a model's parameters.
std::map<std::string, std::vector<float>> Weights(const model::LanguageModel& m) {
  std::map<std::string, std::vector<float>> out;
  m.VisitParameters([&](const std::string& name, const model::Parameter& p) {
    out[name].assign(p.value.data<float>(), p.value.data<float>() + p.value.numel());
  });
  return out;
}

// Pipeline x expert's second reference: the same micro-batches over data x expert without a pipeline
// (DataParallelStep over the stage's ranks, whole models holding the same expert blocks, the same exchange
// order), which the pipeline only splits by layers. Its steps and weights into *steps and *weights.
bool RunDataByExpert(const Case& c, ParallelMesh& mesh, const model::AdamWConfig& adamw,
                     std::vector<model::StepResult>* steps, std::map<std::string, std::vector<float>>* weights,
                     Checks& checks) {
  absl::StatusOr<std::unique_ptr<ParallelMesh>> flat = ParallelMesh::Build(mesh.stage(), {c.data, 1, c.expert});
  if (!checks.Ok(flat.status(), "data x expert mesh")) return false;
  expert::GroupExpertExchange exchange((*flat)->expert());
  std::unique_ptr<model::LanguageModel> replica = Make(c.config, {}, &exchange);
  model::AdamW optimizer(adamw, *replica);
  DataParallelStep replicas(mesh.stage(), /*overlap=*/false,
                            ExpertParallelism{&(*flat)->data(), &(*flat)->expert(), &exchange});
  RandomBatches data(c.config.vocab_size, kB * kT, 17);
  for (int step = 0; step < kSteps; ++step) {
    absl::StatusOr<model::StepResult> r = replicas.Step(*replica, optimizer, data, Input(c.micro_batches, step));
    if (!checks.Ok(r.status(), "data x expert step")) return false;
    steps->push_back(*r);
  }
  *weights = Weights(*replica);
  return true;
}

// ZeRO-1's shards of one chunk: its dense parameters' owners among the stage's replicas (mesh.stage(): the
// data group without experts spread over ranks) into *owners; with them, each expert block's among the data
// ranks that hold it into *expert_owners; *owns: what this rank's optimizer keeps.
void ShardChunk(const model::LanguageModel& chunk, ParallelMesh& mesh, std::vector<std::map<std::string, int>>* owners,
                std::vector<std::map<std::string, int>>* expert_owners, model::AdamW::Owns* owns) {
  if (mesh.shape().expert == 1) {
    owners->push_back(ShardOptimizerState(chunk, mesh.stage().world_size()));
    *owns = OwnedBy(owners->back(), mesh.stage().rank());
    return;
  }
  owners->push_back(ShardOptimizerState(chunk, mesh.stage().world_size(),
                                        [](const model::Parameter& p) { return !p.expert_shard; }));
  expert_owners->push_back(ShardOptimizerState(chunk, mesh.data().world_size(),
                                               [](const model::Parameter& p) { return p.expert_shard; }));
  *owns = [dense = OwnedBy(owners->back(), mesh.stage().rank()),
           blocks = OwnedBy(expert_owners->back(), mesh.data().rank())](const std::string& name) {
    return dense(name) || blocks(name);
  };
}

void ExpectEqualsSingleProcess(const Case& c) {
  SCOPED_TRACE(absl::StrCat(ScheduleKindName(c.kind), " data=", c.data, " pipeline=", c.pipeline, " expert=",
                            c.expert, " chunks=", c.chunks, " clip=", c.max_grad_norm));
  ExpectAllPassed(RunRanks(c.data * c.pipeline * c.expert, [&](Collectives& world) {
    Checks checks(world.rank());
    model::AdamWConfig adamw;
    adamw.max_grad_norm = c.max_grad_norm;
    // The reference: every micro-batch in this process.
    std::unique_ptr<model::LanguageModel> whole = Make(c.config);
    model::AdamW whole_optimizer(adamw, *whole);
    model::SingleProcessStep single;
    RandomBatches single_data(c.config.vocab_size, kB * kT, 17);
    std::vector<model::StepResult> want_steps;
    for (int step = 0; step < kSteps; ++step) {
      want_steps.push_back(*single.Step(*whole, whole_optimizer, single_data, Input(c.micro_batches, step)));
    }
    std::map<std::string, std::vector<float>> want = Weights(*whole), want_buffers;
    whole->VisitBuffers([&](const std::string& name, const kernels::Tensor& t) {
      want_buffers[name].assign(t.data<float>(), t.data<float>() + t.numel());
    });

    absl::StatusOr<std::unique_ptr<ParallelMesh>> mesh =
        ParallelMesh::Build(world, {c.data, c.pipeline, c.expert});
    if (!checks.Ok(mesh.status(), "mesh")) return checks.exit_code();
    // With experts spread over ranks the weights and losses are checked against data x expert without a
    // pipeline (`exact`: bit for bit), the losses also against the single process (to rounding, above).
    std::vector<model::StepResult> want_flat;
    std::map<std::string, std::vector<float>> single_weights;
    if (c.expert > 1) {
      single_weights = std::move(want);
      if (!RunDataByExpert(c, **mesh, adamw, &want_flat, &want, checks)) return checks.exit_code();
    }
    // The gradient noise scale's reference: the micro-batches split as plain data parallelism splits them
    // (the single process at data = 1; else DataParallelStep over this stage's data group, whole models).
    std::vector<model::StepResult> want_noise = want_steps;
    if (c.data > 1 && c.expert == 1) {
      std::unique_ptr<model::LanguageModel> replica = Make(c.config);
      model::AdamW replica_optimizer(adamw, *replica);
      DataParallelStep replicas((*mesh)->data(), /*overlap=*/false);
      RandomBatches replica_data(c.config.vocab_size, kB * kT, 17);
      for (int step = 0; step < kSteps; ++step) {
        absl::StatusOr<model::StepResult> r =
            replicas.Step(*replica, replica_optimizer, replica_data, Input(c.micro_batches, step));
        if (!checks.Ok(r.status(), "DataParallelStep")) return checks.exit_code();
        want_noise[static_cast<size_t>(step)] = *r;
      }
    }
    absl::StatusOr<Schedule> schedule =
        MakeSchedule(c.kind, c.pipeline, c.chunks, c.micro_batches / (c.data * c.expert));
    if (!checks.Ok(schedule.status(), "MakeSchedule")) return checks.exit_code();
    absl::StatusOr<std::vector<model::LayerRange>> stages =
        StageRanges(c.config.n_layers, schedule->num_stages(), c.stage_layers);
    if (!checks.Ok(stages.status(), "StageRanges")) return checks.exit_code();
    std::vector<std::unique_ptr<model::LanguageModel>> owned;
    std::vector<std::unique_ptr<model::AdamW>> owned_optimizers;
    std::vector<model::LanguageModel*> chunks;
    std::vector<model::AdamW*> optimizers;
    std::vector<std::map<std::string, int>> owners, expert_owners;
    // Experts spread over the stage's expert group: each chunk's MoE layers exchange rows through it.
    std::unique_ptr<expert::GroupExpertExchange> exchange;
    if (c.expert > 1) exchange = std::make_unique<expert::GroupExpertExchange>((*mesh)->expert());
    for (int chunk = 0; chunk < c.chunks; ++chunk) {
      owned.push_back(
          Make(c.config, (*stages)[schedule->stage((*mesh)->coordinates().pipeline, chunk)], exchange.get()));
      model::AdamW::Owns owns = nullptr;
      if (c.zero) ShardChunk(*owned.back(), **mesh, &owners, &expert_owners, &owns);
      owned_optimizers.push_back(std::make_unique<model::AdamW>(adamw, *owned.back(), owns));
      chunks.push_back(owned.back().get());
      optimizers.push_back(owned_optimizers.back().get());
    }
    absl::StatusOr<std::unique_ptr<PipelineStep>> step =
        PipelineStep::Create(world, **mesh, *schedule, chunks, optimizers, *stages, exchange.get());
    if (!checks.Ok(step.status(), "Create")) return checks.exit_code();
    if (c.zero && !checks.Ok((*step)->ShardOptimizerState(owners, expert_owners), "ShardOptimizerState")) {
      return checks.exit_code();
    }
    if (!checks.Ok((*step)->SyncParameters(*chunks[0]), "SyncParameters")) return checks.exit_code();
    RandomBatches data(c.config.vocab_size, kB * kT, 17);
    for (int s = 0; s < kSteps; ++s) {
      absl::StatusOr<model::StepResult> result =
          (*step)->Step(*chunks[0], *optimizers[0], data, Input(c.micro_batches, s));
      if (!checks.Ok(result.status(), "Step")) return checks.exit_code();
      const double got = result->loss, expected = want_steps[static_cast<size_t>(s)].loss;
      checks.Expect(c.exact && c.expert == 1 ? got == expected : std::fabs(got - expected) <= 1e-6 * expected,
                    absl::StrCat("step ", s + 1, " loss ", got, " vs single process ", expected));
      if (c.expert > 1) {
        const double flat = want_flat[static_cast<size_t>(s)].loss;
        checks.Expect(c.exact ? got == flat : std::fabs(got - flat) <= 1e-6 * flat,
                      absl::StrCat("step ", s + 1, " loss ", got, " vs data x expert ", flat));
      }
      ExpectSameExpertMetrics(want_steps[static_cast<size_t>(s)], *result, c.exact && c.expert == 1,
                              absl::StrCat("step ", s + 1), checks);
      ExpectNoiseScale(c, want_noise[static_cast<size_t>(s)], *result, absl::StrCat("step ", s + 1), checks);
    }
    if (!checks.Ok((*step)->CheckReplicasAgree(*chunks[0], kSteps), "CheckReplicasAgree"))
      return checks.exit_code();
    float worst = 0,
          largest = 0;  // over every weight of the chunks (a key bias's gradient is 0 but rounding)
    std::string worst_name;
    for (model::LanguageModel* chunk : chunks) {
      chunk->VisitParameters([&](const std::string& name, const model::Parameter& p) {
        const std::vector<float>& w = want.at(name);
        for (size_t i = 0; i < w.size(); ++i) {
          const float d = std::fabs(w[i] - p.value.data<float>()[i]);
          if (d > worst) worst = d, worst_name = name;
          largest = std::max(largest, std::fabs(w[i]));
        }
      });
    }
    checks.Expect(c.exact ? worst == 0 : worst <= 1e-5f * largest,
                  absl::StrCat("largest weight difference ", worst, " in ", worst_name, " (largest weight ",
                               largest, c.expert > 1 ? ") from data x expert" : ")"));
    // Pipeline x expert against the single process: the expert blocks' rows arrive in another order, so
    // every gradient differs by fp32 rounding, and AdamW's normalised update m / sqrt(v) moves an element
    // whose gradient is rounding-sized by up to lr a step whatever its sign: at most kSteps lr apart
    // (measured 1.2e-4 after 3 steps at lr 3e-3; data x expert, checked above, is the same).
    for (model::LanguageModel* chunk : chunks) {
      chunk->VisitParameters([&](const std::string& name, const model::Parameter& p) {
        if (c.expert == 1) return;
        const std::vector<float>& w = single_weights.at(name);
        float most = 0;
        for (size_t i = 0; i < w.size(); ++i) most = std::max(most, std::fabs(w[i] - p.value.data<float>()[i]));
        checks.Expect(most <= kSteps * 3e-3f, absl::StrCat(name, " is ", most, " from the single process's"));
      });
    }
    // Each stage's expert biases moved as the single process's: from the same whole-number loads.
    int buffers = 0;
    for (model::LanguageModel* chunk : chunks) {
      chunk->VisitBuffers([&](const std::string& name, const kernels::Tensor& t) {
        ++buffers;
        checks.Expect(want_buffers.at(name) == std::vector<float>(t.data<float>(), t.data<float>() + t.numel()),
                      absl::StrCat(name, " differs from the single process's"));
      });
    }
    int64_t stage_moe_layers = 0;  // the chunks' layers from first_k_dense on, in a model with model.moe
    for (model::LanguageModel* chunk : chunks) {
      if (!c.config.moe.has_value()) break;
      stage_moe_layers += std::max<int64_t>(0, chunk->last_layer() - std::max(chunk->first_layer(), c.config.first_k_dense));
    }
    const size_t moe_layers = c.config.moe.has_value() ? c.config.n_layers - c.config.first_k_dense : 0;
    checks.Expect(buffers == stage_moe_layers && want_steps.back().expert_loads.size() == moe_layers,
                  absl::StrCat(buffers, " expert biases on this rank, its stages have ", stage_moe_layers,
                               " MoE layers"));
    // Evaluation through the pipeline is the whole model's forward, bit for bit.
    std::vector<int32_t> ids(kB * kT), targets(kB * kT);
    RandomBatches eval(c.config.vocab_size, kB * kT, 23);
    (void)eval.Next(ids.data(), targets.data());
    absl::StatusOr<double> loss = (*step)->ForwardLoss(ids.data(), targets.data(), kB, kT);
    if (!checks.Ok(loss.status(), "ForwardLoss")) return checks.exit_code();
    if (c.exact) {  // with experts spread over ranks, the rows of an expert in another order: to rounding
      const double expected = *whole->ForwardWithLoss(ids.data(), targets.data(), kB, kT);
      checks.Expect(c.expert == 1 ? *loss == expected : std::fabs(*loss - expected) <= 1e-6 * expected,
                    absl::StrCat("eval loss ", *loss, " vs ", expected));
    }
    return checks.exit_code();
  }));
}

TEST(PipelineStep, OnePipelineOfTwoStagesIsBitForBit) {
  ExpectEqualsSingleProcess(Case(Untied()));
  Case gpipe(Untied());
  gpipe.kind = ScheduleKind::kGPipe;
  gpipe.stage_layers = {3, 1};
  ExpectEqualsSingleProcess(gpipe);
}

TEST(PipelineStep, InterleavedOnTwoRanksIsBitForBit) {
  Case c(Untied());
  c.chunks = 2;
  c.kind = ScheduleKind::kInterleavedOneFOneB;
  ExpectEqualsSingleProcess(c);
}

// ZB-H1 (split backward: weight gradients deferred to their BW) on 2 and 4 stages: bit for bit.
TEST(PipelineStep, ZeroBubbleH1IsBitForBit) {
  Case two(Untied());
  two.kind = ScheduleKind::kZeroBubbleH1;
  ExpectEqualsSingleProcess(two);
  Case four(Untied());
  four.kind = ScheduleKind::kZeroBubbleH1;
  four.pipeline = 4;
  four.micro_batches = 6;
  ExpectEqualsSingleProcess(four);
}

TEST(PipelineStep, ZeroBubbleH1TwoReplicasOfTwoStagesAgreeToRounding) {
  Case tied(Tied());
  tied.kind = ScheduleKind::kZeroBubbleH1;
  tied.data = 2;
  tied.max_grad_norm = 1.0;
  tied.exact = false;
  ExpectEqualsSingleProcess(tied);
}

TEST(PipelineStep, TwoReplicasOfTwoStagesAgreeToRounding) {
  Case c(Untied());
  c.data = 2;
  c.max_grad_norm = 1.0;
  c.exact = false;
  ExpectEqualsSingleProcess(c);
  Case tied(Tied());
  tied.data = 2;
  tied.max_grad_norm = 1.0;
  tied.exact = false;
  ExpectEqualsSingleProcess(tied);
}

TEST(PipelineStep, ZeroOneShardsEachChunkOverTheDataGroup) {
  for (const model::ModelConfig& config : {Untied(), Tied()}) {
    Case c(config);
    c.data = 2;
    c.max_grad_norm = 1.0;
    c.exact = false;
    c.zero = true;
    ExpectEqualsSingleProcess(c);
  }
}

// A mixture of experts with noisy gating, the balancing and router z-losses, the expert bias and a capacity:
// the same losses, auxiliary losses, expert loads, weights and expert biases as the single process, bit for
// bit on one data replica under 1F1B, GPipe, interleaved 1F1B and ZB-H1 (2 and 4 stages), and to rounding on
// two replicas with clipping.
TEST(PipelineStep, MixtureOfExpertsIsBitForBit) {
  ExpectEqualsSingleProcess(Case(Moe()));
  Case gpipe(Moe());
  gpipe.kind = ScheduleKind::kGPipe;
  gpipe.stage_layers = {1, 3};
  ExpectEqualsSingleProcess(gpipe);
  Case interleaved(Moe());
  interleaved.chunks = 2;
  interleaved.kind = ScheduleKind::kInterleavedOneFOneB;
  ExpectEqualsSingleProcess(interleaved);
  Case four(Moe());
  four.kind = ScheduleKind::kZeroBubbleH1;
  four.pipeline = 4;
  four.micro_batches = 6;
  ExpectEqualsSingleProcess(four);
}

TEST(PipelineStep, MixtureOfExpertsOnTwoReplicasAgreesToRounding) {
  Case c(Moe());
  c.data = 2;
  c.max_grad_norm = 1.0;
  c.exact = false;
  ExpectEqualsSingleProcess(c);
}

// (data=2, pipeline=2, expert=2), interleaved (2 chunks a rank), 8 micro-batches, clipping; ZeRO-1 or not.
Case PipelineByExpertMesh(bool zero) {
  Case mesh(Moe());
  mesh.data = 2;
  mesh.expert = 2;
  mesh.chunks = 2;
  mesh.kind = ScheduleKind::kInterleavedOneFOneB;
  mesh.micro_batches = 8;
  mesh.max_grad_norm = 1.0;
  mesh.exact = false;
  mesh.zero = zero;
  return mesh;
}

// Pipeline x expert: each stage's 4 experts spread over 2 expert ranks (its MoE layers exchanging rows over
// the stage's expert group in every forward and backward), at (data=1, pipeline=2, expert=2) under 1F1B and
// ZB-H1 and at (2, 2, 2) interleaved with clipping. The expert blocks' tokens arrive in another order and
// their gradients (and the dense ones) are summed over the ranks in another order than one process
// accumulates them: the losses and aux losses agree to 1e-6 relative and the weights to 1e-5 of the largest
// over 3 AdamW steps, as data parallelism's (above); the expert loads and biases exactly (whole-number counts;
// no token is within rounding of a tie).
TEST(PipelineStep, MixtureOfExpertsOverPipelineByExpertAgreesToRounding) {
  for (const ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kZeroBubbleH1}) {
    Case c(Moe());
    c.kind = kind;
    c.expert = 2;
    ExpectEqualsSingleProcess(c);
  }
  ExpectEqualsSingleProcess(PipelineByExpertMesh(/*zero=*/false));
}

// ZeRO-1 under pipeline x expert: each chunk's dense moments sharded over the stage's data x expert ranks,
// each expert block's over the data ranks that hold it, the owners broadcasting their update over those
// groups. The update is the one without ZeRO, so the checks above hold as tightly: (data=1, pipeline=2,
// expert=2) bit for bit data x expert without a pipeline, (2, 2, 2) interleaved with clipping to rounding,
// and every replica of a stage holds the same weights (CheckReplicasAgree).
TEST(PipelineStep, ZeroOneOverPipelineByExpertShardsOverTheStageAndTheDataGroup) {
  Case c(Moe());
  c.expert = 2;
  c.zero = true;
  ExpectEqualsSingleProcess(c);
  ExpectEqualsSingleProcess(PipelineByExpertMesh(/*zero=*/true));
}

// This rank's part of a 2-stage 1F1B step (2 micro-batches a replica) over `mesh`, for the failure tests
// below: its stage's slice of `config`, its AdamW, and with experts spread over ranks (mesh expert > 1) the
// exchange over mesh.expert() its MoE layers use.
struct OneChunkStage {
  std::unique_ptr<expert::GroupExpertExchange> exchange;
  std::unique_ptr<model::LanguageModel> slice;
  std::unique_ptr<model::AdamW> optimizer;
  std::unique_ptr<PipelineStep> step;
};
absl::StatusOr<OneChunkStage> MakeOneChunkStage(Collectives& world, ParallelMesh& mesh,
                                                const model::ModelConfig& config) {
  OneChunkStage s;
  if (mesh.shape().expert > 1) s.exchange = std::make_unique<expert::GroupExpertExchange>(mesh.expert());
  s.slice = Make(config, StageLayers(config.n_layers, 2, mesh.coordinates().pipeline), s.exchange.get());
  s.optimizer = std::make_unique<model::AdamW>(model::AdamWConfig{}, *s.slice);
  absl::StatusOr<std::unique_ptr<PipelineStep>> step =
      PipelineStep::Create(world, mesh, *MakeSchedule(ScheduleKind::kOneFOneB, 2, 1, 2), {s.slice.get()},
                           {s.optimizer.get()}, {}, s.exchange.get());
  if (!step.ok()) return step.status();
  s.step = *std::move(step);
  return s;
}

// Adds 1 to the first element of this chunk's first parameter that is (or is not) in an expert block.
void Perturb(model::LanguageModel& chunk, bool expert_block) {
  bool done = false;
  chunk.VisitParameters([&](const std::string&, const model::Parameter& p) {
    if (done || p.expert_shard != expert_block) return;
    p.value.data<float>()[0] += 1;
    done = true;
  });
}

// Pipeline x expert (data=2, pipeline=2, expert=2): a stage replica whose weights drifted is named by its
// data and expert coordinates, its rank in the stage's group and its world rank (mesh.h's layout: world rank
// 6 is pipeline 1, data 1, expert 0, rank 2 of stage[pp=1]); an expert block that drifted, over the data
// ranks that hold it. The other stage, and the other data groups, agree.
TEST(PipelineStep, ReplicasThatDisagreeAreNamedByTheirAxes) {
  const model::ModelConfig config = Moe();
  ExpectAllPassed(RunRanks(8, [&](Collectives& world) {
    Checks checks(world.rank());
    absl::StatusOr<std::unique_ptr<ParallelMesh>> mesh = ParallelMesh::Build(world, {2, 2, 2});
    if (!checks.Ok(mesh.status(), "mesh")) return checks.exit_code();
    const int stage = (*mesh)->coordinates().pipeline;
    absl::StatusOr<OneChunkStage> s = MakeOneChunkStage(world, **mesh, config);
    if (!checks.Ok(s.status(), "Create")) return checks.exit_code();
    model::LanguageModel& slice = *s->slice;
    PipelineStep& step = *s->step;
    if (!checks.Ok(step.SyncParameters(slice), "SyncParameters")) return checks.exit_code();
    if (world.rank() == 6) Perturb(slice, /*expert_block=*/false);
    const absl::Status dense = step.CheckReplicasAgree(slice, 5);
    if (stage == 0) {
      checks.Ok(dense, "stage 0's replicas agree");
    } else {
      checks.FailsWith(dense,
                       {"pipeline stage of layers [2, 4): weights outside the expert blocks over run.parallel.data=2 "
                        "x run.parallel.expert=2: after step 5 those of data 1, expert 0: rank 2 (world rank 6) in "
                        "group 'stage[pp=1]' differ from those of data 0, expert 0: rank 0 (world rank 4)"},
                       "a dense weight that drifted on world rank 6");
    }
    // Data 0's weights again on every replica (world rank 6's drift undone), then an expert block drifts.
    if (!checks.Ok(step.SyncParameters(slice), "SyncParameters again")) return checks.exit_code();
    if (world.rank() == 7) Perturb(slice, /*expert_block=*/true);
    const absl::Status blocks = step.CheckReplicasAgree(slice, 6);
    if (world.rank() == 5 || world.rank() == 7) {
      checks.FailsWith(blocks,
                       {"expert blocks over run.parallel.data=2: after step 6 those of data rank 1 (world rank 7) "
                        "in group 'dp[pp=1,ep=1]' differ from those of data rank 0 (world rank 5)"},
                       "an expert block that drifted on world rank 7");
    } else {
      checks.Ok(blocks, "the other data groups agree");
    }
    return checks.exit_code();
  }));
}

// Rank 3 of data=2 x pipeline=2 (the second replica's last stage; mesh.h's layout) dies before its first
// step: its pipeline peer, rank 1, fails naming it (pipeline rank 1), and the first replica fails at the
// gradient sum over the data group or the losses' sum over every rank; nobody waits past the timeout.
TEST(PipelineStep, ADeadRankIsNamed) {
  testing::RankOptions options;
  options.timeout = std::chrono::milliseconds(3000);
  const model::ModelConfig config = Untied();
  std::vector<testing::RankOutcome> outcomes = RunRanks(
      4,
      [&](Collectives& world) {
        Checks checks(world.rank());
        absl::StatusOr<std::unique_ptr<ParallelMesh>> mesh = ParallelMesh::Build(world, {2, 2, 1});
        if (!checks.Ok(mesh.status(), "mesh")) return checks.exit_code();
        if (world.rank() == 3) _exit(7);
        absl::StatusOr<OneChunkStage> s = MakeOneChunkStage(world, **mesh, config);
        if (!checks.Ok(s.status(), "Create")) return checks.exit_code();
        RandomBatches data(config.vocab_size, kB * kT, 17);
        absl::StatusOr<model::StepResult> result = s->step->Step(*s->slice, *s->optimizer, data, Input(4));
        checks.FailsWith(result.status(), {"rank"}, "a step with a dead peer");
        if (world.rank() == 1)
          checks.FailsWith(result.status(), {"pipeline rank 0 at", "rank 1"}, "rank 3's peer");
        return checks.exit_code();
      },
      options);
  testing::ExpectExitCodes(outcomes, {0, 0, 0, 7});
}

// Pipeline x expert (data=1, pipeline=2, expert=2): rank 1 (stage 0's second expert rank) dies before its
// first step. Its expert peer, rank 0, fails at its MoE layer's exchange (the exchange's first error, which
// the step reports), stage 1's ranks at their receives or the sums after; every survivor names a rank and
// nobody waits past the timeout.
TEST(PipelineStep, ADeadExpertRankIsNamed) {
  testing::RankOptions options;
  options.timeout = std::chrono::milliseconds(3000);
  const model::ModelConfig config = Moe();
  std::vector<testing::RankOutcome> outcomes = RunRanks(
      4,
      [&](Collectives& world) {
        Checks checks(world.rank());
        absl::StatusOr<std::unique_ptr<ParallelMesh>> mesh = ParallelMesh::Build(world, {1, 2, 2});
        if (!checks.Ok(mesh.status(), "mesh")) return checks.exit_code();
        if (world.rank() == 1) _exit(7);
        absl::StatusOr<OneChunkStage> s = MakeOneChunkStage(world, **mesh, config);
        if (!checks.Ok(s.status(), "Create")) return checks.exit_code();
        RandomBatches data(config.vocab_size, kB * kT, 17);
        absl::StatusOr<model::StepResult> result = s->step->Step(*s->slice, *s->optimizer, data, Input(4));
        checks.FailsWith(result.status(), {"rank"}, "a step with a dead expert peer");
        if (world.rank() == 0) checks.FailsWith(result.status(), {"rank 1"}, "rank 1's expert peer");
        return checks.exit_code();
      },
      options);
  testing::ExpectExitCodes(outcomes, {0, 7, 0, 0});
}

}  // namespace
}  // namespace lmf::distributed::pipeline
