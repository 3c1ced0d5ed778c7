// The dispatcher of a mixture of experts: sorts a micro-batch's N * k assignments (token, choice j) by
// expert into contiguous row blocks, one per expert, applying the capacity (MoeSpec::capacity_factor and
// drop), so that each expert's rows run as one GEMM (experts.h). The rows move with kernels/moe_rows (gather
// into these rows, the gate-weighted combine back, their backwards) on every device. The counts per expert
// are explicit (Dispatch::counts), as an expert-parallel all-to-all exchanges them first.
//
// Rows are numbered in expert order, within an expert in assignment order a = token * k + j.
#ifndef LMFORGE_MODEL_LAYERS_MOE_DISPATCH_H_
#define LMFORGE_MODEL_LAYERS_MOE_DISPATCH_H_

#include <cstdint>
#include <vector>

#include "model/config/config.h"

namespace lmf::model::moe {

struct Dispatch {
  std::vector<int64_t> counts;          // (E) rows of each expert
  std::vector<int64_t> offsets;         // (E + 1) first row of each expert; offsets[E] = M rows in all
  std::vector<int32_t> row_assignment;  // (M, sized N * k) the assignment a each row computes
  std::vector<int32_t> assignment_row;  // (N * k) the row of assignment a, -1 where it was dropped
  int64_t dropped = 0;                  // assignments over capacity
  int64_t rows() const { return offsets.empty() ? 0 : offsets.back(); }
};

// The rows an expert may take of a micro-batch of n tokens: ceil(capacity_factor * n * k / E), or every
// assignment (n * k) when dropless (capacity_factor 0).
int64_t ExpertCapacity(const MoeSpec& spec, int64_t n);

// experts (N, k), gates (N, k) of Route -> `dispatch` (its vectors resized).
void BuildDispatch(const MoeSpec& spec, int64_t n, const int32_t* experts, const float* gates, Dispatch& dispatch);

}  // namespace lmf::model::moe

#endif  // LMFORGE_MODEL_LAYERS_MOE_DISPATCH_H_
