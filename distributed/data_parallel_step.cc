// The data-parallel step strategy (see data_parallel_step.h).
#include "distributed/data_parallel_step.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <cmath>
#include <csignal>
#include <utility>

#include "absl/strings/str_cat.h"
#include "distributed/zero.h"

namespace lmf::distributed {
namespace {

// FNV-1a over the weights' bytes, split into two 32-bit halves that a double all-reduce carries exactly.
uint64_t WeightsHash(const model::LanguageModel& model) {
  uint64_t h = 1469598103934665603ull;
  model.VisitParameters([&](const std::string&, const model::Parameter& p) {
    const auto* bytes = static_cast<const unsigned char*>(p.value.data());
    for (size_t i = 0; i < p.value.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  });
  return h;
}

}  // namespace

absl::Status DataParallelStep::SyncParameters(model::LanguageModel& model) {
  absl::Status status = absl::OkStatus();
  model.VisitParameters([&](const std::string&, const model::Parameter& p) {
    if (status.ok()) status = group_.Broadcast(p.value.data<float>(), static_cast<size_t>(p.value.numel()), 0);
  });
  return status;
}

namespace {

// One part's gradients on their way through an all-reduce.
struct Bucket {
  model::LanguageModel::ModelPart part;
  std::vector<float> data;
  std::unique_ptr<Work> sum;
};

void PackPart(const model::LanguageModel& model, const model::LanguageModel::ModelPart& part, std::vector<float>* out) {
  model.VisitPartParameters(part, [&](const std::string&, const model::Parameter& p) {
    out->insert(out->end(), p.grad.data<float>(), p.grad.data<float>() + p.grad.numel());
  });
}

void UnpackPart(model::LanguageModel& model, const model::LanguageModel::ModelPart& part, const float* in) {
  model.VisitPartParameters(part, [&](const std::string&, const model::Parameter& p) {
    std::copy_n(in, p.grad.numel(), p.grad.data<float>());
    in += p.grad.numel();
  });
}

}  // namespace

absl::Status DataParallelStep::SumGradients(model::LanguageModel& model, model::MicroBatchSource& data,
                                            const model::StepInput& input, model::LossSums* sums) {
  const int64_t count = micro_batch_count(input.micro_batches);
  std::vector<Bucket> buckets;
  int64_t backwards = 0;  // finished during AccumulateGradients, which the hook below outlives
  if (overlap_) {
    model.SetBackwardProgress([&](const model::LanguageModel::ModelPart& part) {
      if (backwards == count - 1) {  // the last backward: this part's gradients are the step's
        Bucket& bucket = buckets.emplace_back();
        bucket.part = part;
        PackPart(model, part, &bucket.data);
        bucket.sum = group_.AllReduceAsync(Buffer::Host(bucket.data.data(), bucket.data.size()), ReduceOp::kSum);
      }
      if (part.kind == model::LanguageModel::ModelPart::kEmbedding) ++backwards;
    });
  }
  absl::StatusOr<model::LossSums> accumulated =
      model::AccumulateGradients(model, data, input, first_micro_batch(input.micro_batches), count);
  model.SetBackwardProgress(nullptr);
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = accumulated.ok() ? absl::OkStatus() : accumulated.status();
  for (Bucket& bucket : buckets) {  // waited for even after an error: they read the buckets' memory
    absl::Status s = bucket.sum->Wait();
    if (status.ok()) status = s;
    if (s.ok()) UnpackPart(model, bucket.part, bucket.data.data());
  }
  if (status.ok() && !overlap_) {
    gradients_.clear();
    model.VisitParameters([&](const std::string&, const model::Parameter& p) {
      gradients_.insert(gradients_.end(), p.grad.data<float>(), p.grad.data<float>() + p.grad.numel());
    });
    status = group_.AllReduceSum(gradients_.data(), gradients_.size());
    size_t offset = 0;
    model.VisitParameters([&](const std::string&, const model::Parameter& p) {
      std::copy_n(gradients_.data() + offset, p.grad.numel(), p.grad.data<float>());
      offset += static_cast<size_t>(p.grad.numel());
    });
  }
  exposed_reduce_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (status.ok()) *sums = *accumulated;
  return status;
}

absl::StatusOr<model::StepResult> DataParallelStep::Step(model::LanguageModel& model, model::AdamW& optimizer,
                                                         model::MicroBatchSource& data,
                                                         const model::StepInput& input) {
  model::LossSums summed;
  if (absl::Status s = SumGradients(model, data, input, &summed); !s.ok()) return s;
  // The counts for the once-per-step state updates (a mixture of experts' expert loads), likewise.
  absl::Status counts_status = absl::OkStatus();
  model.VisitStepCounts([&](const std::string&, const kernels::Tensor& counts) {
    if (counts_status.ok()) {
      counts_status = group_.AllReduceSum(counts.data<float>(), static_cast<size_t>(counts.numel()));
    }
  });
  if (!counts_status.ok()) return counts_status;
  const int received = input.received_signal ? input.received_signal() : 0;
  // The first micro-batch's |g|^2 for the noise scale: each rank's is a sample; their mean (NaN stays NaN).
  double totals[5] = {summed.loss, summed.z_loss, summed.aux_loss, static_cast<double>(received),
                      summed.first_grad_sq};
  if (absl::Status s = group_.AllReduceSum(totals, 5); !s.ok()) return s;
  const int stop = totals[3] > 0 ? (received != 0 ? received : SIGTERM) : 0;
  model::StepResult result = model::FinishStep(
      model, optimizer, input, model::LossSums{totals[0], totals[1], totals[2], totals[4] / world_size()}, stop);
  if (!owners_.empty() && std::isfinite(result.grad_norm)) {  // an update happened: on each owner only
    if (absl::Status s = BroadcastFromOwners(group_, owners_, model); !s.ok()) return s;
  }
  return result;
}

absl::Status DataParallelStep::SumOverProcesses(std::vector<double>& values) {
  return group_.AllReduceSum(values.data(), values.size());
}

absl::Status DataParallelStep::CheckReplicasAgree(const model::LanguageModel& model, int64_t step) {
  const int world = world_size();
  std::vector<double> halves(2 * static_cast<size_t>(world), 0.0);
  const uint64_t hash = WeightsHash(model);
  halves[2 * rank()] = static_cast<double>(hash >> 32);
  halves[2 * rank() + 1] = static_cast<double>(hash & 0xffffffffu);
  if (absl::Status s = group_.AllReduceSum(halves.data(), halves.size()); !s.ok()) return s;
  for (int r = 1; r < world; ++r) {
    if (halves[2 * r] != halves[0] || halves[2 * r + 1] != halves[1]) {
      return absl::InternalError(absl::StrCat(
          "run.parallel.data=", world, ": after step ", step, " rank ", r,
          "'s weights differ from rank 0's (FNV-1a ", static_cast<uint64_t>(halves[2 * r]) << 32 |
                                                          static_cast<uint64_t>(halves[2 * r + 1]),
          " vs ", static_cast<uint64_t>(halves[0]) << 32 | static_cast<uint64_t>(halves[1]),
          "); the ranks must run equal thread counts"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lmf::distributed
