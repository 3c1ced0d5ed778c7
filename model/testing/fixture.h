// Test-only: the PyTorch fixtures of model/testdata (written by tools/model/reference.py) as arrays by name.
#ifndef LMFORGE_MODEL_TESTING_FIXTURE_H_
#define LMFORGE_MODEL_TESTING_FIXTURE_H_

#include <cstdlib>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/testing/npz.h"

namespace lmf::model::testing {

// Every array of a fixture by name (without ".npy"), or the reader's error.
inline absl::StatusOr<std::map<std::string, kernels::testing::NpyArray>> ReadFixture(const std::string& path) {
  absl::StatusOr<kernels::testing::NpzFile> file = kernels::testing::NpzFile::Read(path);
  if (!file.ok()) return file.status();
  std::map<std::string, kernels::testing::NpyArray> arrays;
  for (std::string name : file->names()) {
    absl::StatusOr<const kernels::testing::NpyArray*> array = file->Get(name);
    if (!array.ok()) return array.status();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0) name.resize(name.size() - 4);
    arrays[name] = **array;
  }
  return arrays;
}

// The path of model/testdata/<name>.npz in the test's runfiles.
inline std::string FixturePath(const std::string& name) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || workspace == nullptr) return "model/testdata/" + name + ".npz";
  return std::string(srcdir) + "/" + workspace + "/model/testdata/" + name + ".npz";
}

}  // namespace lmf::model::testing

#endif  // LMFORGE_MODEL_TESTING_FIXTURE_H_
