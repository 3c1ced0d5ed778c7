// Timing generation for the generate benchmarks: greedy Generate over the model's incremental forward (KV
// cache) against recomputing the full forward over the whole sequence for each new token (what generation
// costs without a cache), on whatever device and precision the model lives, in one call. Both paths copy
// the logits they need to the host each token, so the wall-clock times include the device's work.
#ifndef LMFORGE_EXPERIMENTS_SAMPLING_GENERATE_TIMING_H_
#define LMFORGE_EXPERIMENTS_SAMPLING_GENERATE_TIMING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/language_model/language_model.h"

namespace lmf::experiments {

struct GenerateTiming {
  int64_t new_tokens = 0;
  double cached_seconds = 0;     // Generate, greedy, prompt + new_tokens within the context
  double recompute_seconds = 0;  // one full Forward per new token
  int64_t same_tokens = 0;       // leading generated tokens on which both agree
};

// `prompt` + new_tokens must fit the model's context (no window restart on either side). A short warm-up
// of both paths runs first (allocations, first kernel launches).
absl::StatusOr<GenerateTiming> TimeGeneration(model::LanguageModel& model, const std::vector<int32_t>& prompt,
                                              int64_t new_tokens);

// The lines the benchmarks print for one timing, under `title`.
std::string FormatTiming(const std::string& title, const GenerateTiming& timing);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_SAMPLING_GENERATE_TIMING_H_
