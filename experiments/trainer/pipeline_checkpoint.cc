// Gathering a pipeline run's slices into whole-model checkpoint tensors (see pipeline_checkpoint.h).
#include "experiments/trainer/pipeline_checkpoint.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "distributed/pipeline/pipeline_stage.h"

namespace lmf::experiments {
namespace {

using distributed::Buffer;

// One tensor on its way to rank 0, with where it goes in the file: (kind, stage) orders the model's
// tensors (0: parameters, 1: buffers; stage by stage), the name the optimizer's.
struct Entry {
  int kind = 0, stage = 0;
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// A head-only slice's copy of a tied token table: the first stage's table, written once.
bool TiedCopy(const model::LanguageModel& chunk, const std::string& name) {
  return !chunk.has_embedding() &&
         (name == "token_embeddings.weight" || name.rfind("token_embeddings.weight.", 0) == 0);
}

void Add(std::vector<Entry>* out, int kind, int stage, const NamedTensor& t) {
  int64_t n = 1;
  for (const int64_t d : t.shape) n *= d;
  out->push_back({kind, stage, t.name, t.shape, std::vector<float>(t.data, t.data + n)});
}

// "<kind> <stage> <name> <d0,d1,...>" per line, and every value in one vector.
std::string Header(const std::vector<Entry>& entries) {
  std::string text;
  for (const Entry& e : entries)
    absl::StrAppend(&text, e.kind, " ", e.stage, " ", e.name, " ", absl::StrJoin(e.shape, ","), "\n");
  return text;
}

absl::Status ParseHeader(const std::string& text, int from, std::vector<Entry>* out) {
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::vector<std::string> parts = absl::StrSplit(line, ' ');
    Entry e;
    bool ok =
        parts.size() == 4 && absl::SimpleAtoi(parts[0], &e.kind) && absl::SimpleAtoi(parts[1], &e.stage);
    if (ok) {
      e.name = parts[2];
      for (absl::string_view d : absl::StrSplit(parts[3], ',', absl::SkipEmpty())) {
        int64_t v = 0;
        ok = ok && absl::SimpleAtoi(d, &v);
        e.shape.push_back(v);
      }
    }
    if (!ok)
      return absl::DataLossError(
          absl::StrCat("pipeline rank ", from, " sent a bad tensor list line: ", line));
    out->push_back(std::move(e));
  }
  return absl::OkStatus();
}

// Every rank's entries on rank 0 (its own first, then rank 1's, ...); empty on the others.
absl::StatusOr<std::vector<Entry>> GatherEntries(distributed::Collectives& group, std::vector<Entry> mine) {
  constexpr int kSizesTag = 0, kHeaderTag = 1, kValuesTag = 2;
  if (group.rank() != 0) {
    std::string header = Header(mine);
    std::vector<float> values;
    for (const Entry& e : mine) values.insert(values.end(), e.values.begin(), e.values.end());
    int64_t sizes[2] = {static_cast<int64_t>(header.size()), static_cast<int64_t>(values.size())};
    const auto* bytes = reinterpret_cast<const uint8_t*>(header.data());
    if (absl::Status s = group.Send(Buffer::Host(sizes, 2), 0, kSizesTag); !s.ok()) return s;
    if (absl::Status s = group.Send(Buffer::Host(bytes, header.size()), 0, kHeaderTag); !s.ok()) return s;
    if (absl::Status s = group.Send(Buffer::Host(values.data(), values.size()), 0, kValuesTag); !s.ok())
      return s;
    return std::vector<Entry>{};
  }
  std::vector<Entry> all = std::move(mine);
  for (int from = 1; from < group.world_size(); ++from) {
    int64_t sizes[2] = {0, 0};
    if (absl::Status s = group.Recv(Buffer::Host(sizes, 2), from, kSizesTag); !s.ok()) return s;
    std::vector<uint8_t> bytes(static_cast<size_t>(sizes[0]));
    std::vector<float> values(static_cast<size_t>(sizes[1]));
    if (absl::Status s = group.Recv(Buffer::Host(bytes.data(), bytes.size()), from, kHeaderTag); !s.ok())
      return s;
    if (absl::Status s = group.Recv(Buffer::Host(values.data(), values.size()), from, kValuesTag); !s.ok())
      return s;
    const size_t first = all.size();
    if (absl::Status s = ParseHeader(std::string(bytes.begin(), bytes.end()), from, &all); !s.ok()) return s;
    size_t offset = 0;
    for (size_t i = first; i < all.size(); ++i) {
      int64_t n = 1;
      for (const int64_t d : all[i].shape) n *= d;
      if (offset + static_cast<size_t>(n) > values.size()) {
        return absl::DataLossError(
            absl::StrCat("pipeline rank ", from, " sent fewer values than its tensors hold"));
      }
      all[i].values.assign(values.begin() + offset, values.begin() + offset + n);
      offset += static_cast<size_t>(n);
    }
  }
  return all;
}

HostTensors ToHostTensors(std::vector<Entry> entries) {
  HostTensors out;
  for (Entry& e : entries) {
    out.storage.push_back(std::move(e.values));
    out.tensors.push_back({e.name, e.shape, out.storage.back().data()});
  }
  return out;
}

}  // namespace

absl::StatusOr<PipelineLayout> MakePipelineLayout(const config::RunConfig& run, int64_t n_layers) {
  const config::ParallelConfig& parallel = run.parallel();
  distributed::pipeline::ScheduleKind kind = distributed::pipeline::ScheduleKind::kOneFOneB;
  switch (parallel.schedule()) {
    case config::ParallelConfig::GPIPE:
      kind = distributed::pipeline::ScheduleKind::kGPipe;
      break;
    case config::ParallelConfig::INTERLEAVED_1F1B:
      kind = distributed::pipeline::ScheduleKind::kInterleavedOneFOneB;
      break;
    case config::ParallelConfig::ZB_H1:
      kind = distributed::pipeline::ScheduleKind::kZeroBubbleH1;
      break;
    default:
      break;
  }
  // Each pipeline is one data x expert replica of the stages, with its share of the step's micro-batches.
  const int micro_batches = run.grad_accum_steps() / (std::max(1, parallel.data()) * std::max(1, parallel.expert()));
  absl::StatusOr<distributed::pipeline::Schedule> schedule = distributed::pipeline::MakeSchedule(
      kind, parallel.pipeline(), parallel.virtual_stages(), micro_batches);
  if (!schedule.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "run.parallel (pipeline=", parallel.pipeline(), ", schedule=",
        config::ParallelConfig::Schedule_Name(parallel.schedule()), "): ", schedule.status().message()));
  }
  const std::vector<int64_t> layers(parallel.stage_layers().begin(), parallel.stage_layers().end());
  absl::StatusOr<std::vector<model::LayerRange>> stages =
      distributed::pipeline::StageRanges(n_layers, schedule->num_stages(), layers);
  if (!stages.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("run.parallel.stage_layers: ", stages.status().message()));
  }
  return PipelineLayout{*std::move(schedule), *std::move(stages)};
}

