// Named parameter transfer and validation loss (see weights.h).
#include "experiments/trainer/weights.h"

#include <cmath>
#include <functional>
#include <regex>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/memory/memory.h"

namespace lmf::experiments {

void HostTensors::AddFromDevice(const kernels::Context& ctx, const std::string& name,
                                const std::vector<int64_t>& shape, const float* data) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float>& host = storage.emplace_back(n);
  kernels::CopyToHost(ctx, host.data(), data, static_cast<size_t>(n) * sizeof(float));
  tensors.push_back({name, shape, host.data()});
}

namespace {

std::vector<int64_t> ShapeOf(const kernels::Tensor& t) {
  std::vector<int64_t> shape;
  for (int i = 0; i < t.rank(); ++i) shape.push_back(t.dim(i));
  return shape;
}

// Reads tensor `name` of `t`'s shape from `weights` into `t` (fp32 on the model's device); a non-finite
// value is an error naming the file, the tensor and the element.
absl::Status LoadTensor(const SafetensorsReader& weights, const kernels::Context& ctx, const std::string& name,
                        const kernels::Tensor& t) {
  absl::StatusOr<std::vector<float>> values = weights.ReadFloat(name, ShapeOf(t));
  if (!values.ok()) return values.status();
  // A NaN or infinite weight computes nothing meaningful, yet some paths hide it (a softmax over a NaN
  // key's scores can still sum to finite logits): refuse it here, where the file is named.
  for (size_t i = 0; i < values->size(); ++i) {
    if (!std::isfinite((*values)[i])) {
      return absl::DataLossError(absl::StrCat(weights.source(), ": tensor ", name, " holds ", (*values)[i],
                                              " at element ", i, "; weights must be finite"));
    }
  }
  kernels::CopyToDevice(ctx, t.data(), values->data(), values->size() * sizeof(float));
  return absl::OkStatus();
}

}  // namespace

HostTensors ModelTensors(const model::LanguageModel& model) {
  HostTensors out;
  model.VisitParameters([&](const std::string& name, const model::Parameter& p) {
    out.AddFromDevice(model.context(), name, ShapeOf(p.value), p.data());
  });
  model.VisitBuffers([&](const std::string& name, const kernels::Tensor& t) {
    out.AddFromDevice(model.context(), name, ShapeOf(t), t.data<float>());
  });
  return out;
}

