// Generation speed on a GPU (tag gpu; the GPU bundle runs it): Generate over the model's incremental
// forward (KV cache) against recomputing the forward over the whole sequence for each new token, for a
// GPT-2 small model (12 layers, d_model 768, 12 heads of 64, vocab 50257 padded to 50304, context 1024;
// random weights), greedy, batch 1, 16-token prompt, 256 new tokens, in fp32 and in bf16 on CUDA device 0.
// Prints tokens/s and ms/token of both and the ratio, measured in the same run, and on how many leading
// tokens the two greedy sequences agree (both are right; their fp32 sums run in other orders, so a near-tie
// in the argmax may go either way, in bf16 sooner). Without a CUDA device it prints "no CUDA device, nothing
// measured" and exits 0, as the other GPU benchmarks do.
//   ./bazelw run //experiments/sampling:generate_cuda_benchmark
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "config/run.pb.h"
#include "experiments/sampling/generate_timing.h"
#include "experiments/trainer/training_device.h"
#include "kernels/cuda/cuda_context.h"
#include "model/config/config.h"
#include "model/language_model/language_model.h"

namespace lmf::experiments {
namespace {

int Main() {
  if (kernels::cuda::CudaDeviceCount() == 0) {
    std::printf("generate_cuda_benchmark: no CUDA device, nothing measured\n");
    return 0;
  }
  model::ModelConfig config = model::Gpt2Config(50257, 1024, 768, 12, 12);
  config.padded_vocab_size = 50304;
  std::vector<int32_t> prompt(16);
  for (int i = 0; i < 16; ++i) prompt[i] = (i * 3001) % 50257;
  int status = 0;
  for (const auto precision : {config::RunConfig::FP32, config::RunConfig::BF16}) {
    config::RunConfig run;
    run.set_device(config::RunConfig::CUDA);
    run.set_cuda_device(0);
    run.set_precision(precision);
    absl::StatusOr<std::unique_ptr<TrainingDevice>> device = TrainingDevice::Open(run);
    if (!device.ok()) {
      std::fprintf(stderr, "generate_cuda_benchmark: %s\n", std::string(device.status().message()).c_str());
      return 1;
    }
    auto model = model::LanguageModel::Create(config, (*device)->context(), (*device)->activations());
    if (!model.ok()) {
      std::fprintf(stderr, "generate_cuda_benchmark: %s\n", std::string(model.status().message()).c_str());
      return 1;
    }
    (*model)->InitializeParameters(1);
    absl::StatusOr<GenerateTiming> timing = TimeGeneration(**model, prompt, 256);
    if (!timing.ok()) {
      std::fprintf(stderr, "generate_cuda_benchmark: %s\n", std::string(timing.status().message()).c_str());
      status = 1;
      continue;
    }
    std::printf("%s", FormatTiming(absl::StrCat("generate 256 tokens after a 16-token prompt, GPT-2 small, ",
                                                (*device)->name(), ", ",
                                                precision == config::RunConfig::FP32 ? "fp32" : "bf16"),
                                   *timing)
                          .c_str());
    std::fflush(stdout);
  }
  return status;
}

}  // namespace
}  // namespace lmf::experiments

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Generation speed on CUDA device 0 in fp32 and bf16: KV-cache decoding against recomputing the whole "
      "sequence; takes no flags.");
  lmf::ParseFlags(argc, argv);
  return lmf::experiments::Main();
}
