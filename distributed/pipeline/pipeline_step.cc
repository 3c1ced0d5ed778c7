// The pipeline-parallel step strategy (see pipeline_step.h).
#include "distributed/pipeline/pipeline_step.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstddef>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "distributed/data_parallel_step.h"
#include "distributed/zero.h"
#include "kernels/grad_norm/grad_norm.h"
#include "kernels/memory/memory.h"

namespace lmf::distributed::pipeline {

absl::StatusOr<std::unique_ptr<PipelineStep>> PipelineStep::Create(Collectives& world, ParallelMesh& mesh,
                                                                   Schedule schedule,
                                                                   std::vector<model::LanguageModel*> chunks,
                                                                   std::vector<model::AdamW*> optimizers,
                                                                   std::vector<model::LayerRange> stages,
                                                                   const model::moe::ExpertExchange* exchange,
                                                                   ParallelMesh* device_mesh) {
  if (mesh.shape().size() != world.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline step: the mesh ", mesh.shape().ToString(),
                                                   " is not the world's ", world.world_size(), " ranks"));
  }
  if ((mesh.shape().expert > 1) != (exchange != nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline step: the mesh ", mesh.shape().ToString(),
                                                   exchange != nullptr ? " has no expert dimension for"
                                                                       : " needs",
                                                   " the MoE layers' expert exchange"));
  }
  if (optimizers.size() != chunks.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline step: ", chunks.size(), " chunks but ", optimizers.size(), " optimizers"));
  }
  const bool gpu = !chunks.empty() && chunks[0] != nullptr && chunks[0]->context().device.is_cuda();
  if (gpu != (device_mesh != nullptr)) {
    return absl::InvalidArgumentError(gpu ? "pipeline step: chunks on a GPU need the mesh over a device group"
                                          : "pipeline step: a device mesh given for chunks on the CPU");
  }
  absl::StatusOr<PipelineStage> stage =
      PipelineStage::Create(mesh.pipeline(), std::move(schedule), std::move(chunks), std::move(stages),
                            device_mesh != nullptr ? &device_mesh->pipeline() : nullptr);
  if (!stage.ok()) return stage.status();
  return std::unique_ptr<PipelineStep>(
      new PipelineStep(world, mesh, *std::move(stage), std::move(optimizers), exchange, device_mesh));
}

DataParallelStep PipelineStep::Replicas() const {
  return DataParallelStep(mesh_.stage(), /*overlap=*/false, ExpertGroups(),
                          device_mesh_ != nullptr ? &device_mesh_->stage() : nullptr);
}

ExpertParallelism PipelineStep::ExpertGroups() const {
  if (exchange_ == nullptr) return {};
  return ExpertParallelism{&mesh_.data(), &mesh_.expert(), exchange_,
                           device_mesh_ != nullptr ? &device_mesh_->data() : nullptr};
}

