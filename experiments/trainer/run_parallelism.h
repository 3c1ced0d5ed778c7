// One rank's parallel layout of a training run (run.parallel): the mesh of process groups, built once from
// the world group and passed to what uses it; the step strategy (one process, data parallel, data x expert,
// or data x pipeline, with expert parallelism inside each stage); the optimizers of the rank's model slices, their state sharded under ZeRO-1; and the
// collective parts of a checkpoint (every slice, shard and expert block gathered onto rank 0 under the
// single-process names) and of an evaluation (each rank's share of the validation batches). The trainer
// (trainer.cc) keeps one and calls it; it holds no model and no data of its own.
#ifndef LMFORGE_EXPERIMENTS_TRAINER_RUN_PARALLELISM_H_
#define LMFORGE_EXPERIMENTS_TRAINER_RUN_PARALLELISM_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/experiment.pb.h"
#include "distributed/collectives.h"
#include "distributed/data_parallel_step.h"
#include "distributed/expert/expert_exchange.h"
#include "distributed/mesh.h"
#include "distributed/pipeline/pipeline_step.h"
#include "experiments/data/token_batches.h"
#include "experiments/trainer/expert_parallel.h"
#include "experiments/trainer/optimizer.h"
#include "experiments/trainer/pipeline_checkpoint.h"
#include "experiments/trainer/weights.h"
#include "model/language_model/language_model.h"
#include "model/training/step_strategy.h"

namespace lmf::experiments {

class RunParallelism {
 public:
  // Collective over `world` (every rank of the run; null for one process): the mesh of run.parallel and
  // the step strategy (a pipeline's comes with the optimizers, MakeOptimizers). `device_group`: a CUDA
  // run's NCCL group over the same ranks (data and expert parallelism: DataParallelStep,
  // ExpertParallelRun; a pipeline's stage replicas and its stages' expert ranks: PipelineStep). Errors: the
  // mesh's (a collective's) or MakePipelineLayout's.
  static absl::StatusOr<std::unique_ptr<RunParallelism>> Build(const config::RunConfig& run, int64_t n_layers,
                                                               distributed::Collectives* world,
                                                               distributed::Collectives* device_group = nullptr);

  // The layers of this rank's model slices, first first: the whole model (one default range) unless a
  // pipeline splits it.
  std::vector<model::LayerRange> ChunkLayers() const;
  // What the MoE layers send their rows through (null without expert parallelism).
  model::moe::ExpertExchange* expert_exchange();
  // The optimizer of each slice (chunks[c] -> [c]); under ZeRO-1 each keeps the moments of the parameters
  // this rank owns: over every rank with data parallelism; over the stage's data group in a pipeline; with
  // expert parallelism the dense parameters over every rank (in a pipeline: over the stage's data x expert
  // ranks) and each expert block over the data ranks that hold it (one such rank: it keeps its blocks'
  // moments whole). A pipeline's step strategy is built here,
  // over the slices and their optimizers.
  absl::StatusOr<std::vector<std::unique_ptr<ModelOptimizer>>> MakeOptimizers(
      const config::OptimizerConfig& config, const std::vector<std::unique_ptr<model::LanguageModel>>& chunks);
  // Null for a pipeline until MakeOptimizers.
  model::StepStrategy* strategy() { return strategy_.get(); }

  bool pipelined() const { return layout_.has_value(); }
  // "data parallel: rank 1 of 2", "pipeline: rank 3 of 4 (data replica 1, stage 1 of 2, 1F1B)".
  std::string Where() const;
  // Under ZeRO-1, "ZeRO-1: this rank holds X of the Y bytes of AdamW moments of its parameters" (X after
  // sharding, Y without); empty otherwise.
  std::string OptimizerShare(const std::vector<std::unique_ptr<model::LanguageModel>>& chunks,
                             const std::vector<std::unique_ptr<ModelOptimizer>>& optimizers) const;

  // Collective over the run (every rank calls it): rank 0's *weights and *optimizer_state get the whole
  // model's tensors under the single-process names; the others' stay empty. With ZeRO-1 the owners first
  // send their moments to the first rank of their shard's group, which drops them again once copied.
  absl::Status GatherCheckpoint(const std::vector<std::unique_ptr<model::LanguageModel>>& chunks,
                                const std::vector<std::unique_ptr<ModelOptimizer>>& optimizers,
                                HostTensors* weights, HostTensors* optimizer_state);

  // This rank's share of an evaluation, each batch's loss in batch order (zeros for batches another rank
  // counts), to be summed over the ranks (StepStrategy::SumOverProcesses): data-parallel ranks take every
  // world-th batch through their model, a pipeline's data replicas every data-th through their stages.
  absl::StatusOr<std::vector<double>> ValidationShare(model::LanguageModel& model, const ValidationBatches& batches,
                                                      int64_t b, int64_t t);

 private:
  RunParallelism() = default;
  // ZeRO-1: a slice's parameters sharded over one group, each with its owner's rank there.
  struct Shard {
    distributed::Collectives* group = nullptr;
    std::map<std::string, int> owners;
  };
  std::vector<Shard> ShardSlice(const model::LanguageModel& chunk);
  absl::Status ConsolidateShards(const std::vector<std::unique_ptr<model::LanguageModel>>& chunks,
                                 const std::vector<std::unique_ptr<ModelOptimizer>>& optimizers);
  absl::Status GatherSlices(const std::vector<std::unique_ptr<model::LanguageModel>>& chunks,
                            const std::vector<std::unique_ptr<ModelOptimizer>>& optimizers, HostTensors* weights,
                            HostTensors* optimizer_state);

  distributed::Collectives* world_ = nullptr;  // null: one process
  int zero_stage_ = 0;
  std::unique_ptr<distributed::ParallelMesh> mesh_;     // data x pipeline (x expert), run.parallel.pipeline > 1
  std::unique_ptr<distributed::ParallelMesh> device_mesh_;  // its NCCL twin, for a GPU pipeline
  std::unique_ptr<distributed::expert::GroupExpertExchange> stage_exchange_;  // pipeline x expert: over mesh_->expert()
  std::optional<PipelineLayout> layout_;                // its schedule and stages
  std::unique_ptr<ExpertParallelRun> expert_parallel_;  // run.parallel.expert > 1
  std::unique_ptr<model::StepStrategy> strategy_;
  distributed::DataParallelStep* data_parallel_ = nullptr;    // strategy_, when it is data parallel
  distributed::pipeline::PipelineStep* pipeline_ = nullptr;  // strategy_, when it is pipeline parallel
  std::vector<std::vector<Shard>> shards_;                    // ZeRO-1: per slice; empty without
};

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_RUN_PARALLELISM_H_
