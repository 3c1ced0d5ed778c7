// Closeness checks and the central-difference gradient check used by the kernel tests.
#include "kernels/testing/compare.h"

#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "kernels/core/dtype.h"

namespace lmf::kernels::testing {

ErrorStats CompareArrays(const float* actual, const float* expected, int64_t n, double rtol, double atol) {
  ErrorStats s;
  double worst_excess = -1e300;
  for (int64_t i = 0; i < n; ++i) {
    const double a = actual[i], e = expected[i];
    if (!std::isfinite(a) || !std::isfinite(e)) {
      const bool same = (std::isnan(a) && std::isnan(e)) || (a == e);
      if (!same) {
        ++s.non_finite;
        ++s.violations;
        if (worst_excess < 1e300) worst_excess = 1e300, s.worst = i;
      }
      continue;
    }
    const double diff = std::abs(a - e);
    s.max_abs = std::max(s.max_abs, diff);
    if (e != 0.0) s.max_rel = std::max(s.max_rel, diff / std::abs(e));
    const double excess = diff - (atol + rtol * std::abs(e));
    if (excess > 0) ++s.violations;
    if (excess > worst_excess) worst_excess = excess, s.worst = i;
  }
  return s;
}

::testing::AssertionResult AllClose(const std::string& what, const float* actual, const float* expected, int64_t n,
                                    double rtol, double atol) {
  const ErrorStats s = CompareArrays(actual, expected, n, rtol, atol);
  if (s.violations == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << what << ": " << s.violations << " of " << n << " elements differ beyond atol=" << atol << " + rtol=" << rtol
     << " * |expected|";
  if (s.non_finite) os << " (" << s.non_finite << " non-finite mismatches)";
  os << "; max abs error " << s.max_abs << ", max rel error " << s.max_rel;
  if (s.worst >= 0) os << "; worst at index " << s.worst << ": actual " << actual[s.worst] << ", expected " << expected[s.worst];
  return ::testing::AssertionFailure() << os.str();
}

::testing::AssertionResult AllClose(const std::string& what, const std::vector<float>& actual,
                                    const std::vector<float>& expected, double rtol, double atol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << what << ": " << actual.size() << " elements, expected " << expected.size();
  return AllClose(what, actual.data(), expected.data(), static_cast<int64_t>(actual.size()), rtol, atol);
}

::testing::AssertionResult CheckGradient(const std::string& what, std::vector<float>& x,
                                         const std::function<double()>& loss, const std::vector<float>& analytic,
                                         double h, double rtol, double atol, int64_t max_checks) {
  if (analytic.size() != x.size())
    return ::testing::AssertionFailure() << what << ": analytic gradient has " << analytic.size() << " elements, x has " << x.size();
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t step = std::max<int64_t>(1, n / std::max<int64_t>(1, max_checks));
  int64_t failures = 0;
  std::ostringstream os;
  for (int64_t i = 0; i < n; i += step) {
    const float saved = x[i];
    x[i] = static_cast<float>(saved + h);
    const double plus = loss();
    x[i] = static_cast<float>(saved - h);
    const double minus = loss();
    x[i] = saved;
    // The perturbation actually applied after rounding to float.
    const double applied = static_cast<double>(static_cast<float>(saved + h)) - static_cast<float>(saved - h);
    const double numeric = (plus - minus) / applied;
    const double diff = std::abs(numeric - analytic[i]);
    if (diff > atol + rtol * std::abs(numeric)) {
      if (failures < 5) os << "\n  index " << i << ": analytic " << analytic[i] << ", numeric " << numeric;
      ++failures;
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << failures << " gradient entries differ from central differences (h="
                                       << h << ", rtol=" << rtol << ", atol=" << atol << ")" << os.str();
}

std::vector<float> RandomNormal(int64_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> RandomInts(int64_t n, int32_t bound, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, bound - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<float> RoundToBF16(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = BF16ToFloat(FloatToBF16(x[i]));
  return out;
}

std::vector<uint16_t> ToBF16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = FloatToBF16(x[i]);
  return out;
}

std::vector<float> FromBF16(const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = BF16ToFloat(x[i]);
  return out;
}

DTypeBuffer::DTypeBuffer(const std::vector<float>& values, DType dtype) : dtype_(dtype) {
  if (dtype == DType::kBF16) {
    bf16_ = ToBF16(values);
  } else {
    f32_ = values;
  }
}

DTypeBuffer::DTypeBuffer(int64_t n, DType dtype)
    : DTypeBuffer(std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()), dtype) {}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(d <= m)) m = d;  // NaN propagates as the max
  }
  return m;
}

::testing::AssertionResult WithinBf16Tolerance(const std::string& what, const std::vector<float>& kernel,
                                               const std::vector<float>& reference,
                                               const std::vector<float>& naive, double multiple,
                                               double floor) {
  if (kernel.size() != reference.size() || naive.size() != reference.size())
    return ::testing::AssertionFailure() << what << ": sizes differ";
  const double ek = MaxAbsDiff(kernel, reference), en = MaxAbsDiff(naive, reference);
  const double bound = multiple * en + floor;
  if (ek <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": bf16 kernel max error " << ek << " exceeds " << multiple
                                       << " x naive bf16 error " << en << " (+" << floor << ")";
}

}  // namespace lmf::kernels::testing
