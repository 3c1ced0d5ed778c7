// Greedy generation with the KV cache against full recomputation (see generate_timing.h).
#include "experiments/sampling/generate_timing.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "experiments/sampling/sampling.h"
#include "kernels/core/dtype.h"
#include "kernels/memory/memory.h"
#include "model/layers/parameter.h"

namespace lmf::experiments {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The argmax over the vocabulary of the last position's logits of a (1, T, vocab_rows) forward, copying that
// row only to the host.
int32_t LastArgmax(const model::LanguageModel& model, int64_t t) {
  const kernels::Tensor& logits = model.logits_tensor();
  const int64_t rows = model.config().vocab_rows(), vocab = model.config().vocab_size;
  std::vector<float> row(static_cast<size_t>(rows));
  const void* last = model::ElementOffset(logits.data(), (t - 1) * rows, logits.dtype());
  kernels::CopyToHostAsFloats(model.context(), row.data(), last, logits.dtype(), rows);
  return static_cast<int32_t>(std::max_element(row.begin(), row.begin() + vocab) - row.begin());
}

absl::StatusOr<std::vector<int32_t>> Recompute(model::LanguageModel& model, std::vector<int32_t> ids,
                                               int64_t new_tokens) {
  const size_t prompt = ids.size();
  for (int64_t i = 0; i < new_tokens; ++i) {
    const int64_t t = static_cast<int64_t>(ids.size());
    if (absl::Status status = model.Forward(ids.data(), 1, t); !status.ok()) return status;
    ids.push_back(LastArgmax(model, t));
  }
  return std::vector<int32_t>(ids.begin() + static_cast<int64_t>(prompt), ids.end());
}

}  // namespace

absl::StatusOr<GenerateTiming> TimeGeneration(model::LanguageModel& model, const std::vector<int32_t>& prompt,
                                              int64_t new_tokens) {
  if (static_cast<int64_t>(prompt.size()) + new_tokens > model.config().context_length) {
    return absl::InvalidArgumentError(absl::StrCat("prompt ", prompt.size(), " + ", new_tokens,
                                                   " new tokens exceed the context ",
                                                   model.config().context_length));
  }
  GenerateOptions options;
  options.sampling.temperature = 0;
  options.max_new_tokens = std::min<int64_t>(4, new_tokens);
  if (absl::StatusOr<std::vector<int32_t>> warm = Generate(model, prompt, options, nullptr); !warm.ok()) {
    return warm.status();
  }
  if (absl::StatusOr<std::vector<int32_t>> warm = Recompute(model, prompt, options.max_new_tokens);
      !warm.ok()) {
    return warm.status();
  }
  GenerateTiming timing;
  timing.new_tokens = new_tokens;
  options.max_new_tokens = new_tokens;
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<int32_t>> cached = Generate(model, prompt, options, nullptr);
  timing.cached_seconds = SecondsSince(start);
  if (!cached.ok()) return cached.status();
  start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<int32_t>> recomputed = Recompute(model, prompt, new_tokens);
  timing.recompute_seconds = SecondsSince(start);
  if (!recomputed.ok()) return recomputed.status();
  while (timing.same_tokens < static_cast<int64_t>(std::min(cached->size(), recomputed->size())) &&
         (*cached)[timing.same_tokens] == (*recomputed)[timing.same_tokens]) {
    ++timing.same_tokens;
  }
  return timing;
}

std::string FormatTiming(const std::string& title, const GenerateTiming& timing) {
  const double n = static_cast<double>(timing.new_tokens);
  return absl::StrFormat(
      "%s\n"
      "  KV cache:          %9.1f tokens/s  (%.3f ms/token)\n"
      "  full recompute:    %9.1f tokens/s  (%.3f ms/token)\n"
      "  ratio (cache/recompute): %.2fx   same greedy tokens: %d of %d\n",
      title, n / timing.cached_seconds, 1e3 * timing.cached_seconds / n, n / timing.recompute_seconds,
      1e3 * timing.recompute_seconds / n, timing.recompute_seconds / timing.cached_seconds,
      timing.same_tokens, timing.new_tokens);
}

}  // namespace lmf::experiments
