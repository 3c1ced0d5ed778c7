// The data-parallel step strategy (see data_parallel_step.h).
#include "distributed/data_parallel_step.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <cmath>
#include <csignal>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distributed/zero.h"
#include "kernels/grad_norm/grad_norm.h"
#include "kernels/memory/memory.h"

namespace lmf::distributed {
namespace {

// FNV-1a over the bytes of the weights that are expert blocks (or not), split into two 32-bit halves that a
// double all-reduce carries exactly.
// A GPU model's weights are copied to the host first.
uint64_t WeightsHash(const model::LanguageModel& model, bool expert_shard) {
  uint64_t h = 1469598103934665603ull;
  std::vector<unsigned char> host;
  model.VisitParameters([&](const std::string&, const model::Parameter& p) {
    if (p.expert_shard != expert_shard) return;
    const auto* bytes = static_cast<const unsigned char*>(p.value.data());
    if (p.value.device().is_cuda()) {
      host.resize(p.value.nbytes());
      kernels::CopyToHost(model.context(), host.data(), p.value.data(), p.value.nbytes());
      bytes = host.data();
    }
    for (size_t i = 0; i < p.value.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  });
  return h;
}

// A device op queued on the model's stream, after the kernels that wrote its tensor.
CallOptions OnModelStream(const model::LanguageModel& model) {
  CallOptions options;
  options.stream = model.context().stream;
  return options;
}

}  // namespace

absl::Status DataParallelStep::SyncParameters(model::LanguageModel& model) {
  absl::Status status = absl::OkStatus();
  std::vector<std::unique_ptr<Work>> broadcasts;  // device_group_'s
  model.VisitParameters([&](const std::string&, const model::Parameter& p) {
    if (device_group_ != nullptr) {
      broadcasts.push_back(
          DeviceSumGroup(p.expert_shard).BroadcastAsync(Buffer::F32(p.value), 0, OnModelStream(model)));
    } else if (status.ok()) {
      status = SumGroup(p.expert_shard).Broadcast(p.value.data<float>(), static_cast<size_t>(p.value.numel()), 0);
    }
  });
  if (device_group_ == nullptr) return status;
  if (absl::Status s = WaitAll(broadcasts); !s.ok()) return s;
  model.RefreshComputeWeights();  // a bf16 run's copies of the broadcast weights
  return absl::OkStatus();
}

absl::Status DataParallelStep::SumOnDevice(const model::LanguageModel& model) {
  std::vector<Buffer> grads[2];  // the dense parameters', the expert blocks'
  model.VisitParameters([&](const std::string&, const model::Parameter& p) {
    grads[p.expert_shard ? 1 : 0].push_back(Buffer::F32(p.grad));
  });
  std::vector<std::unique_ptr<Work>> sums;
  for (const bool expert_shard : {false, true}) {
    if (grads[expert_shard].empty()) continue;
    sums.push_back(DeviceSumGroup(expert_shard)
                       .AllReduceManyAsync(grads[expert_shard], ReduceOp::kSum, OnModelStream(model)));
  }
  return WaitAll(sums);
}

namespace {

// One part's gradients (its expert blocks', or the others') on their way through an all-reduce.
struct Bucket {
  model::LanguageModel::ModelPart part;
  bool expert_shard = false;
  std::vector<float> data;
  std::unique_ptr<Work> sum;
};

void PackPart(const model::LanguageModel& model, const model::LanguageModel::ModelPart& part, bool expert_shard,
              std::vector<float>* out) {
  model.VisitPartParameters(part, [&](const std::string&, const model::Parameter& p) {
    if (p.expert_shard != expert_shard) return;
    out->insert(out->end(), p.grad.data<float>(), p.grad.data<float>() + p.grad.numel());
  });
}

void UnpackPart(model::LanguageModel& model, const model::LanguageModel::ModelPart& part, bool expert_shard,
                const float* in) {
  model.VisitPartParameters(part, [&](const std::string&, const model::Parameter& p) {
    if (p.expert_shard != expert_shard) return;
    std::copy_n(in, p.grad.numel(), p.grad.data<float>());
    in += p.grad.numel();
  });
}

}  // namespace

absl::Status DataParallelStep::SumGradients(model::LanguageModel& model, model::MicroBatchSource& data,
                                            const model::StepInput& input, model::LossSums* sums) {
  const int64_t count = micro_batch_count(input.micro_batches);
  std::vector<Bucket> buckets;
  std::vector<std::unique_ptr<Work>> device_sums;  // a GPU model's, overlapped
  const bool device_overlap = DeviceOverlap();
  int64_t backwards = 0;  // finished during AccumulateGradients, which the hook below outlives
  if (overlap_ && (device_group_ == nullptr || device_overlap)) {
    model.SetBackwardProgress([&](const model::LanguageModel::ModelPart& part) {
      if (backwards == count - 1 && device_overlap) {  // each gradient in place, on the group's stream
        CallOptions after_part;
        after_part.after = model.context().stream;  // the kernels queued so far, this part's included
        std::vector<Buffer> grads;
        model.VisitPartParameters(part, [&](const std::string&, const model::Parameter& p) {
          grads.push_back(Buffer::F32(p.grad));
        });
        device_sums.push_back(device_group_->AllReduceManyAsync(grads, ReduceOp::kSum, after_part));
      } else if (backwards == count - 1) {  // the last backward: this part's gradients are the step's
        for (const bool expert_shard : {false, true}) {
          if (expert_shard && !expert_parallel()) break;
          Bucket& bucket = buckets.emplace_back();
          bucket.part = part;
          bucket.expert_shard = expert_shard;
          PackPart(model, part, expert_shard, &bucket.data);
          bucket.sum = SumGroup(expert_shard).AllReduceAsync(Buffer::Host(bucket.data.data(), bucket.data.size()),
                                                             ReduceOp::kSum);
        }
      }
      if (part.kind == model::LanguageModel::ModelPart::kEmbedding) ++backwards;
    });
  }
  absl::StatusOr<model::LossSums> accumulated =
      model::AccumulateGradients(model, data, input, first_micro_batch(input.micro_batches), count);
  model.SetBackwardProgress(nullptr);
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = accumulated.ok() ? absl::OkStatus() : accumulated.status();
  if (status.ok() && ep_.exchange != nullptr) status = ep_.exchange->status();
  for (Bucket& bucket : buckets) {  // waited for even after an error: they read the buckets' memory
    absl::Status s = bucket.sum->Wait();
    if (status.ok()) status = s;
    if (s.ok()) UnpackPart(model, bucket.part, bucket.expert_shard, bucket.data.data());
  }
  if (absl::Status s = WaitAll(device_sums); status.ok()) status = s;  // each within its timeout
  if (status.ok() && device_group_ != nullptr && !device_overlap) status = SumOnDevice(model);
  for (const bool expert_shard : {false, true}) {
    if (!status.ok() || overlap_ || device_group_ != nullptr || (expert_shard && !expert_parallel())) break;
    std::vector<float>& gradients = gradients_[expert_shard ? 1 : 0];
    gradients.clear();
    model.VisitParameters([&](const std::string&, const model::Parameter& p) {
      if (p.expert_shard != expert_shard) return;
      gradients.insert(gradients.end(), p.grad.data<float>(), p.grad.data<float>() + p.grad.numel());
    });
    status = SumGroup(expert_shard).AllReduceSum(gradients.data(), gradients.size());
    size_t offset = 0;
    model.VisitParameters([&](const std::string&, const model::Parameter& p) {
      if (p.expert_shard != expert_shard) return;
      std::copy_n(gradients.data() + offset, p.grad.numel(), p.grad.data<float>());
      offset += static_cast<size_t>(p.grad.numel());
    });
  }
  exposed_reduce_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (status.ok()) *sums = *accumulated;
  if (expert_parallel()) sums->first_grad_sq = NAN;  // expert gradients held other ranks' tokens
  return status;
}

absl::StatusOr<double> DataParallelStep::SummedNorm(const model::LanguageModel& model) {
  double squares[2] = {0, 0};  // dense (the same on every rank), this rank's expert blocks
  if (model.context().device.is_cuda()) {  // a GPU model's: each part's norm on the device, not copied out
    std::vector<kernels::GradSpan> spans[2];
    model.VisitParameters([&](const std::string&, const model::Parameter& p) {
      spans[p.expert_shard ? 1 : 0].push_back(kernels::GradSpan{p.grad.data(), p.grad.numel()});
    });
    for (int part = 0; part < 2; ++part) {
      if (spans[part].empty()) continue;
      const double norm = kernels::GlobalGradNorm(
          model.context(),
          kernels::GradNormParams{kernels::DType::kF32, spans[part].data(), static_cast<int64_t>(spans[part].size())});
      squares[part] = norm * norm;
    }
  } else {
    model.VisitParameters([&](const std::string&, const model::Parameter& p) {
      const float* g = p.grad.data<float>();
      double& sum = squares[p.expert_shard ? 1 : 0];
      for (int64_t i = 0; i < p.grad.numel(); ++i) sum += static_cast<double>(g[i]) * g[i];
    });
  }
  if (absl::Status s = ep_.experts->AllReduceSum(&squares[1], 1); !s.ok()) return s;
  return std::sqrt(squares[0] + squares[1]);
}

absl::Status DataParallelStep::SumStepCounts(const model::LanguageModel& model) {
  absl::Status status = absl::OkStatus();
  model.VisitStepCounts([&](const std::string&, const kernels::Tensor& counts) {
    if (!status.ok()) return;
    if (counts.device().is_cuda()) {  // a GPU model's
      status = device_group_ != nullptr
                   ? device_group_->AllReduce(Buffer::F32(counts), ReduceOp::kSum, OnModelStream(model))
                   : absl::FailedPreconditionError("data parallel: step counts on a GPU need a device group");
    } else {
      status = group_.AllReduceSum(counts.data<float>(), static_cast<size_t>(counts.numel()));
    }
  });
  return status;
}

absl::StatusOr<model::StepResult> DataParallelStep::Step(model::LanguageModel& model, model::AdamW& optimizer,
                                                         model::MicroBatchSource& data,
                                                         const model::StepInput& input) {
  model::LossSums summed;
  if (absl::Status s = SumGradients(model, data, input, &summed); !s.ok()) return s;
  // The counts for the once-per-step state updates (a mixture of experts' expert loads), likewise.
  if (absl::Status s = SumStepCounts(model); !s.ok()) return s;
  const int received = input.received_signal ? input.received_signal() : 0;
  // The first micro-batch's |g|^2 for the noise scale: each rank's is a sample; their mean (NaN stays NaN).
  double totals[5] = {summed.loss, summed.z_loss, summed.aux_loss, static_cast<double>(received),
                      summed.first_grad_sq};
  if (absl::Status s = group_.AllReduceSum(totals, 5); !s.ok()) return s;
  const int stop = totals[3] > 0 ? (received != 0 ? received : SIGTERM) : 0;
  std::optional<double> summed_norm;
  if (expert_parallel()) {
    absl::StatusOr<double> norm = SummedNorm(model);
    if (!norm.ok()) return norm.status();
    summed_norm = *norm;
  }
  model::StepResult result =
      model::FinishStep(model, optimizer, input,
                        model::LossSums{totals[0], totals[1], totals[2], totals[4] / world_size()}, stop, summed_norm);
  if (!owners_.empty() && std::isfinite(result.grad_norm)) {  // an update happened: on each owner only
    // A GPU model's weights over the device groups.
    Collectives& dense = device_group_ != nullptr ? *device_group_ : group_;
    if (absl::Status s = BroadcastFromOwners(dense, owners_, model); !s.ok()) return s;
    if (!expert_owners_.empty()) {
      Collectives& replicas = device_group_ != nullptr ? *ep_.device_replicas : *ep_.replicas;
      if (absl::Status s = BroadcastFromOwners(replicas, expert_owners_, model); !s.ok()) return s;
    }
  }
  return result;
}

absl::Status DataParallelStep::SumOverProcesses(std::vector<double>& values) {
  return group_.AllReduceSum(values.data(), values.size());
}

namespace {

// Rank r of a group of data x `expert` ranks (mesh.h's layout: expert fastest) by its axes, "data 1, expert 0:
// rank 2 (world rank 6)"; of a group of data ranks only (expert 1), "data rank 1 (world rank 3)".
std::string ReplicaName(const Collectives& group, int r, int expert) {
  if (expert == 1) return absl::StrCat("data ", group.PeerName(r));
  return absl::StrCat("data ", r / expert, ", expert ", r % expert, ": ", group.PeerName(r));
}

// `hash` compared over `group`, data x `expert` ranks that should hold equal `part` (expert 1: data ranks
// only): an error naming the first rank whose differs from rank 0's by its axes and ranks.
absl::Status CompareOverGroup(Collectives& group, int expert, uint64_t hash, const std::string& part,
                              int64_t step) {
  const std::string what = absl::StrCat(part, " over run.parallel.data=", group.world_size() / expert,
                                        expert == 1 ? "" : absl::StrCat(" x run.parallel.expert=", expert));
  const int world = group.world_size();
  std::vector<double> halves(2 * static_cast<size_t>(world), 0.0);
  halves[2 * group.rank()] = static_cast<double>(hash >> 32);
  halves[2 * group.rank() + 1] = static_cast<double>(hash & 0xffffffffu);
  if (absl::Status s = group.AllReduceSum(halves.data(), halves.size()); !s.ok()) return s;
  for (int r = 1; r < world; ++r) {
    if (halves[2 * r] != halves[0] || halves[2 * r + 1] != halves[1]) {
      return absl::InternalError(absl::StrCat(
          what, ": after step ", step, " those of ", ReplicaName(group, r, expert), " in group '", group.name(),
          "' differ from those of ", ReplicaName(group, 0, expert), " (FNV-1a ",
          static_cast<uint64_t>(halves[2 * r]) << 32 | static_cast<uint64_t>(halves[2 * r + 1]), " vs ",
          static_cast<uint64_t>(halves[0]) << 32 | static_cast<uint64_t>(halves[1]),
          "); the ranks must run equal thread counts"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DataParallelStep::CheckReplicasAgree(const model::LanguageModel& model, int64_t step) {
  const int expert = expert_parallel() ? ep_.experts->world_size() : 1;
  const std::string dense = expert_parallel() ? "weights outside the expert blocks" : "weights";
  if (absl::Status s = CompareOverGroup(group_, expert, WeightsHash(model, /*expert_shard=*/false), dense, step);
      !s.ok() || !expert_parallel()) {
    return s;
  }
  return CompareOverGroup(*ep_.replicas, 1, WeightsHash(model, /*expert_shard=*/true), "expert blocks", step);
}

}  // namespace lmf::distributed
