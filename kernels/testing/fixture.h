// Fixture: the committed PyTorch reference arrays of one op (kernels/testdata/<op>.npz), with accessors
// that abort naming the file and array when a fixture is missing or malformed (the fixtures are part of
// the source tree, so that is a broken checkout, not a test outcome).
#ifndef LMFORGE_KERNELS_TESTING_FIXTURE_H_
#define LMFORGE_KERNELS_TESTING_FIXTURE_H_

#include <string>
#include <vector>

#include "base/check.h"
#include "kernels/testing/npz.h"

namespace lmf::kernels::testing {

class Fixture {
 public:
  // Reads `path` (e.g. "kernels/testdata/rmsnorm.npz", relative to the test's runfiles root).
  explicit Fixture(const std::string& path) {
    auto npz = NpzFile::Read(path);
    LMF_CHECK(npz.ok()) << npz.status();
    npz_ = std::move(*npz);
  }
  std::vector<float> F(const std::string& name, int64_t expected_numel = -1) const {
    auto v = npz_.Floats(name, expected_numel);
    LMF_CHECK(v.ok()) << v.status();
    return *std::move(v);
  }
  std::vector<int32_t> I(const std::string& name, int64_t expected_numel = -1) const {
    auto v = npz_.Ints(name, expected_numel);
    LMF_CHECK(v.ok()) << v.status();
    return *std::move(v);
  }
  float Scalar(const std::string& name) const { return F(name, 1)[0]; }
  std::vector<int64_t> Shape(const std::string& name) const {
    auto a = npz_.Get(name);
    LMF_CHECK(a.ok()) << a.status();
    return (*a)->shape;
  }
  const NpzFile& npz() const { return npz_; }

 private:
  NpzFile npz_;
};

}  // namespace lmf::kernels::testing

#endif  // LMFORGE_KERNELS_TESTING_FIXTURE_H_
