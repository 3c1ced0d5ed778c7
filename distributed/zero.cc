// ZeRO-1's shard, consolidation and broadcast (see zero.h).
#include "distributed/zero.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace lmf::distributed {

std::map<std::string, int> ShardOptimizerState(const model::LanguageModel& model, int ranks,
                                               const ParameterFilter& which) {
  std::vector<std::pair<int64_t, std::string>> sizes;
  model.VisitParameters([&](const std::string& name, const model::Parameter& p) {
    if (!which || which(p)) sizes.emplace_back(p.value.numel(), name);
  });
  std::stable_sort(sizes.begin(), sizes.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<int64_t> load(static_cast<size_t>(ranks), 0);
  std::map<std::string, int> owners;
  for (const auto& [size, name] : sizes) {
    const int rank = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owners[name] = rank;
    load[rank] += size;
  }
  return owners;
}

model::AdamW::Owns OwnedBy(const std::map<std::string, int>& owners, int rank) {
  return [owners, rank](const std::string& name) {
    const auto it = owners.find(name);
    return it != owners.end() && it->second == rank;
  };
}

absl::Status ConsolidateOptimizerState(Collectives& group, const std::map<std::string, int>& owners,
                                       const model::LanguageModel& model, model::AdamW& optimizer) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> parameters;
  model.VisitParameters([&](const std::string& name, const model::Parameter& p) {
    if (owners.count(name) == 0) return;
    std::vector<int64_t> shape;
    for (int i = 0; i < p.value.rank(); ++i) shape.push_back(p.value.dim(i));
    parameters.emplace_back(name, shape);
  });
  int tag = 0;
  for (const auto& [name, shape] : parameters) {
    const int owner = owners.at(name);
    if (owner == 0) continue;
    std::vector<float> m, v;
    if (group.rank() == owner) {
      if (!optimizer.ReadState(name, &m, &v)) {
        return absl::InternalError(absl::StrCat("ZeRO-1: rank ", owner, " owns ", name, " but holds no state"));
      }
      for (std::vector<float>* t : {&m, &v}) {
        if (absl::Status s = group.Send(Buffer::Host(t->data(), t->size()), 0, tag); !s.ok()) return s;
      }
    } else if (group.rank() == 0) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      m.resize(static_cast<size_t>(n));
      v.resize(static_cast<size_t>(n));
      for (std::vector<float>* t : {&m, &v}) {
        if (absl::Status s = group.Recv(Buffer::Host(t->data(), t->size()), owner, tag); !s.ok()) return s;
      }
      optimizer.AdoptState(name, shape, m, v);
    }
    tag = (tag + 1) % (Collectives::kMaxTag + 1);
  }
  return absl::OkStatus();
}

absl::Status BroadcastFromOwners(Collectives& group, const std::map<std::string, int>& owners,
                                 model::LanguageModel& model) {
  std::vector<Buffer> values;
  std::vector<int> roots;
  model.VisitParameters([&](const std::string& name, const model::Parameter& p) {
    if (owners.count(name) == 0) return;
    values.push_back(Buffer::F32(p.value));
    roots.push_back(owners.at(name));
  });
  CallOptions on_stream;  // a GPU model's: after the update's kernels
  on_stream.stream = model.context().stream;
  absl::Status status = group.BroadcastManyAsync(values, roots, on_stream)->Wait();
  if (status.ok()) model.RefreshComputeWeights();
  return status;
}

}  // namespace lmf::distributed
