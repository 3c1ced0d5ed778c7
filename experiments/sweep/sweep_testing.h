// Test helpers shared by the sweep tests that train the tiny model (train_run_test, wsd_sweep_test).
#ifndef LMF_EXPERIMENTS_SWEEP_SWEEP_TESTING_H_
#define LMF_EXPERIMENTS_SWEEP_SWEEP_TESTING_H_

#include <string>

namespace lmf::sweep::testing {

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
