// See parallel_layout.h.
#include "config/parallel_layout.h"

#include "absl/strings/str_cat.h"

namespace lmf::config {

int ProcessCount(const ParallelConfig& parallel) {
  return parallel.data() * parallel.pipeline() * parallel.expert();
}

std::string LayoutFields(const ParallelConfig& parallel) {
  std::string fields = absl::StrCat("run.parallel.data=", parallel.data());
  if (parallel.pipeline() > 1) absl::StrAppend(&fields, " x run.parallel.pipeline=", parallel.pipeline());
  if (parallel.expert() > 1) absl::StrAppend(&fields, " x run.parallel.expert=", parallel.expert());
  return fields;
}

}  // namespace lmf::config
