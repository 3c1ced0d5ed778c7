// DataParallelStep: the data-parallel step strategy (model/training/step_strategy.h) over a process group.
// Every rank holds the whole model; rank r computes micro-batches [r A/P, (r+1) A/P) of each step's A
// (A divisible by the P ranks), the gradients and losses are summed over the ranks (one all-reduce each), and
// every rank applies the same AdamW update, so the run is the single-process run up to the order of the
// gradient sums. Stop signals are agreed on at the step's all-reduce, so all ranks stop after the same step.
// Applied from outside the single-device model: the trainer picks it when run.parallel.data > 1. With
// ShardOptimizerState (run.parallel.zero_stage: 1) the optimizer state is sharded (zero.h). A model on a GPU
// sums its fp32 gradients in place on the device over a device group (NCCL), tensor by tensor, the
// all-reduces of a part (or of all the dense parameters, and of all the expert blocks) issued as one op
// (AllReduceManyAsync: one NCCL group). With overlap (and no expert parallelism) each part's op is queued on
// the group's own stream as the last backward finishes the part, after an event on the model's stream
// (CallOptions::after), so they run beside the rest of the backward; the model's stream never waits on the group's: the host waits for
// each op within its timeout after the backward, so an op stuck on a dead peer times out and aborts the
// communicator instead of blocking the model's stream (and the next host wait on it) forever. Without
// overlap, or with expert parallelism (whose MoE layers run their own NCCL exchanges on the model's stream
// during the backward: two communicators' kernels at once can deadlock), they are queued on the model's
// stream after the backward and each waited for within its timeout.
#ifndef LMFORGE_DISTRIBUTED_DATA_PARALLEL_STEP_H_
#define LMFORGE_DISTRIBUTED_DATA_PARALLEL_STEP_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "distributed/collectives.h"
#include "model/layers/moe/expert_exchange.h"
#include "model/training/step_strategy.h"

namespace lmf::distributed {

// The groups of expert parallelism, kept by the caller for the strategy's lifetime.
struct ExpertParallelism {
  Collectives* replicas = nullptr;  // the ranks that hold this rank's experts (ParallelMesh::data())
  Collectives* experts = nullptr;   // this rank's expert-parallel group (ParallelMesh::expert())
  const model::moe::ExpertExchange* exchange = nullptr;  // the MoE layers'; its first error fails the step
  Collectives* device_replicas = nullptr;  // a GPU model's: `replicas`' ranks over NCCL (the device mesh's data())
};

class DataParallelStep final : public model::StepStrategy {
 public:
  // `group`: every data-parallel rank, kept by the caller for this strategy's lifetime.
  // overlap: the last micro-batch's gradients are summed part by part (one bucket per block, the head and
  // the embeddings) as its backward finishes each, on the group's thread while the backward goes on
  // (LanguageModel::SetBackwardProgress, as torch DDP's buckets); else in one all-reduce after it.
  // `expert_parallel`: with expert parallelism, `group` is every rank (data x expert).
  // `device_group`: for a model on a GPU, the same ranks' group for device memory (an NcclGroup): the
  // gradients are summed (during the last backward with `overlap`, the class comment says how), the weights broadcast and the
  // step counts summed there, in place on the device and on the model's stream (each op queued after the
  // kernels that wrote its tensor); host values (losses, signals, checksums, expert loads, the expert
  // gradients' norm) stay on `group`. With expert parallelism its expert blocks go over
  // expert_parallel.device_replicas instead; so do ZeRO-1's broadcasts from the owners. Null for a CPU model.
  explicit DataParallelStep(Collectives& group, bool overlap = true, ExpertParallelism expert_parallel = {},
                            Collectives* device_group = nullptr)
      : group_(group), device_group_(device_group), overlap_(overlap), ep_(expert_parallel) {}

