// A training run's process groups, step strategy, optimizer shards and collective checkpoint and evaluation
// parts (see run_parallelism.h).
#include "experiments/trainer/run_parallelism.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "distributed/zero.h"

namespace lmf::experiments {

absl::StatusOr<std::unique_ptr<RunParallelism>> RunParallelism::Build(const config::RunConfig& run, int64_t n_layers,
                                                                      distributed::Collectives* world,
                                                                      distributed::Collectives* device_group) {
  std::unique_ptr<RunParallelism> p(new RunParallelism());
  p->world_ = world;
  p->zero_stage_ = run.parallel().zero_stage();
  if (run.parallel().pipeline() > 1) {  // the strategy comes with the optimizers (MakeOptimizers)
    absl::StatusOr<std::unique_ptr<distributed::ParallelMesh>> mesh = distributed::ParallelMesh::Build(
        *world, {run.parallel().data(), run.parallel().pipeline(), run.parallel().expert()});
    if (!mesh.ok()) return mesh.status();
    p->mesh_ = *std::move(mesh);
    if (device_group != nullptr) {  // the stage replicas' gradients and the experts' rows over NCCL
      absl::StatusOr<std::unique_ptr<distributed::ParallelMesh>> device_mesh =
          distributed::ParallelMesh::Build(*device_group, p->mesh_->shape());
      if (!device_mesh.ok()) return device_mesh.status();
      p->device_mesh_ = *std::move(device_mesh);
    }
    if (run.parallel().expert() > 1) {  // each stage's MoE layers exchange rows over its expert group
      p->stage_exchange_ = std::make_unique<distributed::expert::GroupExpertExchange>(
          p->device_mesh_ != nullptr ? p->device_mesh_->expert() : p->mesh_->expert());
    }
    absl::StatusOr<PipelineLayout> layout = MakePipelineLayout(run, n_layers);
    if (!layout.ok()) return layout.status();
    p->layout_ = *std::move(layout);
  } else if (world != nullptr) {
    if (run.parallel().expert() > 1) {
      absl::StatusOr<std::unique_ptr<ExpertParallelRun>> built =
          ExpertParallelRun::Build(*world, run.parallel().data(), run.parallel().expert(), device_group);
      if (!built.ok()) return built.status();
      p->expert_parallel_ = *std::move(built);
    }
    auto data_parallel = std::make_unique<distributed::DataParallelStep>(
        *world, run.parallel().overlap_grad_reduce(),
        p->expert_parallel_ != nullptr ? p->expert_parallel_->groups() : distributed::ExpertParallelism{},
        device_group);
    p->data_parallel_ = data_parallel.get();
    p->strategy_ = std::move(data_parallel);
  } else {
    p->strategy_ = std::make_unique<model::SingleProcessStep>();
  }
  return p;
}

std::vector<model::LayerRange> RunParallelism::ChunkLayers() const {
  // A pipeline rank's stages; each draws the whole model's values for its parameters.
  return layout_.has_value() ? layout_->ChunkLayers(mesh_->coordinates().pipeline)
                             : std::vector{model::LayerRange{}};
}

model::moe::ExpertExchange* RunParallelism::expert_exchange() {
  return expert_parallel_ != nullptr ? expert_parallel_->exchange() : stage_exchange_.get();
}

std::vector<RunParallelism::Shard> RunParallelism::ShardSlice(const model::LanguageModel& chunk) {
  // The group the dense parameters are replicated over (every rank; a pipeline stage's replicas) and, with
  // experts spread over ranks, the one each expert block is (the data ranks that hold it).
  distributed::Collectives* dense = layout_.has_value() ? &mesh_->stage() : world_;
  distributed::Collectives* experts = nullptr;
  if (stage_exchange_ != nullptr) experts = &mesh_->data();                          // pipeline x expert
  if (expert_parallel_ != nullptr) experts = expert_parallel_->groups().replicas;  // data x expert
  if (experts == nullptr) return {{dense, distributed::ShardOptimizerState(chunk, dense->world_size())}};
  return {{dense, distributed::ShardOptimizerState(chunk, dense->world_size(),
                                                   [](const model::Parameter& p) { return !p.expert_shard; })},
          {experts, distributed::ShardOptimizerState(chunk, experts->world_size(),
                                                     [](const model::Parameter& p) { return p.expert_shard; })}};
}

absl::StatusOr<std::vector<std::unique_ptr<ModelOptimizer>>> RunParallelism::MakeOptimizers(
    const config::OptimizerConfig& config, const std::vector<std::unique_ptr<model::LanguageModel>>& chunks) {
  std::vector<std::unique_ptr<ModelOptimizer>> optimizers;
  for (const auto& chunk : chunks) {
    if (zero_stage_ != 1 || world_ == nullptr) {
      optimizers.push_back(std::make_unique<ModelOptimizer>(config, *chunk));
      continue;
    }
    shards_.push_back(ShardSlice(*chunk));
    std::vector<model::AdamW::Owns> parts;
    for (const Shard& shard : shards_.back()) parts.push_back(distributed::OwnedBy(shard.owners, shard.group->rank()));
    optimizers.push_back(std::make_unique<ModelOptimizer>(config, *chunk, [parts](const std::string& name) {
      return std::any_of(parts.begin(), parts.end(), [&](const model::AdamW::Owns& owns) { return owns(name); });
    }));
  }
  if (data_parallel_ != nullptr && !shards_.empty()) {
    data_parallel_->ShardOptimizerState(shards_[0][0].owners,
                                        shards_[0].size() > 1 ? shards_[0][1].owners : std::map<std::string, int>{});
  }
  if (layout_.has_value()) {
    std::vector<model::LanguageModel*> slices;
    std::vector<model::AdamW*> adamws;
    for (size_t c = 0; c < chunks.size(); ++c) {
      slices.push_back(chunks[c].get());
      adamws.push_back(&optimizers[c]->adamw());
    }
    absl::StatusOr<std::unique_ptr<distributed::pipeline::PipelineStep>> step =
        distributed::pipeline::PipelineStep::Create(*world_, *mesh_, layout_->schedule, std::move(slices),
                                                    std::move(adamws), layout_->stages, stage_exchange_.get(),
                                                    device_mesh_.get());
    if (!step.ok()) return step.status();
    pipeline_ = step->get();
    if (!shards_.empty()) {
      std::vector<std::map<std::string, int>> owners, expert_owners;
      for (const std::vector<Shard>& slice : shards_) {
        owners.push_back(slice[0].owners);
        if (slice.size() > 1) expert_owners.push_back(slice[1].owners);
      }
      if (absl::Status s = pipeline_->ShardOptimizerState(std::move(owners), std::move(expert_owners)); !s.ok()) {
        return s;
      }
    }
    strategy_ = *std::move(step);
  }
  return optimizers;
}

std::string RunParallelism::Where() const {
  const int rank = world_ != nullptr ? world_->rank() : 0, world = world_ != nullptr ? world_->world_size() : 1;
  if (!layout_.has_value()) return absl::StrCat("data parallel: rank ", rank, " of ", world);
  const std::string expert =
      mesh_->shape().expert > 1 ? absl::StrCat(", expert rank ", mesh_->coordinates().expert) : "";
  return absl::StrCat("pipeline: rank ", rank, " of ", world, " (data replica ", mesh_->coordinates().data, expert,
                      ", stage ", mesh_->coordinates().pipeline, " of ", mesh_->shape().pipeline, ", ",
                      distributed::pipeline::ScheduleKindName(layout_->schedule.kind), ")");
}

std::string RunParallelism::OptimizerShare(const std::vector<std::unique_ptr<model::LanguageModel>>& chunks,
                                           const std::vector<std::unique_ptr<ModelOptimizer>>& optimizers) const {
  if (shards_.empty()) return "";
  int64_t held = 0, whole = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    held += optimizers[c]->adamw().state_bytes();
    chunks[c]->VisitParameters([&](const std::string&, const model::Parameter& p) {
      whole += 2 * p.value.numel() * static_cast<int64_t>(sizeof(float));
    });
  }
  return absl::StrCat("ZeRO-1: this rank holds ", held, " of the ", whole, " bytes of AdamW moments of its parameters");
}

