// The report's figures, drawn with scaling/plot from a ScalingAnalysis: IsoFLOP profiles with their
// parabolas and minima, N_opt(C) and D_opt(C) with bootstrap bands, loss against compute with the
// frontier, the Approach 3 residuals, the gradient noise scale against loss, and loss against lr per width. Each returns SVG text, or
// "" when its fit is missing.
#ifndef LMFORGE_SCALING_REPORTING_FIGURES_H_
#define LMFORGE_SCALING_REPORTING_FIGURES_H_

#include <string>

#include "scaling/reporting/analysis.h"

namespace lmf::scaling {

std::string IsoFlopFigure(const ScalingAnalysis& a);
// which: 0 = N_opt(C), 1 = D_opt(C).
std::string OptimalAllocationFigure(const ScalingAnalysis& a, int which);
std::string LossVsComputeFigure(const ScalingAnalysis& a);
std::string ResidualFigure(const ScalingAnalysis& a);
// B_simple against the loss, one line per run that logged it, with each budget's fitted B_opt and its flat
// region (batch/lr grids); "" when no run logged the noise scale.
std::string NoiseScaleFigure(const ScalingAnalysis& a);
// Loss against lr, one curve per width, each width's best run starred (width_transfer.h); "" without such
// runs.
std::string WidthTransferFigure(const ScalingAnalysis& a);

// "10^19", "3·10^19": a FLOP count as the figures and tables print it (the caret marks a superscript).
std::string PowerOfTenLabel(double value);

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_REPORTING_FIGURES_H_
