// Learning rate across widths, as a muP transfer sweep measures it (Yang et al. 2022, "Tensor Programs V"):
// the runs outside IsoFLOP budgets at two or more widths (d_model), each width at three or more learning
// rates, give one loss-against-lr curve per width. Under muP (model.init.scheme: MUP) the best learning rate
// found at the smallest width should hold at the larger ones; under standard parametrization it moves
// (experiments/sweeps/mup_transfer.textproto and sp_transfer.textproto run both).
#ifndef LMFORGE_SCALING_REPORTING_WIDTH_TRANSFER_H_
#define LMFORGE_SCALING_REPORTING_WIDTH_TRANSFER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scaling/results.h"

namespace lmf::scaling {

struct WidthLrCurve {
  int64_t d_model = 0;
  std::vector<double> lr, loss;  // by increasing lr; the lowest loss where several runs share an lr
  double best_lr = 0, best_loss = 0;  // the grid's best run
};

// The curves, by increasing width, of the finished runs with budget_flops 0 (the loss `choice` reads).
// FailedPrecondition with the reason when fewer than 2 widths have 3 or more learning rates each.
absl::StatusOr<std::vector<WidthLrCurve>> WidthLrCurves(const ResultsTable& table, const ObservationChoice& choice);

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_REPORTING_WIDTH_TRANSFER_H_
