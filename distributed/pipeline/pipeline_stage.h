// One pipeline rank's part of a training step: the model slices it holds (one per chunk of the schedule),
// run through the schedule's actions with activations sent forward and their gradients sent back point to
// point over the pipeline group. Every micro-batch's activations live in their own model::Activations from
// its forward to its backward, so a schedule holds as many as it has micro-batches in flight; each input
// gradient lives from its backward until its send is done, waited for as soon as the schedule shows its
// receive to have happened (SendsReceivedBy).
//
//   std::vector<std::unique_ptr<LanguageModel>> slices;  // chunk c: StageLayers(L, S, schedule.stage(r, c))
//   absl::StatusOr<PipelineStage> stage = PipelineStage::Create(group, *schedule, {slices[0].get(), ...});
//   absl::StatusOr<model::LossSums> sums = stage->Run(micro_batches, b, t);  // gradients accumulated
//   stage->SumTiedEmbeddingGrads();  // a tied token table: the first and last stages' copies summed
//
// A schedule with split backwards (ZB-H1) runs each BI as the chunk's backward with its weight gradients
// deferred (model/layers/deferred_weight_grads.h) into an object kept with the micro-batch's activations
// until its BW runs them.
//
// The gradients equal single-process gradient accumulation over the same micro-batches bit for bit (each
// chunk runs its micro-batches' backwards, and a split schedule its BWs, in ascending order, as accumulation
// does), except a tied token table's, summed once at the end instead of per micro-batch (fp32 rounding).
//
// Devices and precisions: the chunks' (all on one device, in one activation dtype); the hidden states and
// their gradients travel in the activation dtype (bf16 in a bf16 run, as one process keeps them between its
// blocks). On a GPU they go device to device over NCCL, one two-rank channel (a subgroup of the pipeline's
// device group) per (sender, receiver, activations or gradients) that the schedule sends over, each used one
// way only: an NCCL send holds its communicator until the peer posts the receive, so a rank's sends and
// receives on one communicator would wait on each other (1F1B's send-then-receive steps, with messages
// beyond NCCL's buffers), while a channel's sends wait only for receives that its receiver posts in the same
// order (ValidateSchedule checks it), which is the schedules' contract: a send does not wait for its receive.
// Sends and receives run on the channels' own streams, after the kernels queued on the chunks' stream so far;
// a receive is waited for before the compute that reads it. A tied token table's two gradients are summed
// by an NCCL all-reduce between the first and last pipeline ranks.
#ifndef LMFORGE_DISTRIBUTED_PIPELINE_PIPELINE_STAGE_H_
#define LMFORGE_DISTRIBUTED_PIPELINE_PIPELINE_STAGE_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "distributed/collectives.h"
#include "distributed/pipeline/schedule.h"
#include "kernels/core/tensor.h"
#include "model/language_model/language_model.h"
#include "model/training/step_strategy.h"

namespace lmf::distributed::pipeline {

// The layers of stage `stage` of `num_stages` for a model of `n_layers`: an even split, the first
// n_layers mod num_stages stages one layer more.
model::LayerRange StageLayers(int64_t n_layers, int num_stages, int stage);
// Every stage's layers: `layers_per_stage` (first stage first; InvalidArgument naming the entry when there
// are not num_stages of them, one is below 1 or they do not sum to n_layers), or the even split of
// StageLayers when it is empty.
absl::StatusOr<std::vector<model::LayerRange>> StageRanges(int64_t n_layers, int num_stages,
                                                           const std::vector<int64_t>& layers_per_stage = {});

// One micro-batch's (B, T) token ids and targets in host memory; every rank is given every micro-batch (the
// first stage reads the ids, the last the targets).
struct MicroBatch {
  const int32_t* ids = nullptr;
  const int32_t* targets = nullptr;
};

class PipelineStage {
 public:
  // `group`: the pipeline ranks in host memory, group.rank() = this rank of the schedule. chunks[c]: the
  // slice of stage schedule.stage(rank, c). `stages`: every stage's layers (StageRanges; empty: the even
  // split). InvalidArgument when the group's size is not the schedule's ranks, a chunk is missing, holds
  // other layers than its stage's, or is on another device or in another precision than chunk 0.
  // `device_group`: chunks on a GPU: the same pipeline ranks in the same order over NCCL on that device
  // (kept by the caller; the channels are made from it, collectively: every pipeline rank calls Create at
  // once); InvalidArgument when it is missing for GPU chunks, given for CPU ones, or of other ranks.
  static absl::StatusOr<PipelineStage> Create(Collectives& group, Schedule schedule,
                                              std::vector<model::LanguageModel*> chunks,
                                              std::vector<model::LayerRange> stages = {},
                                              Collectives* device_group = nullptr);

