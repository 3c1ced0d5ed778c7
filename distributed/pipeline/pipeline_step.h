// PipelineStep: the pipeline-parallel step strategy (model/training/step_strategy.h), composed with data
// parallelism over a ParallelMesh (data x pipeline; with expert parallelism inside each stage, data x
// pipeline x expert: below). Each rank holds the slices of its pipeline stages
// (one chunk, or virtual_stages chunks interleaved) and their optimizers. A step: data replica d takes
// micro-batches [d A/D, (d+1) A/D) of the step's A and runs them through its pipeline (PipelineStage); the
// tied token table's two copies get their summed gradient; every chunk's gradients are summed over the data
// group (the same stage's replicas); the global gradient norm is summed over the pipeline stages (the tied
// head copy counted once); every chunk takes the same AdamW update; the losses and a stop signal are summed
// over every rank, so all ranks return the same StepResult. With ShardOptimizerState (ZeRO-1,
// distributed/zero.h) each chunk's optimizer state is sharded over the stage's replicas: each replica updates
// the parameters it owns and broadcasts them to the others. The trainer builds it when run.parallel.pipeline > 1
// (experiments/trainer).
//
// On GPUs (chunks on a CUDA device, fp32 or bf16): `device_mesh` is the same mesh over an NCCL group: the
// stages' activations and their gradients go device to device over channels made from its pipeline()
// (PipelineStage), the stage replicas' dense gradients and step counts are summed in place on the devices over its stage(), the
// expert blocks' over its data() (the MoE layers' exchange then runs over its expert()), and the weights
// are broadcast there (SyncParameters, ZeRO-1's owners); the norm's parts, the losses, the signals and the
// expert loads go over the host groups.
//
// A mixture of experts: micro-batch m's training forward is keyed as one process keys it (ForwardMode with
// the step, the seed and the token index (first micro-batch + m) B T), so noisy gating draws the same noise;
// each MoE layer's auxiliary losses (balancing, router z-loss) are added, and their gradients computed, on
// the stage that holds it; the step's expert counts are summed over the data group with the gradients and
// gathered over the stages (every layer's, in layer order) for StepResult's expert loads and dropped share;
// then each chunk updates its own layers' expert biases from its summed counts (EndStep), as one process
// updates them.
//
// Pipeline x expert (mesh expert > 1): each stage is a block of data x expert ranks, every one a replica
// running its own micro-batches through its own pipeline; a stage's expert ranks run the same schedule in
// step, so their MoE layers exchange rows over mesh.expert() (the exchange the chunks were created with) in
// each forward and backward. The dense gradients and the step counts are summed over the stage's ranks
// (mesh.stage()), each expert block's over the data ranks that hold it (mesh.data()); the norm adds the
// stage's expert blocks over mesh.expert(). ZeRO-1 there: each chunk's dense moments sharded over
// mesh.stage(), each expert block's over the mesh.data() ranks that hold it, each broadcast from its owner
// over that group. The noise scale is not measured (a rank's expert gradients hold other ranks' tokens).
//
// The gradient noise scale (StepResult::noise_grad_sq, noise_trace) from the same two batch sizes as
// DataParallelStep's and SingleProcessStep's: |g_small|^2 is each replica's first micro-batch's squared
// gradient norm (each chunk's, read as its first backward ends, summed over the stages), averaged over the
// replicas, so data = 1 measures it too and no gradient is copied. Not measured (NaN) with tied embeddings
// (the first micro-batch's token-table gradient is split over the first and last stages; its cross term
// would take another table-sized exchange per step) nor with a schedule that splits the backward (the
// weight gradients come after the backward's end).
//
// The model and optimizer that StepStrategy's calls pass are this rank's first chunk and its optimizer (the
// trainer's); the later chunks of an interleaved schedule are the ones given to Create.
#ifndef LMFORGE_DISTRIBUTED_PIPELINE_PIPELINE_STEP_H_
#define LMFORGE_DISTRIBUTED_PIPELINE_PIPELINE_STEP_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "distributed/collectives.h"
#include "distributed/data_parallel_step.h"
#include "distributed/mesh.h"
#include "distributed/pipeline/pipeline_stage.h"
#include "model/optimizer/adamw.h"
#include "model/training/step_strategy.h"

