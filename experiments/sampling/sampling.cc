// Token sampling and the generation loop (see sampling.h).
#include "experiments/sampling/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/core/dtype.h"
#include "kernels/memory/memory.h"

namespace lmf::experiments {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) with 53 random bits.
double Uniform(uint64_t seed, uint64_t draw) {
  return static_cast<double>(SplitMix64(SplitMix64(seed) ^ draw) >> 11) * (1.0 / 9007199254740992.0);
}

// The model's logits (B, 1, vocab_rows) on its device -> `out` as host floats (bf16 widened exactly), in one
// copy.
void LogitsToHost(const model::LanguageModel& model, std::vector<float>& out) {
  const kernels::Tensor& logits = model.logits_tensor();
  out.resize(static_cast<size_t>(logits.numel()));
  kernels::CopyToHostAsFloats(model.context(), out.data(), logits.data(), logits.dtype(), logits.numel());
}

}  // namespace

int32_t SampleToken(const float* logits, int64_t vocab_size, const SamplingOptions& options, uint64_t draw) {
  if (options.temperature <= 0) {
    return static_cast<int32_t>(std::max_element(logits, logits + vocab_size) - logits);
  }
  const double max_logit = *std::max_element(logits, logits + vocab_size);
  std::vector<double> probs(vocab_size);
  double total = 0;
  for (int64_t i = 0; i < vocab_size; ++i) {
    probs[i] = std::exp((logits[i] - max_logit) / options.temperature);
    total += probs[i];
  }
  std::vector<int32_t> order(vocab_size);
  std::iota(order.begin(), order.end(), 0);
  // Most probable first; ties by id so the order (and the draw) is deterministic.
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return probs[a] != probs[b] ? probs[a] > probs[b] : a < b;
  });
  int64_t kept = 0;
  double kept_mass = 0;
  while (kept < vocab_size && (kept == 0 || kept_mass < options.top_p * total)) {
    kept_mass += probs[order[kept]];
    ++kept;
  }
  const double target = Uniform(options.seed, draw) * kept_mass;
  double cumulative = 0;
  for (int64_t i = 0; i < kept; ++i) {
    cumulative += probs[order[i]];
    if (target < cumulative) return order[i];
  }
  return order[kept - 1];
}

absl::StatusOr<std::vector<std::vector<int32_t>>> GenerateSamples(
    model::LanguageModel& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
    int64_t num_samples, const std::function<void(int64_t sample, int32_t id)>& on_token) {
  if (prompt.empty()) return absl::InvalidArgumentError("generation needs a prompt of at least one token");
  if (num_samples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("generation needs at least one sample, got ", num_samples));
  }
  absl::StatusOr<model::KvCache> cache = model.NewKvCache(num_samples);
  if (!cache.ok()) return cache.status();
  const int64_t vocab = options.vocab_limit > 0 ? std::min(options.vocab_limit, model.config().vocab_size)
                                                : model.config().vocab_size;
  const int64_t rows = model.config().vocab_rows(), capacity = cache->capacity();
  const size_t n = static_cast<size_t>(num_samples);
  // Every sample's ids, prompt included; all of one length (an ended sample keeps taking its stop token).
  std::vector<std::vector<int32_t>> ids(n, prompt);
  std::vector<int32_t> window;  // (num_samples, keep) for a refill
  std::vector<float> logits;    // (num_samples, rows) after the last step
  // (Re)fills the cache with every sample's last `keep` ids; the logits after the last of them come to
  // `logits`.
  auto refill = [&](int64_t keep) -> absl::Status {
    window.clear();
    for (const std::vector<int32_t>& sample : ids)
      window.insert(window.end(), sample.end() - keep, sample.end());
    if (absl::Status status = model.Prefill(window.data(), num_samples, keep, *cache); !status.ok()) {
      return status;
    }
    LogitsToHost(model, logits);
    return absl::OkStatus();
  };
  if (absl::Status status = refill(std::min<int64_t>(capacity, static_cast<int64_t>(prompt.size())));
      !status.ok()) {
    return status;
  }
  std::vector<std::vector<int32_t>> generated(n);
  std::vector<char> ended(n, 0);
  std::vector<int32_t> next(n);
  size_t live = n;
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    for (size_t s = 0; s < n; ++s) {
      if (ended[s]) {
        next[s] = ids[s].back();
        continue;
      }
      SamplingOptions sampling = options.sampling;
      sampling.seed += s;
      next[s] = SampleToken(logits.data() + s * rows, vocab, sampling, static_cast<uint64_t>(i));
      if (options.stop_token.has_value() && next[s] == *options.stop_token) {
        ended[s] = 1;
        --live;
        continue;
      }
      generated[s].push_back(next[s]);
      if (on_token) on_token(static_cast<int64_t>(s), next[s]);
    }
    if (live == 0 || i + 1 == options.max_new_tokens) break;
    for (size_t s = 0; s < n; ++s) ids[s].push_back(next[s]);
    // A full cache restarts from the newest half of the window (positions begin again at 0).
    if (cache->length() < capacity) {
      if (absl::Status status = model.DecodeStep(next.data(), *cache); !status.ok()) return status;
      LogitsToHost(model, logits);
    } else if (absl::Status status = refill(std::max<int64_t>(1, capacity / 2)); !status.ok()) {
      return status;
    }
  }
  return generated;
}

absl::StatusOr<std::vector<int32_t>> Generate(model::LanguageModel& model, const std::vector<int32_t>& prompt,
                                              const GenerateOptions& options,
                                              const std::function<void(int32_t)>& on_token) {
  std::function<void(int64_t, int32_t)> each;
  if (on_token) each = [&](int64_t, int32_t id) { on_token(id); };
  absl::StatusOr<std::vector<std::vector<int32_t>>> samples =
      GenerateSamples(model, prompt, options, 1, each);
  if (!samples.ok()) return samples.status();
  return std::move(samples->front());
}

}  // namespace lmf::experiments
