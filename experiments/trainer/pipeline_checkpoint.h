// Checkpoints of a pipeline-parallel run (run.parallel.pipeline > 1): each rank holds the slices of its
// stages, yet a checkpoint is one model.safetensors and one optimizer.safetensors under the whole model's
// names, so it loads into any layout (resharding on load: each slice reads its own names from the whole
// file, LoadSliceWeights). The first data replica's pipeline ranks send their tensors to its first rank,
// which gets them in the single-process order (parameters stage by stage, then buffers; the optimizer's
// moments by name). A head-only slice's copy of a tied token table (and its moments) is the first stage's
// table and is not written twice.
#ifndef LMFORGE_EXPERIMENTS_TRAINER_PIPELINE_CHECKPOINT_H_
#define LMFORGE_EXPERIMENTS_TRAINER_PIPELINE_CHECKPOINT_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "config/run.pb.h"
#include "distributed/collectives.h"
#include "distributed/pipeline/schedule.h"
#include "experiments/trainer/optimizer.h"
#include "experiments/trainer/weights.h"
#include "model/language_model/language_model.h"

namespace lmf::experiments {

// The schedule of run.parallel for one replica's run.grad_accum_steps / (data x expert) micro-batches, and every
// stage's layers (run.parallel.stage_layers, or the even split). InvalidArgument naming run.parallel's
// fields when they do not fit (ValidateExperiment has refused those already).
struct PipelineLayout {
  distributed::pipeline::Schedule schedule;
  std::vector<model::LayerRange> stages;
  // The layers of pipeline rank `rank`'s chunks, chunk 0 first.
  std::vector<model::LayerRange> ChunkLayers(int rank) const {
    std::vector<model::LayerRange> layers;
    for (int c = 0; c < schedule.chunks; ++c) layers.push_back(stages[schedule.stage(rank, c)]);
    return layers;
  }
};
absl::StatusOr<PipelineLayout> MakePipelineLayout(const config::RunConfig& run, int64_t n_layers);

// Collective over `pipeline` (the first data replica's pipeline group; every rank of it calls it with its
// chunks, chunk c being stage schedule.stage(rank, c)): rank 0 returns the whole model's tensors
// (ModelTensors of the whole model: the same names, shapes and order), the others an empty set. With
// `other_experts` (pipeline x expert: one per chunk, the expert blocks its expert group's other ranks hold,
// GatherExpertBlocks), those follow their stage's parameters (the names are the whole model's; the order of
// a stage's experts is then not the single process's).
absl::StatusOr<HostTensors> GatherModelTensors(distributed::Collectives& pipeline,
                                               const distributed::pipeline::Schedule& schedule,
                                               const std::vector<model::LanguageModel*>& chunks,
                                               const std::vector<HostTensors>* other_experts = nullptr);
// The same for the optimizers' moments (ModelOptimizer::StateTensors of the whole model), sorted by name;
// `other_experts`: the other expert blocks' moments, one set per chunk.
absl::StatusOr<HostTensors> GatherOptimizerState(distributed::Collectives& pipeline,
                                                 const std::vector<model::LanguageModel*>& chunks,
                                                 const std::vector<const ModelOptimizer*>& optimizers,
                                                 const std::vector<HostTensors>* other_experts = nullptr);

// Both, for the trainer's chunks and their optimizers, into *model and *optimizer on rank 0; with
// `expert_weights` and `expert_state` (one set per chunk each), the other expert blocks as above.
absl::Status GatherCheckpoint(distributed::Collectives& pipeline,
                              const distributed::pipeline::Schedule& schedule,
                              const std::vector<std::unique_ptr<model::LanguageModel>>& chunks,
                              const std::vector<std::unique_ptr<ModelOptimizer>>& optimizers,
                              HostTensors* model, HostTensors* optimizer,
                              const std::vector<HostTensors>* expert_weights = nullptr,
                              const std::vector<HostTensors>* expert_state = nullptr);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_PIPELINE_CHECKPOINT_H_
