// Test helper for the Approach 3 fit: three starts instead of Hoffmann et al.'s 4,500-start grid. On the
// tests' well-sampled synthetic surfaces the full grid finds the same optimum; tests about what is around
// the fit (intervals, the report) use this to stay fast.
#ifndef LMFORGE_SCALING_FIT_PARAMETRIC_TESTING_H_
#define LMFORGE_SCALING_FIT_PARAMETRIC_TESTING_H_

#include "scaling/fit/parametric.h"

namespace lmf::scaling {

// alpha in {0.3, 0.6}, beta 0.3, e 0.5, a = b = 6.
inline ParametricFitOptions FewParametricStarts() {
  ParametricFitOptions options;
  options.grid_alpha = {0.3, 0.6};
  options.grid_beta = {0.3};
  options.grid_e = {0.5};
  options.grid_a = {6};
  options.grid_b = {6};
  return options;
}

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_FIT_PARAMETRIC_TESTING_H_
