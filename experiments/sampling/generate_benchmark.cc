// Generation speed: Generate over the model's incremental forward (KV cache) against recomputing the forward
// over the whole sequence for each new token (what generation costs without a cache), on the CPU in fp32, on
// the CS336 TinyStories model shape (vocab 10000, d_model 512, 4 layers, 16 heads, d_ff 1344), greedy,
// 16-token prompt, 128 new tokens. Prints tokens/s of both and the ratio, measured in the same run:
//   ./bazelw run //experiments/sampling:generate_benchmark
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "experiments/sampling/sampling.h"
#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/language_model/language_model.h"

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

int main() {
  using lmf::experiments::Generate;
  using lmf::experiments::GenerateOptions;
  const lmf::model::ModelConfig config = lmf::model::Cs336Config(10000, 256, 512, 4, 16, 1344);
  auto model = lmf::model::LanguageModel::Create(config, lmf::kernels::Context::Cpu());
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  (*model)->InitializeParameters(1);
  std::vector<int32_t> prompt(16);
  for (int i = 0; i < 16; ++i) prompt[i] = (i * 37) % 10000;
  const int new_tokens = 128;

  GenerateOptions options;
  options.sampling.temperature = 0;
  options.max_new_tokens = new_tokens;
  auto started = std::chrono::steady_clock::now();
  auto cached = Generate(**model, prompt, options, nullptr);
  const double cached_seconds = Seconds(started);
  if (!cached.ok()) return 1;

  started = std::chrono::steady_clock::now();
  std::vector<int32_t> ids = prompt;
  for (int i = 0; i < new_tokens; ++i) {
    if (!(*model)->Forward(ids.data(), 1, static_cast<int64_t>(ids.size())).ok()) return 1;
    const float* last = (*model)->logits() + (ids.size() - 1) * config.vocab_size;
    ids.push_back(static_cast<int32_t>(std::max_element(last, last + config.vocab_size) - last));
  }
  const double recompute_seconds = Seconds(started);
  const bool same = std::equal(cached->begin(), cached->end(), ids.begin() + 16);
  std::printf("generate %d tokens after a 16-token prompt, CS336 TinyStories shape, %d threads\n", new_tokens,
              lmf::kernels::Context::Cpu().num_threads());
  std::printf("  KV cache:          %8.1f tokens/s\n", new_tokens / cached_seconds);
  std::printf("  full recompute:    %8.1f tokens/s\n", new_tokens / recompute_seconds);
  std::printf("  ratio (cache/recompute): %.2fx   same tokens: %s\n", recompute_seconds / cached_seconds,
              same ? "yes" : "NO");
  return same ? 0 : 1;
}
