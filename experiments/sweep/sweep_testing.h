// Test helpers shared by the sweep tests: a model sizer for planning (sweep_test, point_grid_test), and token
// files for those that train the tiny model (train_run_test, wsd_sweep_test).
#ifndef LMF_EXPERIMENTS_SWEEP_SWEEP_TESTING_H_
#define LMF_EXPERIMENTS_SWEEP_SWEEP_TESTING_H_

#include <string>

#include "absl/status/statusor.h"
#include "config/experiment.pb.h"
#include "experiments/sweep/plan.h"

namespace lmf::sweep::testing {

// Parameters of a pre-norm transformer without biases (12 L d^2, embeddings 2 V d), and 6N FLOPs per token:
// enough for planning.
absl::StatusOr<ModelSize> SimpleSizer(const config::Experiment& e);

// The test's TEST_TMPDIR.
std::string TmpDir();

// Token files for experiments/configs/tiny.textproto (vocabulary 512): 8000 random training tokens and 2000
// validation tokens, written once per test process into TmpDir() as train.tok and val.tok.
struct TinyTokenFiles {
  std::string train, val;
};
const TinyTokenFiles& TinyTokens();

}  // namespace lmf::sweep::testing

#endif  // LMF_EXPERIMENTS_SWEEP_SWEEP_TESTING_H_
