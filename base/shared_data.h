// Locating the reference data beside the checkout (../shared/data, exported by ./bazelw as
// LMF_SHARED_DATA). Tests call LMF_SHARED_DATA_OR_SKIP so a fresh clone without it still passes, with a
// message naming what was skipped.
#ifndef LMFORGE_BASE_SHARED_DATA_H_
#define LMFORGE_BASE_SHARED_DATA_H_

#include <sys/stat.h>

#include <cstdlib>
#include <string>

namespace lmf {

// Absolute path of `relative` under LMF_SHARED_DATA, or "" when the variable is unset or the file is
// missing.
inline std::string SharedDataPath(const std::string& relative) {
  const char* root = std::getenv("LMF_SHARED_DATA");
  if (root == nullptr || *root == '\0') return "";
  std::string path = std::string(root) + "/" + relative;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "";
  return path;
}

}  // namespace lmf

// In a GoogleTest body: declares `var` as the path of `relative`, or skips the test with a message.
#define LMF_SHARED_DATA_OR_SKIP(var, relative)                                                      \
  const std::string var = ::lmf::SharedDataPath(relative);                                          \
  if (var.empty()) {                                                                                \
    GTEST_SKIP() << "reference data " << (relative)                                                 \
                 << " not found: set LMF_SHARED_DATA (./bazelw does, where ../shared/data exists)"; \
  }

#endif  // LMFORGE_BASE_SHARED_DATA_H_
