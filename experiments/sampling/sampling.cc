// Token sampling and the generation loop (see sampling.h).
#include "experiments/sampling/sampling.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/splitmix.h"
#include "base/thread_pool.h"
#include "kernels/core/dtype.h"
#include "kernels/memory/memory.h"

namespace lmf::experiments {
namespace {

// The model's logits (B, 1, vocab_rows) on its device -> `out` as host floats (bf16 widened exactly), in one
// copy.
void LogitsToHost(const model::LanguageModel& model, std::vector<float>& out) {
  const kernels::Tensor& logits = model.logits_tensor();
  out.resize(static_cast<size_t>(logits.numel()));
  kernels::CopyToHostAsFloats(model.context(), out.data(), logits.data(), logits.dtype(), logits.numel());
}

}  // namespace

double Uniform(uint64_t seed, uint64_t draw) {
  return static_cast<double>(SplitMix64(SplitMix64(seed) ^ draw) >> 11) * (1.0 / 9007199254740992.0);
}

int32_t SampleToken(const float* logits, int64_t vocab_size, const SamplingOptions& options, uint64_t draw) {
  if (options.temperature <= 0) {
    return static_cast<int32_t>(std::max_element(logits, logits + vocab_size) - logits);
  }
  const double max_logit = *std::max_element(logits, logits + vocab_size);
  // (probability, id) of every token; the draw walks them most probable first, ties by id (a total order,
  // so the draw is deterministic), summing in that order.
  std::vector<std::pair<double, int32_t>> tokens(static_cast<size_t>(vocab_size));
  double total = 0;
  for (int64_t i = 0; i < vocab_size; ++i) {
    const double p = std::exp((logits[i] - max_logit) / options.temperature);
    tokens[i] = {p, static_cast<int32_t>(i)};
    total += p;
  }
  auto before = [](const std::pair<double, int32_t>& a, const std::pair<double, int32_t>& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  // Only the head of that order is needed -- the nucleus, usually a small part of the vocabulary -- so it is
  // sorted a chunk at a time (each chunk the next items of the order, picked by nth_element, then sorted),
  // doubling, until the nucleus is complete: the same order and sums as sorting everything.
  const size_t n = tokens.size();
  size_t sorted = 0;
  auto sort_next_chunk = [&] {
    // Past a quarter of the vocabulary (and for top_p >= 1, which keeps nearly everything) the rest is sorted
    // at once.
    size_t end = sorted + std::max<size_t>(64, sorted);
    if (options.top_p >= 1 || end > n / 4) end = n;
    if (end < n) std::nth_element(tokens.begin() + sorted, tokens.begin() + end, tokens.end(), before);
    std::sort(tokens.begin() + sorted, tokens.begin() + end, before);
    sorted = end;
  };
  size_t kept = 0;
  double kept_mass = 0;
  while (kept < n && (kept == 0 || kept_mass < options.top_p * total)) {
    if (kept == sorted) sort_next_chunk();
    kept_mass += tokens[kept].first;
    ++kept;
  }
  const double target = Uniform(options.seed, draw) * kept_mass;
  double cumulative = 0;
  for (size_t i = 0; i < kept; ++i) {
    cumulative += tokens[i].first;
    if (target < cumulative) return tokens[i].second;
  }
  return tokens[kept - 1].second;
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
  // The cache decodes up to `capacity` positions (past the context for an all-windowed rotary model); a
  // prefill covers at most the context.
  const int64_t rows = model.config().vocab_rows(), capacity = cache->capacity(),
                context = model.config().context_length;
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
  if (absl::Status status = refill(std::min<int64_t>(context, static_cast<int64_t>(prompt.size())));
      !status.ok()) {
    return status;
  }
  std::vector<std::vector<int32_t>> generated(n);
  std::vector<char> ended(n, 0);
  std::vector<int32_t> next(n);
  size_t live = n;
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    // The samples' draws are independent: spread over the CPU threads (a draw sorts the head of the
    // vocabulary).
    ThreadPool::Default().RunTasks(num_samples, [&](int64_t s) {
      if (ended[s]) return;
      SamplingOptions sampling = options.sampling;
      sampling.seed += static_cast<uint64_t>(s);
      next[s] = SampleToken(logits.data() + s * rows, vocab, sampling, static_cast<uint64_t>(i));
    });
    for (size_t s = 0; s < n; ++s) {
      if (ended[s]) {
        next[s] = ids[s].back();
        continue;
      }
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
    // A full cache restarts from the newest half of the context (positions begin again at 0).
    if (cache->length() < capacity) {
      if (absl::Status status = model.DecodeStep(next.data(), *cache); !status.ok()) return status;
      LogitsToHost(model, logits);
    } else if (absl::Status status = refill(std::max<int64_t>(1, context / 2)); !status.ok()) {
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