absl::Status RunParallelism::ConsolidateShards(const std::vector<std::unique_ptr<model::LanguageModel>>& chunks,
                                               const std::vector<std::unique_ptr<ModelOptimizer>>& optimizers) {
  for (size_t c = 0; c < shards_.size(); ++c) {
    for (const Shard& shard : shards_[c]) {
      if (absl::Status s = distributed::ConsolidateOptimizerState(*shard.group, shard.owners, *chunks[c],
                                                                  optimizers[c]->adamw());
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RunParallelism::GatherCheckpoint(const std::vector<std::unique_ptr<model::LanguageModel>>& chunks,
                                              const std::vector<std::unique_ptr<ModelOptimizer>>& optimizers,
                                              HostTensors* weights, HostTensors* optimizer_state) {
  // The shards' first ranks (rank 0; a pipeline's first data replica; each expert block's first replica)
  // adopt every moment of their slices, the gathering copies them, and they drop them again.
  absl::Status status = ConsolidateShards(chunks, optimizers);
  if (status.ok()) status = GatherSlices(chunks, optimizers, weights, optimizer_state);
  if (!shards_.empty()) {
    for (const auto& optimizer : optimizers) optimizer->adamw().DropAdopted();
  }
  return status;
}

absl::Status RunParallelism::GatherSlices(const std::vector<std::unique_ptr<model::LanguageModel>>& chunks,
                                          const std::vector<std::unique_ptr<ModelOptimizer>>& optimizers,
                                          HostTensors* weights, HostTensors* optimizer_state) {
  const bool lead = world_ == nullptr || world_->rank() == 0;
  if (layout_.has_value()) {  // the first data replica's stages, gathered on rank 0
    if (mesh_->coordinates().data != 0) return absl::OkStatus();
    if (stage_exchange_ == nullptr) {
      return experiments::GatherCheckpoint(mesh_->pipeline(), layout_->schedule, chunks, optimizers, weights,
                                           optimizer_state);
    }
    // Pipeline x expert: each stage's expert blocks onto its expert rank 0 first, then those ranks' stages.
    std::vector<HostTensors> blocks(chunks.size()), moments(chunks.size());
    for (size_t c = 0; c < chunks.size(); ++c) {
      if (absl::Status s = experiments::GatherExpertBlocks(mesh_->expert(), *chunks[c], optimizers[c]->adamw(),
                                                           &blocks[c], &moments[c]);
          !s.ok()) {
        return s;
      }
    }
    if (mesh_->coordinates().expert != 0) return absl::OkStatus();
    return experiments::GatherCheckpoint(mesh_->pipeline(), layout_->schedule, chunks, optimizers, weights,
                                         optimizer_state, &blocks, &moments);
  }
  if (lead) {
    *weights = ModelTensors(*chunks[0]);
    *optimizer_state = optimizers[0]->StateTensors();
  }
  if (expert_parallel_ != nullptr) {  // rank 0's expert group sends it their blocks
    return expert_parallel_->GatherExpertBlocks(*chunks[0], optimizers[0]->adamw(), weights, optimizer_state);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> RunParallelism::ValidationShare(model::LanguageModel& model,
                                                                    const ValidationBatches& batches, int64_t b,
                                                                    int64_t t) {
  if (pipeline_ == nullptr) {
    return ValidationBatchLosses(model, batches, b, t, /*first=*/world_ != nullptr ? world_->rank() : 0,
                                 world_ != nullptr ? world_->world_size() : 1);
  }
  const BatchLoss through_pipeline = [&](const int32_t* ids, const int32_t* targets) {
    return pipeline_->ForwardLoss(ids, targets, b, t);
  };
  // Each replica of the stages (data x expert of them; a stage's expert ranks evaluate in step, their
  // experts serving each other's batches) takes every replicas-th batch.
  const int replica = mesh_->coordinates().data * mesh_->shape().expert + mesh_->coordinates().expert;
  absl::StatusOr<std::vector<double>> losses = ValidationBatchLosses(through_pipeline, batches, b, t,
                                                                     /*first=*/replica,
                                                                     /*stride=*/pipeline_->replicas());
  if (losses.ok() && !pipeline_->first_stage())
    std::fill(losses->begin(), losses->end(), 0.0);  // counted once
  return losses;
}

}  // namespace lmf::experiments
