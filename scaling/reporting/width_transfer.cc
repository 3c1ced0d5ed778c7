// Loss-against-lr curves per width (see width_transfer.h).
#include "scaling/reporting/width_transfer.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace lmf::scaling {

absl::StatusOr<std::vector<WidthLrCurve>> WidthLrCurves(const ResultsTable& table, const ObservationChoice& choice) {
  if (!table.Has("d_model") || !table.Has("lr")) {
    return absl::FailedPreconditionError("the table has no d_model and lr columns");
  }
  std::map<int64_t, std::map<double, double>> loss_at;  // width -> lr -> lowest loss
  for (const RunResult& r : table.runs) {
    if (r.status != RunStatus::kFinished || r.budget_flops > 0 || r.d_model <= 0 || !(r.lr > 0)) continue;
    const double loss = choice.best_loss ? r.best_val_loss : r.final_loss;
    auto [it, fresh] = loss_at[r.d_model].insert({r.lr, loss});
    if (!fresh && loss < it->second) it->second = loss;
  }
  std::vector<WidthLrCurve> curves;
  for (const auto& [width, by_lr] : loss_at) {
    if (by_lr.size() < 3) continue;
    WidthLrCurve c;
    c.d_model = width;
    c.best_loss = INFINITY;
    for (const auto& [lr, loss] : by_lr) {
      c.lr.push_back(lr);
      c.loss.push_back(loss);
      if (loss < c.best_loss) c.best_loss = loss, c.best_lr = lr;
    }
    curves.push_back(std::move(c));
  }
  if (curves.size() < 2) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no 2 widths (d_model) each have runs outside IsoFLOP budgets at 3 or more learning rates (", curves.size(),
        " has)"));
  }
  return curves;
}

}  // namespace lmf::scaling
