// Pipeline parallel on 1, 2 and 4 Gloo processes on loopback: each schedule's (GPipe, 1F1B, interleaved
// 1F1B, ZB-H1 with its split backward) loss and gradients equal single-process gradient accumulation over
// the same micro-batches, bit for bit (every chunk runs its micro-batches' backwards, and ZB-H1 its weight
// gradients, in ascending order, as accumulation does); a tied token table's two copies equal the single
// process's gradient to fp32 rounding (summed once instead of per micro-batch: tolerance 1e-5 relative to
// the largest entry). ZB-H1 holds gradient copies for its deferred weight gradients, the others none. A rank
// that dies makes the others fail naming it, with either kind of backward.
#include "distributed/pipeline/pipeline_stage.h"

#include <unistd.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distributed/test_ranks.h"
#include "gtest/gtest.h"
#include "kernels/core/context.h"

namespace lmf::distributed::pipeline {
namespace {

using testing::Checks;
using testing::ExpectAllPassed;
using testing::RunRanks;
using Grads = std::map<std::string, std::vector<float>>;

constexpr int64_t kB = 2, kT = 8;

model::ModelConfig LlamaLike() {
  model::ModelConfig c = model::Cs336Config(/*vocab_size=*/61, /*context_length=*/16, /*d_model=*/32,
                                            /*n_layers=*/4, /*n_heads=*/4, /*d_ff=*/64);
  c.n_kv_heads = 2;
  return c;
}

model::ModelConfig Gpt2LikeTied() { return model::Gpt2Config(/*vocab_size=*/59, /*context_length=*/16, 32, 4, 4); }

std::unique_ptr<model::LanguageModel> Make(const model::ModelConfig& c, model::LayerRange range = {}) {
  absl::StatusOr<std::unique_ptr<model::LanguageModel>> m =
      model::LanguageModel::Create(c, kernels::Context::Cpu(), kernels::DType::kF32, range);
  if (!m.ok()) return nullptr;
  (*m)->InitializeParameters(/*seed=*/3);
  return *std::move(m);
}

struct Data {
  std::vector<std::vector<int32_t>> ids, targets;
  std::vector<MicroBatch> micro_batches;
};

Data RandomData(const model::ModelConfig& c, int m) {
  Data d;
  std::mt19937_64 engine(11);
  for (int i = 0; i < m; ++i) {
    for (auto* v : {&d.ids, &d.targets}) {
      v->emplace_back(kB * kT);
      for (int32_t& id : v->back()) id = static_cast<int32_t>(engine() % static_cast<uint64_t>(c.vocab_size));
    }
  }
  for (int i = 0; i < m; ++i) d.micro_batches.push_back({d.ids[i].data(), d.targets[i].data()});
  return d;
}

// Gradient accumulation in one process: the reference.
void Accumulate(const model::ModelConfig& c, const Data& d, double* loss, Grads* grads) {
  std::unique_ptr<model::LanguageModel> whole = Make(c);
  whole->ZeroGrad();
  *loss = 0;
  for (const MicroBatch& mb : d.micro_batches) {
    *loss += *whole->ForwardWithLoss(mb.ids, mb.targets, kB, kT);
    whole->Backward();
  }
  whole->VisitParameters([&](const std::string& name, const model::Parameter& p) {
    (*grads)[name].assign(p.grad_data(), p.grad_data() + p.grad.numel());
  });
}

// Runs `kind` on `ranks` processes with `chunks` per rank and compares with Accumulate. `peak_inputs`, when
// given: each rank's PipelineStage::peak_input_gradients().
void ExpectEqualsAccumulation(const model::ModelConfig& c, ScheduleKind kind, int ranks, int chunks, int m,
                              const std::vector<int>& peak_inputs = {}) {
  SCOPED_TRACE(absl::StrCat(ScheduleKindName(kind), " on ", ranks, " ranks x ", chunks, " chunks, ", m,
                            " micro-batches"));
  ExpectAllPassed(RunRanks(ranks, [&](Collectives& group) {
    Checks checks(group.rank());
    const Data data = RandomData(c, m);
    double want_loss = 0;
    Grads want;
    Accumulate(c, data, &want_loss, &want);
    absl::StatusOr<Schedule> schedule = MakeSchedule(kind, ranks, chunks, m);
    if (!checks.Ok(schedule.status(), "MakeSchedule")) return checks.exit_code();
    std::vector<std::unique_ptr<model::LanguageModel>> owned;
    std::vector<model::LanguageModel*> slices;
    for (int chunk = 0; chunk < chunks; ++chunk) {
      owned.push_back(Make(c, StageLayers(c.n_layers, schedule->num_stages(), schedule->stage(group.rank(), chunk))));
      slices.push_back(owned.back().get());
    }
    absl::StatusOr<PipelineStage> stage = PipelineStage::Create(group, *schedule, slices);
    if (!checks.Ok(stage.status(), "Create")) return checks.exit_code();
    for (int step = 0; step < 2; ++step) {  // the second step reuses nothing of the first
      absl::StatusOr<model::LossSums> local = stage->Run(data.micro_batches, kB, kT);
      if (!checks.Ok(local.status(), "Run")) return checks.exit_code();
      const bool split = kind == ScheduleKind::kZeroBubbleH1;
      checks.Expect((stage->peak_deferred_bytes() > 0) == split,
                    absl::StrCat("deferred weight gradients held ", stage->peak_deferred_bytes(), " bytes"));
      if (!peak_inputs.empty()) {
        checks.Expect(stage->peak_input_gradients() == peak_inputs[group.rank()],
                      absl::StrCat("held ", stage->peak_input_gradients(), " input gradients at once, expected ",
                                   peak_inputs[group.rank()]));
      }
      absl::StatusOr<model::LossSums> sums = stage->SumLosses(*local);
      if (!checks.Ok(sums.status(), "SumLosses")) return checks.exit_code();
      checks.Expect(sums->loss == want_loss, absl::StrCat("loss sum ", sums->loss, " vs ", want_loss));
      if (!checks.Ok(stage->SumTiedEmbeddingGrads(), "SumTiedEmbeddingGrads")) return checks.exit_code();
      for (model::LanguageModel* slice : slices) {
        slice->VisitParameters([&](const std::string& name, const model::Parameter& p) {
          const std::vector<float>& w = want.at(name);
          float largest = 0, worst = 0;
          for (size_t i = 0; i < w.size(); ++i) {
            largest = std::max(largest, std::fabs(w[i]));
            worst = std::max(worst, std::fabs(w[i] - p.grad_data()[i]));
          }
          const bool tied = c.tied_embeddings && name == "token_embeddings.weight";
          checks.Expect(tied ? worst <= 1e-5f * largest : worst == 0,
                        absl::StrCat("step ", step, " ", name, ": largest difference ", worst, " (largest entry ",
                                     largest, ")"));
        });
      }
    }
    return checks.exit_code();
  }));
}

// Rank 1's input gradients are freed as soon as the schedule shows their receives done: gradient j's once
// rank 1 receives micro-batch j + 2's activation, which rank 0 sends after receiving gradient j; so it holds
// 2 at once, not all 4 (rank 0, the first stage, computes none).
TEST(PipelineStage, OneFOneBOnTwoRanks) {
  ExpectEqualsAccumulation(LlamaLike(), ScheduleKind::kOneFOneB, 2, 1, 4, /*peak_inputs=*/{0, 2});
}
TEST(PipelineStage, GPipeOnTwoRanks) { ExpectEqualsAccumulation(LlamaLike(), ScheduleKind::kGPipe, 2, 1, 3); }
TEST(PipelineStage, OneFOneBOnFourRanksFewerMicroBatches) {
  ExpectEqualsAccumulation(LlamaLike(), ScheduleKind::kOneFOneB, 4, 1, 3);
}
TEST(PipelineStage, InterleavedOnTwoRanks) {
  ExpectEqualsAccumulation(LlamaLike(), ScheduleKind::kInterleavedOneFOneB, 2, 2, 4);
}
TEST(PipelineStage, TiedEmbeddingsOnTwoRanks) {
  ExpectEqualsAccumulation(Gpt2LikeTied(), ScheduleKind::kOneFOneB, 2, 1, 4);
}
TEST(PipelineStage, TiedEmbeddingsInterleavedOnOneRank) {
  ExpectEqualsAccumulation(Gpt2LikeTied(), ScheduleKind::kInterleavedOneFOneB, 1, 2, 2);
}
TEST(PipelineStage, ZeroBubbleH1OnTwoRanks) {
  ExpectEqualsAccumulation(LlamaLike(), ScheduleKind::kZeroBubbleH1, 2, 1, 4);
}
TEST(PipelineStage, ZeroBubbleH1OnFourRanks) {
  ExpectEqualsAccumulation(LlamaLike(), ScheduleKind::kZeroBubbleH1, 4, 1, 6);
}
TEST(PipelineStage, ZeroBubbleH1OnFourRanksFewerMicroBatches) {
  ExpectEqualsAccumulation(LlamaLike(), ScheduleKind::kZeroBubbleH1, 4, 1, 3);
}
TEST(PipelineStage, ZeroBubbleH1TiedEmbeddingsOnTwoRanks) {
  ExpectEqualsAccumulation(Gpt2LikeTied(), ScheduleKind::kZeroBubbleH1, 2, 1, 4);
}
TEST(PipelineStage, ZeroBubbleH1TiedEmbeddingsOnOneRank) {
  ExpectEqualsAccumulation(Gpt2LikeTied(), ScheduleKind::kZeroBubbleH1, 1, 1, 3);
}

// Rank 1 of 2 dies before its first receive: rank 0's sends or its gradient receive fail within the
// timeout, naming the peer.
void ExpectADeadRankIsNamed(ScheduleKind kind) {
  SCOPED_TRACE(ScheduleKindName(kind));
  testing::RankOptions options;
  options.timeout = std::chrono::milliseconds(3000);
  const model::ModelConfig c = LlamaLike();
  std::vector<testing::RankOutcome> outcomes = RunRanks(
      2,
      [&](Collectives& group) {
        if (group.rank() == 1) _exit(7);
        Checks checks(group.rank());
        const Data data = RandomData(c, 2);
        absl::StatusOr<Schedule> schedule = MakeSchedule(kind, 2, 1, 2);
        std::unique_ptr<model::LanguageModel> slice = Make(c, StageLayers(c.n_layers, 2, 0));
        absl::StatusOr<PipelineStage> stage = PipelineStage::Create(group, *schedule, {slice.get()});
        if (!checks.Ok(stage.status(), "Create")) return checks.exit_code();
        absl::StatusOr<model::LossSums> sums = stage->Run(data.micro_batches, kB, kT);
        checks.FailsWith(sums.status(), {"pipeline rank 0 at", "rank 1"}, "Run with a dead peer");
        return checks.exit_code();
      },
      options);
  testing::ExpectExitCodes(outcomes, {0, 7});
}

TEST(PipelineStage, ADeadRankIsNamed) { ExpectADeadRankIsNamed(ScheduleKind::kOneFOneB); }
TEST(PipelineStage, ADeadRankIsNamedUnderZeroBubbleH1) { ExpectADeadRankIsNamed(ScheduleKind::kZeroBubbleH1); }

TEST(PipelineStage, SlicesThatDoNotFitAreRefused) {
  ExpectAllPassed(RunRanks(2, [](Collectives& group) {
    Checks checks(group.rank());
    const model::ModelConfig c = LlamaLike();
    std::unique_ptr<model::LanguageModel> wrong = Make(c, {0, 3});
    checks.FailsWith(PipelineStage::Create(group, *MakeSchedule(ScheduleKind::kOneFOneB, 2, 1, 2), {wrong.get()})
                         .status(),
                     {"holds layers [0, 3), the split gives"}, "a slice of other layers");
    checks.FailsWith(
        PipelineStage::Create(group, *MakeSchedule(ScheduleKind::kOneFOneB, 4, 1, 2), {wrong.get()}).status(),
        {"the schedule has 4 ranks but the pipeline group 2"}, "a group of another size");
    std::unique_ptr<model::LanguageModel> right = Make(c, StageLayers(c.n_layers, 2, group.rank()));
    checks.FailsWith(PipelineStage::Create(group, *MakeSchedule(ScheduleKind::kOneFOneB, 2, 1, 2), {right.get()},
                                           {}, /*device_group=*/&group)
                         .status(),
                     {"a device group given for chunks on the CPU"}, "a device group for CPU chunks");
    return checks.exit_code();
  }));
}

TEST(StageLayers, EvenSplitFirstStagesTakeTheRest) {
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 3}, {3, 6}, {6, 8}, {8, 10}};
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(StageLayers(10, 4, s).first, want[s].first);
    EXPECT_EQ(StageLayers(10, 4, s).last, want[s].second);
  }
}

}  // namespace
}  // namespace lmf::distributed::pipeline
