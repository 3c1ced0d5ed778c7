// One pipeline rank's step (see pipeline_stage.h).
#include "distributed/pipeline/pipeline_stage.h"

#include <algorithm>
#include <chrono>
#include <list>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/memory/memory.h"
#include "model/layers/deferred_weight_grads.h"

namespace lmf::distributed::pipeline {

model::LayerRange StageLayers(int64_t n_layers, int num_stages, int stage) {
  const int64_t base = n_layers / num_stages, extra = n_layers % num_stages;
  const int64_t first = stage * base + std::min<int64_t>(stage, extra);
  return {first, first + base + (stage < extra ? 1 : 0)};
}

absl::StatusOr<std::vector<model::LayerRange>> StageRanges(int64_t n_layers, int num_stages,
                                                           const std::vector<int64_t>& layers_per_stage) {
  std::vector<model::LayerRange> ranges;
  if (layers_per_stage.empty()) {
    for (int s = 0; s < num_stages; ++s) ranges.push_back(StageLayers(n_layers, num_stages, s));
    return ranges;
  }
  if (static_cast<int>(layers_per_stage.size()) != num_stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage layers: ", layers_per_stage.size(), " entries for ", num_stages, " stages"));
  }
  int64_t first = 0;
  for (int s = 0; s < num_stages; ++s) {
    if (layers_per_stage[s] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("stage layers: stage ", s, " has ", layers_per_stage[s],
                                                     " layers; every stage needs one"));
    }
    ranges.push_back({first, first + layers_per_stage[s]});
    first += layers_per_stage[s];
  }
  if (first != n_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage layers: the stages hold ", first, " layers, the model ", n_layers));
  }
  return ranges;
}

absl::StatusOr<PipelineStage> PipelineStage::Create(Collectives& group, Schedule schedule,
                                                    std::vector<model::LanguageModel*> chunks,
                                                    std::vector<model::LayerRange> stages,
                                                    Collectives* device_group) {
  const std::string what = absl::StrCat("pipeline rank ", group.rank(), ": ");
  if (group.world_size() != schedule.ranks) {
    return absl::InvalidArgumentError(absl::StrCat(what, "the schedule has ", schedule.ranks,
                                                   " ranks but the pipeline group ", group.world_size()));
  }
  if (static_cast<int>(chunks.size()) != schedule.chunks) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "the schedule runs ", schedule.chunks, " chunks per rank, given ", chunks.size()));
  }
  const int num_stages = schedule.num_stages();
  const int64_t max_tag = 2 * static_cast<int64_t>(schedule.micro_batches) * num_stages;
  if (max_tag > Collectives::kMaxTag) {
    return absl::InvalidArgumentError(absl::StrCat(what, schedule.micro_batches, " micro-batches x ", num_stages,
                                                   " stages are more messages than one step can tag"));
  }
  for (int c = 0; c < schedule.chunks; ++c) {
    const model::LanguageModel* chunk = chunks[c];
    if (chunk == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, "chunk ", c, " is missing"));
    const int stage = schedule.stage(group.rank(), c);
    if (stages.empty()) {
      absl::StatusOr<std::vector<model::LayerRange>> even = StageRanges(chunk->config().n_layers, num_stages);
      if (!even.ok()) return even.status();
      stages = *std::move(even);
    }
    if (static_cast<int>(stages.size()) != num_stages) {
      return absl::InvalidArgumentError(absl::StrCat(what, "given the layers of ", stages.size(),
                                                     " stages, the schedule has ", num_stages));
    }
    const model::LayerRange want = stages[stage];
    if (chunk->first_layer() != want.first || chunk->last_layer() != want.last) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, "chunk ", c, " (stage ", stage, " of ", num_stages, ") holds layers [", chunk->first_layer(), ", ",
          chunk->last_layer(), "), the split gives [", want.first, ", ", want.last, ")"));
    }
    const model::LanguageModel& first = *chunks[0];
    if (chunk->context().device != first.context().device || chunk->activation_dtype() != first.activation_dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "chunk ", c, " is on another device or in another precision than chunk 0"));
    }
  }
  const bool gpu = chunks[0]->context().device.is_cuda();
  if (gpu != (device_group != nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(what, gpu ? "chunks on a GPU need the pipeline's device group"
                                                             : "a device group given for chunks on the CPU"));
  }
  if (device_group != nullptr &&
      (device_group->world_size() != group.world_size() || device_group->rank() != group.rank())) {
    return absl::InvalidArgumentError(absl::StrCat(what, "the device group '", device_group->name(), "' is rank ",
                                                   device_group->rank(), " of ", device_group->world_size(),
                                                   ", the pipeline group rank ", group.rank(), " of ",
                                                   group.world_size()));
  }
  PipelineStage stage(group, std::move(schedule), std::move(chunks));
  if (device_group != nullptr) {
    if (absl::Status s = stage.ConnectChannels(*device_group); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(what, s.message()));
    }
  }
  return stage;
}