absl::Status PipelineStep::SyncParameters(model::LanguageModel&) {
  DataParallelStep replicas = Replicas();
  for (model::LanguageModel* chunk : stage_.chunks()) {
    if (absl::Status s = replicas.SyncParameters(*chunk); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status PipelineStep::CheckReplicasAgree(const model::LanguageModel&, int64_t step) {
  DataParallelStep replicas = Replicas();
  for (model::LanguageModel* chunk : stage_.chunks()) {
    if (absl::Status s = replicas.CheckReplicasAgree(*chunk, step); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("pipeline stage of layers [", chunk->first_layer(), ", ",
                                                 chunk->last_layer(), "): ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status PipelineStep::ShardOptimizerState(std::vector<std::map<std::string, int>> owners,
                                               std::vector<std::map<std::string, int>> expert_owners) {
  const size_t chunks = stage_.chunks().size(), expert_maps = exchange_ != nullptr ? chunks : 0;
  if (owners.size() != chunks || expert_owners.size() != expert_maps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline step: ZeRO-1 takes one owners map per chunk (", chunks, ") and ", expert_maps,
        " expert owners maps; got ", owners.size(), " and ", expert_owners.size()));
  }
  owners_ = std::move(owners);
  expert_owners_ = std::move(expert_owners);
  return absl::OkStatus();
}

absl::Status PipelineStep::SumOverProcesses(std::vector<double>& values) {
  return world_.AllReduceSum(values.data(), values.size());
}

absl::Status PipelineStep::ReadMicroBatches(model::MicroBatchSource& data, const model::StepInput& input) {
  const int64_t first = first_micro_batch(input.micro_batches),
                count = micro_batch_count(input.micro_batches);
  ids_.resize(static_cast<size_t>(count));
  targets_.resize(static_cast<size_t>(count));
  for (int64_t micro = 0; micro < input.micro_batches; ++micro) {
    if (micro < first || micro >= first + count) {  // another data replica's
      data.Skip();
      continue;
    }
    std::vector<int32_t>& ids = ids_[static_cast<size_t>(micro - first)];
    std::vector<int32_t>& targets = targets_[static_cast<size_t>(micro - first)];
    ids.resize(static_cast<size_t>(input.b * input.t));
    targets.resize(ids.size());
    if (absl::Status s = data.Next(ids.data(), targets.data()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status PipelineStep::SumOverReplicas() {
  // The dense gradients and the step counts (a mixture of experts' expert loads: whole numbers, summed
  // exactly) over the stage's replicas; with experts spread over ranks, each expert block's gradient over
  // the data ranks that hold it. On GPUs in place on the device mesh, as data parallelism sums them.
  if (mesh_.stage().world_size() == 1) return absl::OkStatus();  // one replica (its data group is in it)
  if (device_mesh_ != nullptr) {
    DataParallelStep replicas = Replicas();
    for (model::LanguageModel* chunk : stage_.chunks()) {
      if (absl::Status s = replicas.SumOnDevice(*chunk); !s.ok()) return s;
      if (absl::Status s = replicas.SumStepCounts(*chunk); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (absl::Status s = SumPart(mesh_.stage(), /*expert_blocks=*/false); !s.ok()) return s;
  return exchange_ != nullptr ? SumPart(mesh_.data(), /*expert_blocks=*/true) : absl::OkStatus();
}

absl::Status PipelineStep::SumPart(Collectives& group, bool expert_blocks) {
  if (group.world_size() == 1) return absl::OkStatus();
  gradients_.clear();
  for (model::LanguageModel* chunk : stage_.chunks()) {
    chunk->VisitParameters([&](const std::string&, const model::Parameter& p) {
      if (p.expert_shard != expert_blocks) return;
      gradients_.insert(gradients_.end(), p.grad.data<float>(), p.grad.data<float>() + p.grad.numel());
    });
    if (expert_blocks) continue;
    chunk->VisitStepCounts([&](const std::string&, const kernels::Tensor& counts) {
      gradients_.insert(gradients_.end(), counts.data<float>(), counts.data<float>() + counts.numel());
    });
  }
  if (absl::Status s = group.AllReduceSum(gradients_.data(), gradients_.size()); !s.ok()) return s;
  const float* in = gradients_.data();
  for (model::LanguageModel* chunk : stage_.chunks()) {
    chunk->VisitParameters([&](const std::string&, const model::Parameter& p) {
      if (p.expert_shard != expert_blocks) return;
      std::copy_n(in, p.grad.numel(), p.grad.data<float>());
      in += p.grad.numel();
    });
    if (expert_blocks) continue;
    chunk->VisitStepCounts([&](const std::string&, const kernels::Tensor& counts) {
      std::copy_n(in, counts.numel(), counts.data<float>());
      in += counts.numel();
    });
  }
  return absl::OkStatus();
}

absl::StatusOr<model::NamedCounts> PipelineStep::GatherStepCounts() {
  // This rank's counts as doubles, per tensor: [stage, index in its chunk, name length, the name's bytes,
  // count, the values]; each rank writes its own span of one vector, zeros elsewhere, so a sum over the
  // pipeline group gathers them exactly.
  std::vector<double> mine;
  for (size_t c = 0; c < stage_.chunks().size(); ++c) {
    const int stage = stage_.schedule().stage(mesh_.pipeline().rank(), static_cast<int>(c));
    int index = 0;
    stage_.chunks()[c]->VisitStepCounts([&](const std::string& name, const kernels::Tensor& counts) {
      mine.insert(mine.end(), {static_cast<double>(stage), static_cast<double>(index++),
                               static_cast<double>(name.size())});
      for (const char ch : name) mine.push_back(static_cast<double>(static_cast<unsigned char>(ch)));
      mine.push_back(static_cast<double>(counts.numel()));
      std::vector<float> values(static_cast<size_t>(counts.numel()));
      if (counts.device().is_cuda()) {
        kernels::CopyToHost(stage_.chunks()[c]->context(), values.data(), counts.data(), counts.nbytes());
      } else {  // counted on the host (a GPU layer with experts spread over ranks, or a CPU model)
        std::copy_n(counts.data<float>(), counts.numel(), values.data());
      }
      mine.insert(mine.end(), values.begin(), values.end());
    });
  }
  const int ranks = mesh_.pipeline().world_size(), rank = mesh_.pipeline().rank();
  if (count_sizes_.empty()) {  // the spans' sizes do not change from step to step: exchanged once
    count_sizes_.assign(static_cast<size_t>(ranks), 0.0);
    count_sizes_[static_cast<size_t>(rank)] = static_cast<double>(mine.size());
    if (absl::Status s = mesh_.pipeline().AllReduceSum(count_sizes_.data(), count_sizes_.size()); !s.ok()) {
      count_sizes_.clear();
      return s;
    }
  }
  size_t total = 0, offset = 0;
  for (int r = 0; r < ranks; ++r) {
    if (r == rank) offset = total;
    total += static_cast<size_t>(count_sizes_[static_cast<size_t>(r)]);
  }
  if (total == 0) return model::NamedCounts{};  // no layer counts anything (a dense model)
  std::vector<double> all(total, 0.0);
  std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(offset));
  if (absl::Status s = mesh_.pipeline().AllReduceSum(all.data(), all.size()); !s.ok()) return s;
  struct Entry {
    int stage, index;
    std::string name;
    std::vector<float> values;
  };
  std::vector<Entry> entries;
  for (size_t i = 0; i < total;) {
    Entry e{static_cast<int>(all[i]), static_cast<int>(all[i + 1]), "", {}};
    const size_t name_size = static_cast<size_t>(all[i + 2]);
    for (size_t k = 0; k < name_size; ++k) e.name.push_back(static_cast<char>(static_cast<int>(all[i + 3 + k])));
    i += 3 + name_size;
    const size_t n = static_cast<size_t>(all[i++]);
    e.values.assign(all.begin() + static_cast<std::ptrdiff_t>(i), all.begin() + static_cast<std::ptrdiff_t>(i + n));
    i += n;
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.stage, a.index) < std::tie(b.stage, b.index); });
  model::NamedCounts counts;
  for (Entry& e : entries) counts.emplace_back(std::move(e.name), std::move(e.values));
  return counts;
}

absl::StatusOr<double> PipelineStep::GlobalNorm(int64_t micro_batches) {
  // This rank's squared norm of its dense gradients and of its expert blocks' (one part without experts
  // spread over ranks).
  double parts[2] = {0, 0};
  for (const bool expert_blocks : {false, true}) {
    std::vector<kernels::GradSpan> spans;
    for (model::LanguageModel* chunk : stage_.chunks()) {
      chunk->VisitParameters([&](const std::string& name, const model::Parameter& p) {
        if (exchange_ != nullptr && p.expert_shard != expert_blocks) return;
        // A head-only slice's copy of a tied token table is the first stage's table: counted there.
        if (!chunk->has_embedding() && name == "token_embeddings.weight") return;
        spans.push_back({p.grad.data(), p.grad.numel()});
      });
    }
    kernels::GradNormParams params;
    params.dtype = kernels::DType::kF32;
    params.grads = spans.data();
    params.num_grads = static_cast<int64_t>(spans.size());
    const double local = kernels::GlobalGradNorm(stage_.chunks()[0]->context(), params);
    parts[expert_blocks ? 1 : 0] = local * local;
    if (exchange_ == nullptr) break;
  }
  // The stage's expert blocks are spread over its expert group: their squares summed there.
  if (exchange_ != nullptr) {
    if (absl::Status s = mesh_.expert().AllReduceSum(&parts[1], 1); !s.ok()) return s;
  }
  double squares = parts[0] + parts[1];
  if (absl::Status s = mesh_.pipeline().AllReduceSum(&squares, 1); !s.ok()) return s;
  return std::sqrt(squares) / static_cast<double>(micro_batches);
}

bool PipelineStep::MeasuresNoiseScale(const model::StepInput& input) const {
  // Not with experts spread over ranks: a rank's expert gradients hold other ranks' tokens.
  if (input.micro_batches < 2 || exchange_ != nullptr) return false;
  const Schedule& schedule = stage_.schedule();
  if (stage_.chunks()[0]->config().tied_embeddings && schedule.num_stages() > 1) return false;
  for (const std::vector<Action>& list : schedule.actions) {
    for (const Action& a : list) {
      if (a.op == Op::kBackwardInput || a.op == Op::kBackwardWeight) return false;
    }
  }
  return true;
}

void PipelineStep::WatchFirstBackwards(double* first_grad_sq) {
  for (model::LanguageModel* chunk : stage_.chunks()) {
    // Each chunk runs its backwards in micro-batch order (PipelineStage), from zeroed gradients; the
    // embeddings' part ends each backward, in every slice.
    chunk->SetBackwardProgress(
        [chunk, first_grad_sq, backwards = 0](const model::LanguageModel::ModelPart& part) mutable {
          if (part.kind != model::LanguageModel::ModelPart::kEmbedding || backwards++ > 0) return;
          const double norm = model::GradientNorm(*chunk);
          *first_grad_sq += norm * norm;
        });
  }
}

absl::StatusOr<model::StepResult> PipelineStep::Step(model::LanguageModel& model, model::AdamW& optimizer,
                                                     model::MicroBatchSource& data,
                                                     const model::StepInput& input) {
  if (&model != stage_.chunks()[0] || &optimizer != optimizers_[0]) {
    return absl::InternalError(
        "pipeline step: called with another model or optimizer than its first chunk's");
  }
  if (absl::Status s = ReadMicroBatches(data, input); !s.ok()) return s;
  std::vector<MicroBatch> micro_batches;
  for (size_t i = 0; i < ids_.size(); ++i) micro_batches.push_back({ids_[i].data(), targets_[i].data()});
  const bool noise = MeasuresNoiseScale(input);
  double first_grad_sq = 0;  // this rank's chunks' part of |g|^2 of the replica's first micro-batch
  if (noise) WatchFirstBackwards(&first_grad_sq);
  // Micro-batch m of the step draws what one process draws for it (ForwardMode: noisy gating).
  const model::ForwardMode mode = model::ForwardMode::Training(
      input.seed, input.step, first_micro_batch(input.micro_batches) * input.b * input.t);
  absl::StatusOr<model::LossSums> local = stage_.Run(micro_batches, input.b, input.t, mode);
  for (model::LanguageModel* chunk : stage_.chunks()) chunk->SetBackwardProgress(nullptr);
  if (!local.ok()) return local.status();
  if (exchange_ != nullptr && !exchange_->status().ok()) return exchange_->status();  // its first error
  if (absl::Status s = stage_.SumTiedEmbeddingGrads(); !s.ok()) return s;
  if (absl::Status s = SumOverReplicas(); !s.ok()) return s;
  const int received = input.received_signal ? input.received_signal() : 0;
  // Each micro-batch's losses are on its last stage's rank (its chunks' auxiliary losses where they ran):
  // summed over every rank, each counts once. The first micro-batches' |g|^2: summed over the stages and
  // the replicas, then the replicas' mean.
  double totals[5] = {local->loss, local->z_loss, local->aux_loss, static_cast<double>(received),
                      first_grad_sq};
  if (absl::Status s = world_.AllReduceSum(totals, 5); !s.ok()) return s;
  absl::StatusOr<double> norm = GlobalNorm(input.micro_batches);
  if (!norm.ok()) return norm.status();

  model::StepResult result;
  const double steps = static_cast<double>(input.micro_batches);
  result.loss = totals[0] / steps;
  result.z_loss = totals[1] / steps;
  result.aux_loss = totals[2] / steps;
  result.grad_norm = std::isfinite(result.loss) ? *norm : NAN;
  if (noise) model::EstimateNoiseScale(input, totals[4] / replicas(), &result);
  if (std::isfinite(result.grad_norm)) {
    for (size_t c = 0; c < optimizers_.size(); ++c) {
      optimizers_[c]->StepWithNorm(*stage_.chunks()[c], input.lr, input.micro_batches, result.grad_norm);
    }
    // ZeRO-1: each owner's update to the other replicas (on GPUs over the device mesh).
    Collectives& dense = device_mesh_ != nullptr ? device_mesh_->stage() : mesh_.stage();
    Collectives& expert_replicas = device_mesh_ != nullptr ? device_mesh_->data() : mesh_.data();
    for (size_t c = 0; c < owners_.size(); ++c) {
      if (absl::Status s = BroadcastFromOwners(dense, owners_[c], *stage_.chunks()[c]); !s.ok()) return s;
      if (expert_owners_.empty()) continue;
      if (absl::Status s = BroadcastFromOwners(expert_replicas, expert_owners_[c], *stage_.chunks()[c]); !s.ok()) {
        return s;
      }
    }
  }
  // The expert loads of every stage's layers, before each chunk updates its own layers' state from them.
  absl::StatusOr<model::NamedCounts> counts = GatherStepCounts();
  if (!counts.ok()) return counts.status();
  const model::ExpertLoadStats load = model::SummarizeExpertLoad(*counts);
  result.expert_load_max_over_mean = load.max_over_mean;
  result.dropped_share = load.dropped_share;
  result.expert_loads = load.loads;
  for (model::LanguageModel* chunk : stage_.chunks()) chunk->EndStep();
  result.stop_signal = totals[3] > 0 ? (received != 0 ? received : SIGTERM) : 0;
  return result;
}

}  // namespace lmf::distributed::pipeline