namespace lmf::distributed::pipeline {

class PipelineStep final : public model::StepStrategy {
 public:
  // `world`: every rank (mesh.shape().size() of them); `mesh`: built over it, kept by the caller.
  // `schedule`: MakeSchedule for mesh.shape().pipeline ranks and the micro-batches of one replica (data x
  // expert replicas split a step's). chunks[c], optimizers[c]: this rank's slice of stage
  // schedule.stage(pipeline rank, c) and its optimizer; `stages`: every stage's layers (empty: the even
  // split). With mesh.shape().expert > 1, `exchange`: the one the chunks' MoE layers were created with, over
  // mesh.expert() (null otherwise). Errors: PipelineStage::Create's, or InvalidArgument for a mesh that is
  // not the world's or an exchange without an expert dimension (or the reverse). `device_mesh`: chunks on
  // a GPU: `mesh` built over an NCCL group of the same ranks (kept by the caller); InvalidArgument when it
  // is missing or given for CPU chunks.
  static absl::StatusOr<std::unique_ptr<PipelineStep>> Create(Collectives& world, ParallelMesh& mesh,
                                                              Schedule schedule,
                                                              std::vector<model::LanguageModel*> chunks,
                                                              std::vector<model::AdamW*> optimizers,
                                                              std::vector<model::LayerRange> stages = {},
                                                              const model::moe::ExpertExchange* exchange = nullptr,
                                                              ParallelMesh* device_mesh = nullptr);

  int rank() const override { return world_.rank(); }
  int world_size() const override { return world_.world_size(); }
  // This rank's replica of its stage: data x expert of them, each running its own micro-batches through
  // its own pipeline (the expert ranks of a stage in step, exchanging rows in every MoE layer).
  int64_t first_micro_batch(int64_t micro_batches) const override {
    return (mesh_.coordinates().data * mesh_.shape().expert + mesh_.coordinates().expert) *
           micro_batch_count(micro_batches);
  }
  int64_t micro_batch_count(int64_t micro_batches) const override { return micro_batches / replicas(); }
  int replicas() const { return mesh_.shape().data * mesh_.shape().expert; }

  // Each chunk's weights from its first data replica's (data coordinate 0) to the others.
  absl::Status SyncParameters(model::LanguageModel& model) override;
  absl::StatusOr<model::StepResult> Step(model::LanguageModel& model, model::AdamW& optimizer,
                                         model::MicroBatchSource& data,
                                         const model::StepInput& input) override;
  absl::Status SumOverProcesses(std::vector<double>& values) override;
  // ZeRO-1: owners[c] gives each parameter of chunk c its owner in mesh.stage() (ShardOptimizerState over
  // the chunk and mesh.stage().world_size() ranks; with experts spread over ranks, only the dense
  // parameters); expert_owners[c] (experts spread over ranks only: one per chunk, else empty) each expert
  // block's owner in mesh.data(). optimizers[c] must own just this rank's (OwnedBy each map with this rank's
  // rank in its group). After each update every parameter is broadcast from its owner over its group.
  // Errors: InvalidArgument for a count of maps that is not one per chunk (none for expert_owners without
  // experts spread over ranks).
  absl::Status ShardOptimizerState(std::vector<std::map<std::string, int>> owners,
                                   std::vector<std::map<std::string, int>> expert_owners = {});
  // The same stage's replicas hold the same weights, or an error naming the replica that differs by its
  // data and expert coordinates and its ranks.
  absl::Status CheckReplicasAgree(const model::LanguageModel& model, int64_t step) override;