absl::Status PipelineStage::ConnectChannels(Collectives& device_group) {
  // Every channel the schedule sends over, in one order on every rank (every rank holds the whole schedule).
  const int ranks = schedule_.ranks;
  std::set<Channel> used;
  for (int r = 0; r < ranks; ++r) {
    for (const Action& a : schedule_.actions[r]) {
      if (a.op == Op::kSendActivation) used.insert({r, (r + 1) % ranks, false});
      if (a.op == Op::kSendGradient) used.insert({r, (r + ranks - 1) % ranks, true});
    }
  }
  for (const auto& [from, to, gradient] : used) {
    absl::StatusOr<std::unique_ptr<Collectives>> channel = device_group.NewSubgroup(
        {from, to}, absl::StrCat(device_group.name(), gradient ? " gradients " : " activations ", from, "->", to));
    if (!channel.ok()) return channel.status();
    if (*channel != nullptr) channels_[{from, to, gradient}] = *std::move(channel);
  }
  if (chunks_[0]->config().tied_embeddings && ranks > 1) {
    absl::StatusOr<std::unique_ptr<Collectives>> tied =
        device_group.NewSubgroup({0, ranks - 1}, absl::StrCat(device_group.name(), " tied token table"));
    if (!tied.ok()) return tied.status();
    tied_ = *std::move(tied);
  }
  return absl::OkStatus();
}

int PipelineStage::Tag(bool gradient, int micro_batch, int boundary) const {
  // One tag per message of the step: which way, which micro-batch, between stages boundary and boundary + 1.
  return ((gradient ? 1 : 0) * schedule_.micro_batches + micro_batch) * schedule_.num_stages() + boundary;
}

int64_t PipelineStage::HiddenElements(int64_t b, int64_t t) const { return b * t * chunks_[0]->config().d_model; }

size_t PipelineStage::HiddenBytes(int64_t b, int64_t t) const {
  return static_cast<size_t>(HiddenElements(b, t)) * kernels::DTypeSize(chunks_[0]->activation_dtype());
}

kernels::Tensor PipelineStage::NewHidden(int64_t b, int64_t t) const {
  const model::LanguageModel& chunk = *chunks_[0];
  return kernels::Tensor::Empty(kernels::Shape{HiddenElements(b, t)}, chunk.activation_dtype(),
                                chunk.context().allocator);
}

bool PipelineStage::on_gpu() const { return chunks_[0]->context().device.is_cuda(); }

absl::Status PipelineStage::RecvHidden(kernels::Tensor& into, int peer, bool gradient, int tag) {
  const Buffer buffer{into.data(), into.nbytes(), DataType::kU8, into.device()};
  if (!on_gpu()) return group_->Recv(buffer, peer, tag);
  CallOptions options;
  options.after = chunks_[0]->context().stream;  // the kernels that last used the tensor's memory
  return channels_.at({peer, group_->rank(), gradient})->Recv(buffer, /*peer=*/0, tag, options);
}