  int rank() const override { return group_.rank(); }
  int world_size() const override { return group_.world_size(); }
  int64_t first_micro_batch(int64_t micro_batches) const override {
    return rank() * (micro_batches / world_size());
  }
  int64_t micro_batch_count(int64_t micro_batches) const override { return micro_batches / world_size(); }

  // Rank 0's weights broadcast to every rank (they built the same ones from the same seed or checkpoint;
  // afterwards nothing but the data split tells them apart); expert blocks from the first of their replicas.
  absl::Status SyncParameters(model::LanguageModel& model) override;
  absl::StatusOr<model::StepResult> Step(model::LanguageModel& model, model::AdamW& optimizer,
                                         model::MicroBatchSource& data, const model::StepInput& input) override;
  absl::Status SumOverProcesses(std::vector<double>& values) override;
  // ZeRO-1 (zero.h): the optimizer updates only the parameters this rank owns, and each step ends with
  // every parameter broadcast from its owner: `owners` over the group (with expert parallelism: the dense
  // parameters), `expert_owners` over the replicas (expert parallelism: each expert block's owner among
  // the data ranks that hold it).
  void ShardOptimizerState(std::map<std::string, int> owners, std::map<std::string, int> expert_owners = {}) {
    owners_ = std::move(owners);
    expert_owners_ = std::move(expert_owners);
  }
  // The seconds the last step waited for the gradient sums after its last backward (all of the sum's time
  // without overlap): what the overlap did not hide. On a GPU it includes the backward's kernels still
  // running when the host has queued them all.
  double exposed_reduce_seconds() const { return exposed_reduce_seconds_; }
  // Each rank's checksum of its weights, compared on every rank (expert blocks: over their replicas): a
  // rank whose copy drifted (another thread count splits the optimizer's kernels differently) is named.
  absl::Status CheckReplicasAgree(const model::LanguageModel& model, int64_t step) override;

  // The parts of a step that PipelineStep also runs on each of its chunks (over a stage's replicas).
  // A GPU model's gradients all-reduced in place on the device groups (expert blocks over
  // expert_parallel.device_replicas, the others over device_group: one op for each), on the model's
  // stream after the backward, each waited for within its timeout.
  absl::Status SumOnDevice(const model::LanguageModel& model);
  // The model's step counts (a mixture of experts' expert loads) summed over the ranks: a GPU model's in
  // place on the device group, those a layer keeps in host memory over `group`.
  absl::Status SumStepCounts(const model::LanguageModel& model);

 private:
  Collectives& group_;
  Collectives* device_group_;  // a GPU model's; null on the CPU
  // This rank's micro-batches, their gradients summed over the ranks: in buckets started during the last
  // backward (overlap), or in one all-reduce after it.
  absl::Status SumGradients(model::LanguageModel& model, model::MicroBatchSource& data,
                            const model::StepInput& input, model::LossSums* sums);
  // The group a parameter's gradient is summed over: the replicas for an expert block, else every rank.
  Collectives& SumGroup(bool expert_shard) { return expert_shard ? *ep_.replicas : group_; }
  // Its device group, for a GPU model.
  Collectives& DeviceSumGroup(bool expert_shard) { return expert_shard ? *ep_.device_replicas : *device_group_; }
  bool expert_parallel() const { return ep_.replicas != nullptr; }
  // A GPU model's gradients summed during the backward (the class comment says when).
  bool DeviceOverlap() const { return overlap_ && device_group_ != nullptr && !expert_parallel(); }
  // Expert parallelism: the summed gradients' global norm over every rank's experts.
  absl::StatusOr<double> SummedNorm(const model::LanguageModel& model);

  bool overlap_;
  ExpertParallelism ep_;
  double exposed_reduce_seconds_ = 0;
  std::vector<float> gradients_[2];  // every gradient, for one all-reduce: [0] dense, [1] expert blocks
  std::map<std::string, int> owners_, expert_owners_;  // ZeRO-1: each parameter's owner; empty without
};

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_DATA_PARALLEL_STEP_H_