namespace {

// Loads every tensor of `model` from `weights`; a tensor of the file the model does not have is an error
// unless `elsewhere` says another slice of the whole model holds it.
absl::Status LoadNamed(const SafetensorsReader& weights, model::LanguageModel& model,
                       const std::function<bool(const std::string&)>& elsewhere) {
  absl::Status status;
  std::set<std::string> used;
  const auto load = [&](const std::string& name, const kernels::Tensor& t) {
    if (!status.ok()) return;
    status = LoadTensor(weights, model.context(), name, t);
    used.insert(name);
  };
  model.VisitParameters([&](const std::string& name, const model::Parameter& p) { load(name, p.value); });
  model.VisitBuffers(load);
  if (!status.ok()) return status;
  model.RefreshComputeWeights();
  std::vector<std::string> extra;
  for (const auto& [name, tensor] : weights.tensors()) {
    if (used.count(name) == 0 && !(elsewhere && elsewhere(name))) extra.push_back(name);
  }
  if (!extra.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(weights.source(), ": tensors the model does not have: ",
                                                   absl::StrJoin(extra, ", ")));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// Whether `model` holds a block of its experts (expert parallelism): it takes its own from a checkpoint of
// all, the file's other expert blocks held elsewhere.
bool HoldsExpertBlock(const model::LanguageModel& model) {
  bool expert_blocks = false;
  model.VisitParameters([&](const std::string&, const model::Parameter& p) { expert_blocks |= p.expert_shard; });
  return expert_blocks;
}

bool IsExpertBlock(const std::string& name) {
  static const std::regex expert(R"(^layers\.\d+\.ffn\.experts\.\d+\..+$)");
  return std::regex_match(name, expert);
}

}  // namespace

absl::Status LoadWeights(const SafetensorsReader& weights, model::LanguageModel& model) {
  if (!HoldsExpertBlock(model)) return LoadNamed(weights, model, nullptr);
  return LoadNamed(weights, model, IsExpertBlock);
}

absl::Status LoadSliceWeights(const SafetensorsReader& weights, model::LanguageModel& slice) {
  const std::regex layer(R"(^layers\.(\d+)\..+$)");
  const bool expert_blocks = HoldsExpertBlock(slice);  // pipeline x expert: the stage's other ranks' experts
  return LoadNamed(weights, slice, [&](const std::string& name) {
    if (expert_blocks && IsExpertBlock(name)) return true;
    std::smatch m;
    if (std::regex_match(name, m, layer)) {
      const int64_t i = std::stoll(m[1].str());
      return i < slice.config().n_layers && (i < slice.first_layer() || i >= slice.last_layer());
    }
    const auto starts = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
    if (!slice.has_embedding() && (starts("token_embeddings.") || starts("position_embeddings.")))
      return true;
    return !slice.has_head() && (starts("ln_final.") || starts("lm_head."));
  });
}

absl::Status LoadUpcycledWeights(const SafetensorsReader& dense, model::LanguageModel& moe) {
  absl::Status status;
  std::set<std::string> used;
  const std::regex expert(R"(^(layers\.\d+\.ffn)\.experts\.\d+(\..+)$)");
  moe.VisitParameters([&](const std::string& name, const model::Parameter& p) {
    if (!status.ok()) return;
    std::smatch m;
    std::string from = name;
    if (std::regex_match(name, m, expert)) {
      from = m[1].str() + m[2].str();
    } else if (dense.tensors().count(name) == 0) {
      return;  // the router or the shared experts: the MoE's own initial values
    }
    if (dense.tensors().count(from) == 0) {
      status = absl::InvalidArgumentError(
          absl::StrCat(dense.source(), ": no tensor ", from, " to upcycle into ", name));
      return;
    }
    status = LoadTensor(dense, moe.context(), from, p.value);
    used.insert(from);
  });
  if (!status.ok()) return status;
  moe.RefreshComputeWeights();
  std::vector<std::string> extra;
  for (const auto& [name, tensor] : dense.tensors()) {
    if (used.count(name) == 0) extra.push_back(name);
  }
  if (!extra.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(dense.source(), ": tensors the upcycled model has no place for: ",
                                                   absl::StrJoin(extra, ", ")));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> ValidationBatchLosses(const BatchLoss& loss,
                                                          const ValidationBatches& batches,
                                                          int64_t batch_size, int64_t context_length,
                                                          int64_t first, int64_t stride) {
  std::vector<int32_t> x(batch_size * context_length), y(batch_size * context_length);
  std::vector<double> losses(static_cast<size_t>(batches.num_batches()), 0.0);
  for (int64_t i = first; i < batches.num_batches(); i += stride) {
    if (absl::Status s = batches.Get(i, x.data(), y.data()); !s.ok()) return s;
    absl::StatusOr<double> value = loss(x.data(), y.data());
    if (!value.ok()) return value.status();
    losses[static_cast<size_t>(i)] = *value;
  }
  return losses;
}

absl::StatusOr<std::vector<double>> ValidationBatchLosses(model::LanguageModel& model,
                                                          const ValidationBatches& batches,
                                                          int64_t batch_size, int64_t context_length,
                                                          int64_t first, int64_t stride) {
  const BatchLoss whole_model = [&](const int32_t* ids, const int32_t* targets) {
    return model.ForwardWithLoss(ids, targets, batch_size, context_length);
  };
  return ValidationBatchLosses(whole_model, batches, batch_size, context_length, first, stride);
}

double MeanInOrder(const std::vector<double>& losses) {
  double sum = 0;
  for (const double loss : losses) sum += loss;
  return sum / static_cast<double>(losses.size());
}

absl::StatusOr<double> ValidationLoss(model::LanguageModel& model, const ValidationBatches& batches,
                                      int64_t batch_size, int64_t context_length) {
  absl::StatusOr<std::vector<double>> losses =
      ValidationBatchLosses(model, batches, batch_size, context_length, /*first=*/0, /*stride=*/1);
  if (!losses.ok()) return losses.status();
  return MeanInOrder(*losses);
}

}  // namespace lmf::experiments
