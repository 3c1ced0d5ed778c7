// Comparison helpers for kernel tests: element-wise closeness with a failure message that names the
// quantity, the worst element (index, actual, expected) and the max absolute and relative errors; and a
// central-difference gradient check.
//
//   EXPECT_TRUE(AllClose("rmsnorm out", out, expected, /*rtol=*/1e-5, /*atol=*/1e-6));
#ifndef LMFORGE_KERNELS_TESTING_COMPARE_H_
#define LMFORGE_KERNELS_TESTING_COMPARE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/core/dtype.h"

namespace lmf::kernels::testing {

struct ErrorStats {
  double max_abs = 0;       // max |actual - expected|
  double max_rel = 0;       // max |actual - expected| / |expected| over elements with |expected| > 0
  int64_t worst = -1;       // index with the largest excess over the tolerance (or the largest abs error)
  int64_t violations = 0;   // elements with |actual - expected| > atol + rtol |expected|
  int64_t non_finite = 0;   // elements where exactly one side is NaN/inf or they differ in sign of inf
};

ErrorStats CompareArrays(const float* actual, const float* expected, int64_t n, double rtol, double atol);

// Passes when every |actual[i] - expected[i]| <= atol + rtol * |expected[i]| (numpy.allclose's rule) and
// non-finite values agree.
::testing::AssertionResult AllClose(const std::string& what, const float* actual, const float* expected, int64_t n,
                                    double rtol, double atol);
::testing::AssertionResult AllClose(const std::string& what, const std::vector<float>& actual,
                                    const std::vector<float>& expected, double rtol, double atol);

// Central-difference check of an analytic gradient. `loss` evaluates the scalar loss at the current
// contents of `x` (it reads x by reference); for each checked index i, x[i] is moved by +h and -h and
// (loss+ - loss-) / 2h is compared with analytic[i] at |diff| <= atol + rtol * |numeric|. Up to
// `max_checks` indices are checked, spread evenly over x. x is restored.
::testing::AssertionResult CheckGradient(const std::string& what, std::vector<float>& x,
                                         const std::function<double()>& loss, const std::vector<float>& analytic,
                                         double h, double rtol, double atol, int64_t max_checks = 64);

// The bf16 tolerance rule of STYLE.md, shared by the CPU and CUDA bf16 tests:
//   error(kernel) = max |kernel - reference|, reference = the fp32 CPU kernel on the unrounded inputs
//   error(naive)  = max |naive - reference|,  naive = the same fp32 kernel on bf16-rounded inputs, its
//                   bf16 outputs rounded to bf16 (what a plain bf16-storage computation of the op gives)
//   pass when error(kernel) <= multiple * error(naive) + floor
// `floor` absorbs exact-zero naive errors (e.g. integer-valued outputs). NaN anywhere fails.
::testing::AssertionResult WithinBf16Tolerance(const std::string& what, const std::vector<float>& kernel,
                                               const std::vector<float>& reference,
                                               const std::vector<float>& naive, double multiple,
                                               double floor = 1e-6);
double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b);  // NaN propagates
// Round to nearest even (kernels/core/dtype.h's FloatToBF16), as fp32 values or as bf16 bits.
std::vector<float> RoundToBF16(const std::vector<float>& x);
std::vector<uint16_t> ToBF16(const std::vector<float>& x);
std::vector<float> FromBF16(const std::vector<uint16_t>& x);

// Host storage of values in a dtype (f32, or bf16 rounded to nearest even), so that one test body runs a CPU
// kernel in either dtype. A buffer made from a size is filled with NaN, so unwritten outputs fail.
class DTypeBuffer {
 public:
  DTypeBuffer(const std::vector<float>& values, DType dtype);
  DTypeBuffer(int64_t n, DType dtype);
  void* data() { return dtype_ == DType::kBF16 ? static_cast<void*>(bf16_.data()) : f32_.data(); }
  std::vector<float> ToFloats() const { return dtype_ == DType::kBF16 ? FromBF16(bf16_) : f32_; }

 private:
  DType dtype_;
  std::vector<float> f32_;
  std::vector<uint16_t> bf16_;
};

// Deterministic pseudo-random test data: normal(0, scale) values and integers in [0, n).
std::vector<float> RandomNormal(int64_t n, uint64_t seed, float scale = 1.0f);
std::vector<int32_t> RandomInts(int64_t n, int32_t bound, uint64_t seed);

}  // namespace lmf::kernels::testing

#endif  // LMFORGE_KERNELS_TESTING_COMPARE_H_