  // Evaluation: one batch's mean cross-entropy through this replica's pipeline (PipelineStage::
  // ForwardLoss), on every rank of the pipeline group (and, with experts spread over ranks, in step with
  // the stage's other expert ranks, each with its own batch); the exchange's first error fails it.
  absl::StatusOr<double> ForwardLoss(const int32_t* ids, const int32_t* targets, int64_t b, int64_t t) {
    absl::StatusOr<double> loss = stage_.ForwardLoss(ids, targets, b, t);
    if (loss.ok() && exchange_ != nullptr && !exchange_->status().ok()) return exchange_->status();
    return loss;
  }
  // Whether this rank is the first stage's (pipeline coordinate 0): it alone adds an evaluation's losses
  // to the sum over every rank, which then counts each data replica's batches once.
  bool first_stage() const { return mesh_.coordinates().pipeline == 0; }

 private:
  PipelineStep(Collectives& world, ParallelMesh& mesh, PipelineStage stage, std::vector<model::AdamW*> optimizers,
               const model::moe::ExpertExchange* exchange, ParallelMesh* device_mesh)
      : world_(world),
        mesh_(mesh),
        stage_(std::move(stage)),
        optimizers_(std::move(optimizers)),
        exchange_(exchange),
        device_mesh_(device_mesh) {}
  // DataParallelStep over the stage's replicas (host groups, and device_mesh_'s on a GPU).
  DataParallelStep Replicas() const;
  // The groups DataParallelStep syncs and checks a stage's replicas over (none without an exchange).
  ExpertParallelism ExpertGroups() const;
  // This replica's micro-batches from `data` (the others skipped), in host memory.
  absl::Status ReadMicroBatches(model::MicroBatchSource& data, const model::StepInput& input);
  // Every chunk's gradients and step counts (VisitStepCounts) summed over the stage's replicas: one
  // all-reduce over mesh.stage() (the data group without experts spread over ranks), and one of the expert
  // blocks over the data group with them; on GPUs DataParallelStep's SumOnDevice and SumStepCounts per chunk.
  absl::Status SumOverReplicas();
  // On the CPU: the parameters that are expert blocks (or the others, with the step counts) summed over
  // `group`.
  absl::Status SumPart(Collectives& group, bool expert_blocks);
  // Every stage's step counts (summed over the data group), in layer order, on every rank of the pipeline
  // group: the expert loads of the whole model (SummarizeExpertLoad), as one process counts them.
  absl::StatusOr<model::NamedCounts> GatherStepCounts();
  // The norm of the step's mean gradient over every stage.
  absl::StatusOr<double> GlobalNorm(int64_t micro_batches);
  // Whether this step measures the gradient noise scale (the class comment says when).
  bool MeasuresNoiseScale(const model::StepInput& input) const;
  // Until the hooks are cleared: each chunk adds its squared gradient norm to *first_grad_sq as its first
  // backward of the step ends (LanguageModel::SetBackwardProgress): that of the replica's first micro-batch.
  void WatchFirstBackwards(double* first_grad_sq);

  Collectives& world_;
  ParallelMesh& mesh_;
  PipelineStage stage_;
  std::vector<model::AdamW*> optimizers_;
  const model::moe::ExpertExchange* exchange_;  // expert parallelism within each stage; null without
  ParallelMesh* device_mesh_;                   // chunks on a GPU: the mesh over NCCL; else null
  std::vector<std::map<std::string, int>> owners_;         // ZeRO-1: per chunk, over mesh.stage(); empty without
  std::vector<std::map<std::string, int>> expert_owners_;  // ZeRO-1, experts over ranks: per chunk, over data()
  std::vector<std::vector<int32_t>> ids_, targets_;
  std::vector<float> gradients_;
  std::vector<double> count_sizes_;  // GatherStepCounts: each pipeline rank's span, after the first step
};

}  // namespace lmf::distributed::pipeline

#endif  // LMFORGE_DISTRIBUTED_PIPELINE_PIPELINE_STEP_H_
