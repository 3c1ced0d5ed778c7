// Sorting assignments by expert with the capacity (see dispatch.h).
#include "model/layers/moe/dispatch.h"

#include <algorithm>
#include <cmath>

namespace lmf::model::moe {

int64_t ExpertCapacity(const MoeSpec& spec, int64_t n) {
  if (spec.capacity_factor <= 0) return n * spec.top_k;
  return static_cast<int64_t>(
      std::ceil(spec.capacity_factor * static_cast<double>(n * spec.top_k) / static_cast<double>(spec.n_experts)));
}

void BuildDispatch(const MoeSpec& spec, int64_t n, const int32_t* experts, const float* gates, Dispatch& dispatch) {
  const int64_t e = spec.n_experts, assignments = n * spec.top_k, capacity = ExpertCapacity(spec, n);
  // Each expert's assignments in assignment order (a counting sort), then the ones it keeps.
  std::vector<std::vector<int32_t>> chosen(static_cast<size_t>(e));
  for (int64_t a = 0; a < assignments; ++a) chosen[experts[a]].push_back(static_cast<int32_t>(a));
  dispatch.counts.assign(static_cast<size_t>(e), 0);
  dispatch.offsets.assign(static_cast<size_t>(e + 1), 0);
  dispatch.row_assignment.resize(static_cast<size_t>(assignments));
  dispatch.assignment_row.assign(static_cast<size_t>(assignments), -1);
  dispatch.dropped = 0;
  int64_t row = 0;
  for (int64_t i = 0; i < e; ++i) {
    std::vector<int32_t>& kept = chosen[i];
    if (static_cast<int64_t>(kept.size()) > capacity) {
      if (spec.drop == DropPolicy::kByScore) {
        // The highest gates (ties: the earlier assignment), back in assignment order.
        std::stable_sort(kept.begin(), kept.end(), [&](int32_t a, int32_t b) { return gates[a] > gates[b]; });
        kept.resize(static_cast<size_t>(capacity));
        std::sort(kept.begin(), kept.end());
      } else {
        kept.resize(static_cast<size_t>(capacity));
      }
    }
    dispatch.offsets[i] = row;
    dispatch.counts[i] = static_cast<int64_t>(kept.size());
    for (int32_t a : kept) {
      dispatch.row_assignment[row] = a;
      dispatch.assignment_row[a] = static_cast<int32_t>(row);
      ++row;
    }
  }
  dispatch.offsets[e] = row;
  dispatch.dropped = assignments - row;
}

}  // namespace lmf::model::moe
