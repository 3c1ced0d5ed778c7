// Expert parallelism in the trainer (run.parallel.expert = ep > 1; run.proto ParallelConfig): the run's
// data * ep processes form a ParallelMesh (distributed/mesh.h) of data x expert; each builds the exchange
// its model's mixture-of-experts layers send rows through (LanguageModel::Create's expert_exchange) and
// the groups DataParallelStep sums over (distributed/data_parallel_step.h says what goes where). A
// checkpoint holds every expert under its global name, so a run resumes under any layout (or in one
// process): before rank 0 writes one, the ranks of its expert group send it their blocks' weights and AdamW
// moments (GatherExpertBlocks), and each rank that loads one takes its own blocks (LoadWeights skips the
// others').
#ifndef LMFORGE_EXPERIMENTS_TRAINER_EXPERT_PARALLEL_H_
#define LMFORGE_EXPERIMENTS_TRAINER_EXPERT_PARALLEL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "distributed/collectives.h"
#include "distributed/data_parallel_step.h"
#include "distributed/expert/expert_exchange.h"
#include "distributed/mesh.h"
#include "experiments/trainer/weights.h"
#include "model/language_model/language_model.h"
#include "model/optimizer/adamw.h"

namespace lmf::experiments {

class ExpertParallelRun {
 public:
  // Collective over `world` (data * expert ranks, every one calls it). `device_group`: a CUDA run's NCCL
  // group over world's ranks (null on the CPU): its mesh's expert group carries the MoE layers' rows and its
  // data groups the expert blocks' gradient sums, on the devices; the host mesh keeps the host values.
  static absl::StatusOr<std::unique_ptr<ExpertParallelRun>> Build(distributed::Collectives& world, int data,
                                                                  int expert,
                                                                  distributed::Collectives* device_group = nullptr);

  model::moe::ExpertExchange* exchange() { return exchange_.get(); }
  distributed::ExpertParallelism groups() {
    return distributed::ExpertParallelism{&mesh_->data(), &mesh_->expert(), exchange_.get(),
                                          device_mesh_ != nullptr ? &device_mesh_->data() : nullptr};
  }

  // Collective over the run (every rank calls it; those outside rank 0's expert group return at once):
  // appends to rank 0's `weights` and `optimizer_state` every other rank's expert blocks (values, then
  // "<name>.exp_avg" and "<name>.exp_avg_sq"), under their global names.
  absl::Status GatherExpertBlocks(const model::LanguageModel& model, const model::AdamW& adamw, HostTensors* weights,
                                  HostTensors* optimizer_state);

 private:
  ExpertParallelRun() = default;

  std::unique_ptr<distributed::ParallelMesh> mesh_;
  std::unique_ptr<distributed::ParallelMesh> device_mesh_;  // a CUDA run's, over its NCCL group; else null
  std::unique_ptr<distributed::expert::GroupExpertExchange> exchange_;
};

// Collective over `experts` (an expert-parallel group; every rank of it calls it with its model (slice) and
// optimizer): appends to group rank 0's `weights` and `optimizer_state` the other ranks' expert blocks of
// `model`'s layers (values, then "<name>.exp_avg" and "<name>.exp_avg_sq") under their global names. A GPU
// model's blocks are copied to the host and gathered there.
absl::Status GatherExpertBlocks(distributed::Collectives& experts, const model::LanguageModel& model,
                                const model::AdamW& adamw, HostTensors* weights, HostTensors* optimizer_state);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_EXPERT_PARALLEL_H_
