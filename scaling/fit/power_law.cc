// Least-squares lines and power laws, and the Kaplan single-variable laws (see power_law.h).
#include "scaling/fit/power_law.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace lmf::scaling {

double PowerLaw::At(double x) const { return coefficient * std::pow(x, exponent); }

absl::StatusOr<Line> FitLine(const std::vector<double>& x, const std::vector<double>& y,
                             const std::vector<double>& weights) {
  if (x.size() != y.size() || (!weights.empty() && weights.size() != x.size())) {
    return absl::InvalidArgumentError(absl::StrCat("line fit: ", x.size(), " x values, ", y.size(), " y values and ",
                                                   weights.size(), " weights do not match"));
  }
  double sw = 0, sx = 0, sy = 0;
  int used = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double w = weights.empty() ? 1.0 : weights[i];
    if (!std::isfinite(x[i]) || !std::isfinite(y[i]) || !std::isfinite(w) || w < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("line fit: point ", i, " is (", x[i], ", ", y[i], ") with weight ", w, "; need finite values"));
    }
    if (w == 0) continue;
    sw += w;
    sx += w * x[i];
    sy += w * y[i];
    ++used;
  }
  if (used < 2) return absl::InvalidArgumentError(absl::StrCat("line fit: need 2 points, got ", used));
  const double mx = sx / sw, my = sy / sw;
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double w = weights.empty() ? 1.0 : weights[i];
    sxx += w * (x[i] - mx) * (x[i] - mx);
    sxy += w * (x[i] - mx) * (y[i] - my);
  }
  if (!(sxx > 0)) return absl::InvalidArgumentError("line fit: all points share one x value; the slope is undefined");
  Line line;
  line.slope = sxy / sxx;
  line.intercept = my - line.slope * mx;
  return line;
}

absl::StatusOr<PowerLaw> FitPowerLaw(const std::vector<double>& x, const std::vector<double>& y,
                                     const std::vector<double>& weights) {
  std::vector<double> lx(x.size()), ly(y.size());
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (!(x[i] > 0) || !(y[i] > 0) || !std::isfinite(x[i]) || !std::isfinite(y[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("power-law fit: point ", i, " is (", x[i], ", ", y[i], "); need positive finite values"));
    }
    lx[i] = std::log(x[i]);
    ly[i] = std::log(y[i]);
  }
  absl::StatusOr<Line> line = FitLine(lx, ly, weights);
  if (!line.ok()) return line.status();
  return PowerLaw{std::exp(line->intercept), line->slope};
}

std::vector<int> LowerFrontier(const std::vector<double>& x, const std::vector<double>& loss) {
  std::vector<int> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return x[a] < x[b]; });
  // Runs whose x agree to 0.1% (e.g. the runs of one IsoFLOP budget, whose FLOP counts differ in the last
  // digits) count as one x: only the lowest loss among them can be on the frontier.
  std::vector<int> frontier;
  double best = INFINITY;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    int lowest = order[i];
    while (j < order.size() && x[order[j]] <= x[order[i]] * (1 + 1e-3)) {
      if (loss[order[j]] < loss[lowest]) lowest = order[j];
      ++j;
    }
    if (loss[lowest] < best) {
      best = loss[lowest];
      frontier.push_back(lowest);
    }
    i = j;
  }
  return frontier;
}

namespace {

absl::StatusOr<KaplanLaw> FitKaplanLaw(const std::vector<double>& x, const std::vector<double>& loss,
                                       const char* name) {
  KaplanLaw out;
  out.frontier = LowerFrontier(x, loss);
  std::vector<double> fx, fy;
  for (int i : out.frontier) {
    fx.push_back(x[i]);
    fy.push_back(loss[i]);
  }
  absl::StatusOr<PowerLaw> law = FitPowerLaw(fx, fy);
  if (!law.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("Kaplan law L(", name, ") on the ", fx.size(),
                                                   " frontier runs: ", law.status().message()));
  }
  out.law = *law;
  out.alpha = -law->exponent;
  // L = k X^-alpha = (X_c / X)^alpha  =>  X_c = k^(1 / alpha).
  out.critical = out.alpha != 0 ? std::pow(law->coefficient, 1.0 / out.alpha) : INFINITY;
  return out;
}

}  // namespace

absl::StatusOr<KaplanLaws> FitKaplanLaws(const Observations& observations) {
  std::vector<double> n, d, c, loss;
  for (const Observation& o : observations) {
    n.push_back(o.params);
    d.push_back(o.tokens);
    c.push_back(o.flops);
    loss.push_back(o.loss);
  }
  KaplanLaws laws;
  absl::StatusOr<KaplanLaw> law = FitKaplanLaw(n, loss, "N");
  if (!law.ok()) return law.status();
  laws.params = *law;
  law = FitKaplanLaw(d, loss, "D");
  if (!law.ok()) return law.status();
  laws.tokens = *law;
  law = FitKaplanLaw(c, loss, "C");
  if (!law.ok()) return law.status();
  laws.flops = *law;
  return laws;
}

}  // namespace lmf::scaling
