// Generation speed on the CPU in fp32: Generate over the model's incremental forward (KV cache) against
// recomputing the forward over the whole sequence for each new token (what generation costs without a
// cache), on the CS336 TinyStories model shape (vocab 10000, d_model 512, 4 layers, 16 heads, d_ff 1344),
// greedy, 16-token prompt, 128 new tokens. Prints tokens/s of both and the ratio, measured in the same run;
// fails when the two give different tokens. Then the batched samples of `generate --num_samples`
// (GenerateSamples) at 1, 4 and 16 samples of 128 tokens, temperature 0.8 and top-p 0.95 (generate's
// defaults; an untrained model's flat logits make the nucleus most of the vocabulary, the slowest draw):
// tokens/s over all samples, and the ratio to one:
//   ./bazelw run //experiments/sampling:generate_benchmark
// generate_cuda_benchmark is the same on a GPU.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "experiments/sampling/generate_timing.h"
#include "experiments/sampling/sampling.h"
#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/language_model/language_model.h"

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Generation speed on the CPU: KV-cache decoding against recomputing the whole sequence, then batched "
      "samples; takes no flags.");
  lmf::ParseFlags(argc, argv);
  const lmf::model::ModelConfig config = lmf::model::Cs336Config(10000, 256, 512, 4, 16, 1344);
  auto model = lmf::model::LanguageModel::Create(config, lmf::kernels::Context::Cpu());
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  (*model)->InitializeParameters(1);
  std::vector<int32_t> prompt(16);
  for (int i = 0; i < 16; ++i) prompt[i] = (i * 37) % 10000;
  absl::StatusOr<lmf::experiments::GenerateTiming> timing =
      lmf::experiments::TimeGeneration(**model, prompt, 128);
  if (!timing.ok()) {
    std::fprintf(stderr, "%s\n", std::string(timing.status().message()).c_str());
    return 1;
  }
  std::printf(
      "%s",
      lmf::experiments::FormatTiming(
          absl::StrCat("generate 128 tokens after a 16-token prompt, CS336 TinyStories shape, CPU fp32, ",
                       lmf::kernels::Context::Cpu().num_threads(), " threads"),
          *timing)
          .c_str());
  if (timing->same_tokens != timing->new_tokens) return 1;

  lmf::experiments::GenerateOptions options;  // generate's defaults; no stop token: every sample 128 ids
  options.sampling.temperature = 0.8;
  options.sampling.top_p = 0.95;
  options.max_new_tokens = 128;
  double one_sample_rate = 0;
  for (int64_t n : {1, 4, 16}) {
    const auto start = std::chrono::steady_clock::now();
    auto samples = lmf::experiments::GenerateSamples(**model, prompt, options, n, nullptr);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!samples.ok()) {
      std::fprintf(stderr, "%s\n", std::string(samples.status().message()).c_str());
      return 1;
    }
    const double rate = static_cast<double>(n * options.max_new_tokens) / seconds;
    if (n == 1) one_sample_rate = rate;
    std::printf("%2lld samples as one batch: %8.1f tokens/s (%.2fx one sample)\n", static_cast<long long>(n),
                rate, rate / one_sample_rate);
  }
  return 0;
}
