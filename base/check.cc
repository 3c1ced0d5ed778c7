// Implementation of LMF_CHECK's failure path.
#include "base/check.h"

#include <cstdio>
#include <cstdlib>

namespace lmf::internal {

CheckFailure::CheckFailure(const char* file, int line, const char* condition) {
  stream_ << file << ":" << line << ": check failed: " << condition << " ";
}

CheckFailure::~CheckFailure() {
  std::fprintf(stderr, "%s\n", stream_.str().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace lmf::internal