  // One step: zero the chunks' gradients, run this rank's actions, and return the sums of the last stage's
  // per-micro-batch losses and of this rank's chunks' auxiliary losses (zero on the other ranks: see
  // SumLosses). `mode`: the forwards' (layer.h), that of micro_batches[0]; micro-batch m's starts m * b * t
  // tokens later in the step (mode.first_token + m b t), so a training step's random draws (noisy gating)
  // are the ones one process draws for the same micro-batches. Errors: a peer that fails or stalls (the
  // collective's error, naming it), a micro-batch the model refuses.
  absl::StatusOr<model::LossSums> Run(const std::vector<MicroBatch>& micro_batches, int64_t b, int64_t t,
                                      const model::ForwardMode& mode = model::ForwardMode());
  // Seconds the last Run spent in the chunks' forwards and backwards (the rest of its time is the bubble
  // and the transfers).
  double compute_seconds() const { return compute_seconds_; }
  // The most bytes of gradient copies the deferred weight gradients held at once during the last Run (split
  // schedules; 0 for the others), on top of the activations, which a split schedule keeps until each BW.
  int64_t peak_deferred_bytes() const { return peak_deferred_bytes_; }
  // The most input gradients (one micro-batch's hidden-state gradient each) the last Run held at once: each
  // from its backward until its send is done, waited for as soon as the schedule shows its receive has
  // happened (SendsReceivedBy), not at the step's end.
  int peak_input_gradients() const { return peak_input_gradients_; }
  // The last Run's mean seconds of one F, B, BI and BW of this rank (0 for an op the schedule lacks), scaled
  // to a whole stage as Simulate's Costs are (times chunks); transfers 0.
  Costs measured_costs() const;
  // The losses summed over the pipeline ranks (the same on every rank).
  absl::StatusOr<model::LossSums> SumLosses(const model::LossSums& local);
  // Forward only (evaluation): one batch of (B, T) ids and targets through every stage in order, each
  // stage's output sent to the next; the last stage's mean cross-entropy, the same on every pipeline rank
  // (the whole model's ForwardWithLoss, bit for bit). Every pipeline rank calls it with the same batch.
  absl::StatusOr<double> ForwardLoss(const int32_t* ids, const int32_t* targets, int64_t b, int64_t t);
  const Schedule& schedule() const { return schedule_; }
  const std::vector<model::LanguageModel*>& chunks() const { return chunks_; }
  Collectives& group() { return *group_; }
  // A model with tied embeddings: the first stage's token table and the last stage's copy get the sum of
  // both gradients (nothing to do without tying).
  absl::Status SumTiedEmbeddingGrads();

 private:
  PipelineStage(Collectives& group, Schedule schedule, std::vector<model::LanguageModel*> chunks)
      : group_(&group),
        schedule_(std::move(schedule)),
        chunks_(std::move(chunks)),
        sends_received_by_(SendsReceivedBy(schedule_)[group.rank()]) {}
  // Makes channels_ and tied_ from `device_group` (collective over it).
  absl::Status ConnectChannels(Collectives& device_group);
  // One Run's state and its actions (pipeline_stage.cc).
  class StepRun;

  // A message's way: from rank `from` to rank `to`, activations or their gradients (the schedule's channels).
  using Channel = std::tuple<int, int, bool>;  // (from, to, gradient)

  int Tag(bool gradient, int micro_batch, int chunk) const;
  int64_t HiddenElements(int64_t b, int64_t t) const;
  size_t HiddenBytes(int64_t b, int64_t t) const;
  // One micro-batch's hidden states, or their gradient: (B*T, C) in the activation dtype, on the chunks'
  // device.
  kernels::Tensor NewHidden(int64_t b, int64_t t) const;
  bool on_gpu() const;
  // A message from `peer` into `into` (the `gradient` way: from the next rank, else from the previous).
  absl::Status RecvHidden(kernels::Tensor& into, int peer, bool gradient, int tag);
  // `bytes` at `values` (on the chunks' device, which must stay there until the send's Wait) to `peer`.
  std::unique_ptr<Work> SendHidden(const void* values, size_t bytes, int peer, bool gradient, int tag);

  Collectives* group_;
  Schedule schedule_;
  std::vector<model::LanguageModel*> chunks_;
  std::vector<int> sends_received_by_;  // this rank's SendsReceivedBy
  // On a GPU: this rank's channels (2 ranks each: the sender is rank 0, the receiver rank 1), and with tied
  // embeddings over more than one rank the first and last pipeline ranks' group (null on the others).
  std::map<Channel, std::unique_ptr<Collectives>> channels_;
  std::unique_ptr<Collectives> tied_;
  double compute_seconds_ = 0;
  int64_t peak_deferred_bytes_ = 0;
  int peak_input_gradients_ = 0;
  std::array<double, 4> op_seconds_{};  // [Op::kForward .. Op::kBackwardWeight] in the last Run
  std::array<int, 4> op_counts_{};
};

}  // namespace lmf::distributed::pipeline

#endif  // LMFORGE_DISTRIBUTED_PIPELINE_PIPELINE_STAGE_H_