std::unique_ptr<Work> PipelineStage::SendHidden(const void* values, size_t bytes, int peer, bool gradient,
                                                int tag) {
  const Buffer buffer{const_cast<void*>(values), bytes, DataType::kU8, chunks_[0]->context().device};
  if (!on_gpu()) return group_->SendAsync(buffer, peer, tag);
  CallOptions options;
  options.after = chunks_[0]->context().stream;  // the kernels that wrote it
  return channels_.at({group_->rank(), peer, gradient})->SendAsync(buffer, /*peer=*/1, tag, options);
}

// One Run: what its micro-batches hold between their actions (activations, received inputs and gradients,
// deferred weight gradients, sends in flight), keyed by (micro-batch, chunk), and one method per op of the
// schedule. A nested class of PipelineStage: it times the ops into the stage's counters.
class PipelineStage::StepRun {
 public:
  StepRun(PipelineStage& stage, const std::vector<MicroBatch>& micro_batches, int64_t b, int64_t t,
          const model::ForwardMode& mode)
      : stage_(stage), micro_batches_(micro_batches), b_(b), t_(t), mode_(mode),
        bytes_(stage.HiddenBytes(b, t)), rank_(stage.group_->rank()),
        ranks_(stage.schedule_.ranks) {}

  // Runs action `index` of this rank's, `a`, then waits for the gradient sends whose receives the schedule
  // shows to have happened by then (freeing what they sent); an error names this rank and the action.
  absl::Status Do(int index, const Action& a) {
    absl::Status s = Dispatch(index, a, Key{a.micro_batch, a.chunk}, *stage_.chunks_[a.chunk],
                              stage_.schedule_.stage(rank_, a.chunk));
    if (s.ok()) s = WaitForGradientSends(index);
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrCat("pipeline rank ", rank_, " at ", ActionName(a), ": ", s.message()));
  }
  // Waits for the sends still in flight (the activations' and the gradients').
  absl::Status WaitForSends() {
    for (auto& [key, work] : activation_sends_) {
      if (absl::Status s = work->Wait(); !s.ok()) return s;
    }
    while (!gradient_sends_.empty()) {
      if (absl::Status s = WaitForGradientSends(gradient_sends_.begin()->first); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  const model::LossSums& sums() const { return sums_; }

 private:
  using Key = std::pair<int, int>;  // (micro-batch, chunk)
  using Clock = std::chrono::steady_clock;

  // The gradient sends due after action `index` (SendsReceivedBy), each waited for and its tensor freed.
  absl::Status WaitForGradientSends(int index) {
    auto due = gradient_sends_.find(index);
    if (due == gradient_sends_.end()) return absl::OkStatus();
    absl::Status status;
    for (auto& [key, work] : due->second) {  // every one waited for: the tensors go with the entry
      if (absl::Status s = work->Wait(); status.ok()) status = s;
      input_grads_.erase(key);
    }
    gradient_sends_.erase(due);
    return status;
  }

  absl::Status Dispatch(int index, const Action& a, const Key& key, model::LanguageModel& model, int stage) {
    switch (a.op) {
      case Op::kRecvActivation:
        return RecvActivation(key, stage);
      case Op::kForward:
        return Forward(key, model);
      case Op::kSendActivation:
        SendActivation(key, stage);
        return absl::OkStatus();
      case Op::kRecvGradient:
        return RecvGradient(key, stage);
      case Op::kBackward:
      case Op::kBackwardInput:
        return Backward(key, model, /*split=*/a.op == Op::kBackwardInput);
      case Op::kBackwardWeight:
        return BackwardWeight(key, model);
      case Op::kSendGradient: {
        const kernels::Tensor& grad = input_grads_.at(key);  // kept until the send is done
        gradient_sends_[stage_.sends_received_by_[index]].push_back(
            {key, stage_.SendHidden(grad.data(), grad.nbytes(), PrevRank(), true,
                                    stage_.Tag(true, key.first, stage - 1))});
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  int PrevRank() const { return (rank_ + ranks_ - 1) % ranks_; }
  int NextRank() const { return (rank_ + 1) % ranks_; }

  void Timed(Clock::time_point start, Op op) {
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    stage_.compute_seconds_ += seconds;
    stage_.op_seconds_[static_cast<size_t>(op)] += seconds;
    ++stage_.op_counts_[static_cast<size_t>(op)];
  }

  absl::Status RecvActivation(const Key& key, int stage) {
    kernels::Tensor& in = inputs_.emplace(key, stage_.NewHidden(b_, t_)).first->second;
    return stage_.RecvHidden(in, PrevRank(), false, stage_.Tag(false, key.first, stage - 1));
  }

  absl::Status Forward(const Key& key, model::LanguageModel& model) {
    const auto [micro_batch, chunk] = key;
    model::StageInput in;
    in.b = b_;
    in.t = t_;
    if (model.has_embedding()) {
      in.ids = micro_batches_[micro_batch].ids;
    } else if (ranks_ == 1) {  // the previous stage is this rank's previous chunk
      in.hidden = activations_.at({micro_batch, chunk - 1}).hidden_output();
    } else {
      in.hidden = inputs_.at(key).data();
    }
    if (model.has_head()) in.targets = micro_batches_[micro_batch].targets;
    model::Activations& act = activations_.emplace(key, model.NewActivations()).first->second;
    model::ForwardMode micro_mode = mode_;
    micro_mode.first_token += micro_batch * b_ * t_;
    const Clock::time_point start = Clock::now();
    if (absl::Status s = model.ForwardStage(in, act, micro_mode); !s.ok()) return s;
    Timed(start, Op::kForward);
    inputs_.erase(key);  // ForwardStage copied it
    sums_.aux_loss += act.aux_loss();  // each chunk's layers' auxiliary losses (a mixture of experts)
    if (model.has_head()) {
      sums_.loss += act.loss();
      sums_.z_loss += act.z_loss_term();
    }
    return absl::OkStatus();
  }

  void SendActivation(const Key& key, int stage) {
    activation_sends_[key] = stage_.SendHidden(activations_.at(key).hidden_output(), bytes_, NextRank(), false,
                                               stage_.Tag(false, key.first, stage));
  }

  absl::Status RecvGradient(const Key& key, int stage) {
    kernels::Tensor& grad = output_grads_.emplace(key, stage_.NewHidden(b_, t_)).first->second;
    return stage_.RecvHidden(grad, NextRank(), true, stage_.Tag(true, key.first, stage));
  }

  // B, or with `split` BI: the weight gradients deferred to the BW of `key`.
  absl::Status Backward(const Key& key, model::LanguageModel& model, bool split) {
    void* dinput = nullptr;
    if (!model.has_embedding()) dinput = input_grads_.emplace(key, stage_.NewHidden(b_, t_)).first->second.data();
    const Key next{key.first, key.second + 1};  // ranks == 1: the next stage is this rank's next chunk
    const void* doutput = model.has_head() ? nullptr
                          : ranks_ == 1    ? input_grads_.at(next).data()
                                           : output_grads_.at(key).data();
    const Clock::time_point start = Clock::now();
    model::DeferredWeightGrads* weights = split ? &deferred_[key] : nullptr;
    stage_.peak_input_gradients_ = std::max(stage_.peak_input_gradients_, static_cast<int>(input_grads_.size()));
    model.BackwardStage(activations_.at(key), doutput, dinput, weights);
    Timed(start, split ? Op::kBackwardInput : Op::kBackward);
    if (split) {
      deferred_bytes_ += weights->bytes();
      stage_.peak_deferred_bytes_ = std::max(stage_.peak_deferred_bytes_, deferred_bytes_);
    }
    if (ranks_ == 1) input_grads_.erase(next);
    if (auto it = activation_sends_.find(key); it != activation_sends_.end()) {
      if (absl::Status s = it->second->Wait(); !s.ok()) return s;
      activation_sends_.erase(it);
    }
    if (!split) activations_.erase(key);  // BW reads the forward's inputs
    output_grads_.erase(key);
    return absl::OkStatus();
  }

  absl::Status BackwardWeight(const Key& key, model::LanguageModel& model) {
    auto it = deferred_.find(key);
    if (it == deferred_.end()) return absl::InternalError("no BI ran before it");
    deferred_bytes_ -= it->second.bytes();
    const Clock::time_point start = Clock::now();
    it->second.Run(model.context());
    Timed(start, Op::kBackwardWeight);
    deferred_.erase(it);
    activations_.erase(key);
    return absl::OkStatus();
  }

  PipelineStage& stage_;
  const std::vector<MicroBatch>& micro_batches_;
  const int64_t b_, t_;
  const model::ForwardMode& mode_;
  const size_t bytes_;  // of one micro-batch's hidden states
  const int rank_, ranks_;
  std::map<Key, model::Activations> activations_;
  // Received inputs and output gradients (until their compute), and the input gradients (until their sends
  // are waited for, WaitForGradientSends: the sends read them).
  std::map<Key, kernels::Tensor> inputs_, output_grads_, input_grads_;
  std::map<Key, model::DeferredWeightGrads> deferred_;  // between a split backward's BI and its BW
  std::map<Key, std::unique_ptr<Work>> activation_sends_;  // waited on before their activations go
  // By the action after which each is waited for (SendsReceivedBy): the input gradient it sends.
  std::map<int, std::vector<std::pair<Key, std::unique_ptr<Work>>>> gradient_sends_;
  model::LossSums sums_;
  int64_t deferred_bytes_ = 0;
};

absl::StatusOr<model::LossSums> PipelineStage::Run(const std::vector<MicroBatch>& micro_batches, int64_t b,
                                                   int64_t t, const model::ForwardMode& mode) {
  if (static_cast<int>(micro_batches.size()) != schedule_.micro_batches) {
    return absl::InvalidArgumentError(absl::StrCat("the pipeline schedule runs ", schedule_.micro_batches,
                                                   " micro-batches per step, given ", micro_batches.size()));
  }
  for (model::LanguageModel* chunk : chunks_) chunk->ZeroGrad();
  compute_seconds_ = 0;
  op_seconds_ = {};
  op_counts_ = {};
  peak_deferred_bytes_ = 0;
  peak_input_gradients_ = 0;
  StepRun run(*this, micro_batches, b, t, mode);
  const std::vector<Action>& actions = schedule_.actions[group_->rank()];
  for (size_t i = 0; i < actions.size(); ++i) {
    if (absl::Status s = run.Do(static_cast<int>(i), actions[i]); !s.ok()) return s;
  }
  if (absl::Status s = run.WaitForSends(); !s.ok()) return s;
  return run.sums();
}

Costs PipelineStage::measured_costs() const {
  const auto mean = [&](Op op) {
    const size_t i = static_cast<size_t>(op);
    return op_counts_[i] == 0 ? 0.0 : op_seconds_[i] / op_counts_[i] * schedule_.chunks;  // per whole stage
  };
  Costs costs;
  costs.forward = mean(Op::kForward);
  costs.backward = mean(Op::kBackward);
  costs.backward_input = mean(Op::kBackwardInput);
  costs.backward_weight = mean(Op::kBackwardWeight);
  costs.transfer = 0;
  return costs;
}

absl::StatusOr<model::LossSums> PipelineStage::SumLosses(const model::LossSums& local) {
  double all[3] = {local.loss, local.z_loss, local.aux_loss};
  if (absl::Status s = group_->AllReduceSum(all, 3); !s.ok()) return s;
  return model::LossSums{all[0], all[1], all[2]};
}

absl::StatusOr<double> PipelineStage::ForwardLoss(const int32_t* ids, const int32_t* targets, int64_t b,
                                                  int64_t t) {
  const int rank = group_->rank(), ranks = schedule_.ranks;
  std::vector<model::Activations> activations;  // this rank's chunks', in stage order
  activations.reserve(chunks_.size());
  std::list<kernels::Tensor> inputs;
  std::vector<std::unique_ptr<Work>> sends;
  double loss = 0;
  for (int stage = rank; stage < schedule_.num_stages(); stage += ranks) {
    model::LanguageModel& model = *chunks_[stage / ranks];
    model::StageInput in;
    in.b = b;
    in.t = t;
    if (model.has_embedding()) {
      in.ids = ids;
    } else if (ranks == 1) {  // the previous stage is this rank's previous chunk
      in.hidden = activations.back().hidden_output();
    } else {
      kernels::Tensor& received = inputs.emplace_back(NewHidden(b, t));
      if (absl::Status s = RecvHidden(received, (rank + ranks - 1) % ranks, false, Tag(false, 0, stage - 1));
          !s.ok()) {
        return s;
      }
      in.hidden = received.data();
    }
    if (model.has_head()) in.targets = targets;
    activations.push_back(model.NewActivations());
    if (absl::Status s = model.ForwardStage(in, activations.back()); !s.ok()) return s;
    if (model.has_head()) {
      loss = activations.back().loss();
    } else if (ranks > 1) {
      sends.push_back(
          SendHidden(activations.back().hidden_output(), HiddenBytes(b, t), (rank + 1) % ranks, false,
                     Tag(false, 0, stage)));
    }
  }
  if (absl::Status s = WaitAll(sends); !s.ok()) return s;
  // The last stage's loss to every pipeline rank: the others add zeros, so the sum is the loss exactly.
  if (absl::Status s = group_->AllReduceSum(&loss, 1); !s.ok()) return s;
  return loss;
}

absl::Status PipelineStage::SumTiedEmbeddingGrads() {
  if (!chunks_[0]->config().tied_embeddings) return absl::OkStatus();
  const auto table = [](model::LanguageModel& model) {
    const kernels::Tensor* grad = nullptr;
    model.VisitParameters([&](const std::string& name, const model::Parameter& p) {
      if (name == "token_embeddings.weight") grad = &p.grad;
    });
    return grad;
  };
  const int rank = group_->rank(), last = schedule_.ranks - 1;
  model::LanguageModel* first_stage = rank == 0 ? chunks_.front() : nullptr;
  model::LanguageModel* last_stage = rank == last ? chunks_.back() : nullptr;
  if (first_stage != nullptr && last_stage != nullptr) {  // one rank holds both
    if (first_stage == last_stage) return absl::OkStatus();  // one slice: one table
    const kernels::Tensor* a_grad = table(*first_stage);
    const kernels::Tensor* b_grad = table(*last_stage);
    const size_t size = static_cast<size_t>(a_grad->numel());
    // On a GPU summed in host memory: a one-rank pipeline of interleaved chunks, a layout for tests.
    const kernels::Context& ctx = chunks_[0]->context();
    std::vector<float> a(size), b(size);
    kernels::CopyToHost(ctx, a.data(), a_grad->data(), size * sizeof(float));
    kernels::CopyToHost(ctx, b.data(), b_grad->data(), size * sizeof(float));
    for (size_t i = 0; i < size; ++i) a[i] += b[i];
    kernels::CopyToDevice(ctx, a_grad->data(), a.data(), size * sizeof(float));
    kernels::CopyToDevice(ctx, b_grad->data(), a.data(), size * sizeof(float));
    return absl::OkStatus();
  }
  model::LanguageModel* mine = first_stage != nullptr ? first_stage : last_stage;
  if (mine == nullptr) return absl::OkStatus();
  const kernels::Tensor& grad = *table(*mine);
  if (on_gpu()) {  // the first and last ranks' all-reduce, after the backward's kernels: a + b on both
    CallOptions options;
    options.stream = chunks_[0]->context().stream;
    return tied_->AllReduce(Buffer::F32(grad), ReduceOp::kSum, options);
  }
  const size_t size = static_cast<size_t>(grad.numel());
  float* values = static_cast<float*>(grad.data());
  const int peer = rank == 0 ? last : 0;
  const int tag = Collectives::kMaxTag;  // above every activation and gradient message
  std::vector<float> theirs(size);
  std::unique_ptr<Work> send = group_->SendAsync(Buffer::Host(values, size), peer, tag);
  if (absl::Status s = group_->Recv(Buffer::Host(theirs.data(), size), peer, tag); !s.ok()) return s;
  if (absl::Status s = send->Wait(); !s.ok()) return s;
  for (size_t i = 0; i < size; ++i) values[i] += theirs[i];  // a + b on one rank, b + a on the other: equal
  return absl::OkStatus();
}

}  // namespace lmf::distributed::pipeline