absl::StatusOr<HostTensors> GatherModelTensors(distributed::Collectives& pipeline,
                                               const distributed::pipeline::Schedule& schedule,
                                               const std::vector<model::LanguageModel*>& chunks,
                                               const std::vector<HostTensors>* other_experts) {
  std::vector<Entry> mine;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const int stage = schedule.stage(pipeline.rank(), static_cast<int>(c));
    const HostTensors tensors = ModelTensors(*chunks[c]);
    const int parameters = [&] {
      int n = 0;
      chunks[c]->VisitParameters([&](const std::string&, const model::Parameter&) { ++n; });
      return n;
    }();
    for (size_t i = 0; i < tensors.tensors.size(); ++i) {
      if (TiedCopy(*chunks[c], tensors.tensors[i].name)) continue;
      Add(&mine, static_cast<int>(i) < parameters ? 0 : 1, stage, tensors.tensors[i]);
    }
    if (other_experts != nullptr) {
      for (const NamedTensor& t : (*other_experts)[c].tensors) Add(&mine, 0, stage, t);
    }
  }
  absl::StatusOr<std::vector<Entry>> all = GatherEntries(pipeline, std::move(mine));
  if (!all.ok()) return all.status();
  std::stable_sort(all->begin(), all->end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.kind, a.stage) < std::tie(b.kind, b.stage);
  });
  return ToHostTensors(*std::move(all));
}

absl::StatusOr<HostTensors> GatherOptimizerState(distributed::Collectives& pipeline,
                                                 const std::vector<model::LanguageModel*>& chunks,
                                                 const std::vector<const ModelOptimizer*>& optimizers,
                                                 const std::vector<HostTensors>* other_experts) {
  std::vector<Entry> mine;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const HostTensors state = optimizers[c]->StateTensors();
    for (const NamedTensor& t : state.tensors) {
      if (!TiedCopy(*chunks[c], t.name)) Add(&mine, 0, 0, t);
    }
    if (other_experts != nullptr) {
      for (const NamedTensor& t : (*other_experts)[c].tensors) Add(&mine, 0, 0, t);
    }
  }
  absl::StatusOr<std::vector<Entry>> all = GatherEntries(pipeline, std::move(mine));
  if (!all.ok()) return all.status();
  std::sort(all->begin(), all->end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return ToHostTensors(*std::move(all));
}

absl::Status GatherCheckpoint(distributed::Collectives& pipeline,
                              const distributed::pipeline::Schedule& schedule,
                              const std::vector<std::unique_ptr<model::LanguageModel>>& chunks,
                              const std::vector<std::unique_ptr<ModelOptimizer>>& optimizers,
                              HostTensors* model, HostTensors* optimizer,
                              const std::vector<HostTensors>* expert_weights,
                              const std::vector<HostTensors>* expert_state) {
  std::vector<model::LanguageModel*> slices;
  std::vector<const ModelOptimizer*> states;
  for (size_t c = 0; c < chunks.size(); ++c)
    slices.push_back(chunks[c].get()), states.push_back(optimizers[c].get());
  absl::StatusOr<HostTensors> weights = GatherModelTensors(pipeline, schedule, slices, expert_weights);
  if (!weights.ok()) return weights.status();
  *model = *std::move(weights);
  absl::StatusOr<HostTensors> moments = GatherOptimizerState(pipeline, slices, states, expert_state);
  if (!moments.ok()) return moments.status();
  *optimizer = *std::move(moments);
  return absl::OkStatus();
}

}  // namespace lmf::experiments
