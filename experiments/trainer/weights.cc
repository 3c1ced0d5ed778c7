// Named parameter transfer and validation loss (see weights.h).
#include "experiments/trainer/weights.h"

#include <cstring>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lmf::experiments {

std::vector<NamedTensor> ModelTensors(const model::LanguageModel& model) {
  std::vector<NamedTensor> tensors;
  model.VisitParameters([&](const std::string& name, const model::Parameter& p) {
    NamedTensor t;
    t.name = name;
    for (int i = 0; i < p.value.rank(); ++i) t.shape.push_back(p.value.dim(i));
    t.data = p.data();
    tensors.push_back(std::move(t));
  });
  return tensors;
}

absl::Status LoadWeights(const SafetensorsReader& weights, model::LanguageModel& model) {
  absl::Status status;
  std::set<std::string> used;
  model.VisitParameters([&](const std::string& name, const model::Parameter& p) {
    if (!status.ok()) return;
    std::vector<int64_t> shape;
    for (int i = 0; i < p.value.rank(); ++i) shape.push_back(p.value.dim(i));
    absl::StatusOr<std::vector<float>> values = weights.ReadFloat(name, shape);
    if (!values.ok()) {
      status = values.status();
      return;
    }
    std::memcpy(p.data(), values->data(), values->size() * sizeof(float));
    used.insert(name);
  });
  if (!status.ok()) return status;
  std::vector<std::string> extra;
  for (const auto& [name, tensor] : weights.tensors()) {
    if (used.count(name) == 0) extra.push_back(name);
  }
  if (!extra.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(weights.source(), ": tensors the model does not have: ",
                                                   absl::StrJoin(extra, ", ")));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> ValidationLoss(model::LanguageModel& model, const ValidationBatches& batches,
                                      int64_t batch_size, int64_t context_length) {
  std::vector<int32_t> x(batch_size * context_length), y(batch_size * context_length);
  double sum = 0;
  for (int64_t i = 0; i < batches.num_batches(); ++i) {
    if (absl::Status s = batches.Get(i, x.data(), y.data()); !s.ok()) return s;
    absl::StatusOr<double> loss = model.ForwardWithLoss(x.data(), y.data(), batch_size, context_length);
    if (!loss.ok()) return loss.status();
    sum += *loss;
  }
  return sum / static_cast<double>(batches.num_batches());
}

}  // namespace lmf::experiments
