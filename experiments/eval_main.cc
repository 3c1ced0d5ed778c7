// `eval`: the loss and perplexity of a trained model on a token file.
//
//   ./bazelw run //experiments:eval -- --checkpoint=runs/tiny --tokens=val.tok
//   ./bazelw run //experiments:eval -- --config=experiments/configs/cs336_tinystories.textproto
//       --weights=model_from_pytorch.safetensors --tokens=val.tok
//
//   ./bazelw run //experiments:eval -- --checkpoint=runs/tiny --tokens=val.tok --device=cuda --precision=bf16
//
// --checkpoint takes a checkpoint folder or a run folder (its newest good checkpoint). --weights reads a
// safetensors file with our parameter names (README.md), so models trained elsewhere compare directly.
// Windows of context_length + 1 tokens are read in order, context_length apart, in batches of
// --batch_size (default run.batch_size); --eval_tokens caps the tokens scored (default: every full batch).
// --device=cpu|cuda (default cpu), --cuda_device=N (default 0) and --precision=fp32|bf16 (default fp32)
// say where the model runs, opened as the trainer opens run.device (TrainingDevice).
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "base/flags.h"
#include "config/loader.h"
#include "experiments/data/token_batches.h"
#include "experiments/model_loading.h"
#include "experiments/placement_flags.h"
#include "experiments/trainer/memory_check.h"
#include "experiments/trainer/weights.h"
#include "model/accounting/training_memory.h"
#include "tokenizer/tokenizer_file.h"

ABSL_FLAG(std::string, checkpoint, "",
          "a run folder (its newest intact checkpoint) or one checkpoint's folder");
ABSL_FLAG(std::string, config, "", "instead of --checkpoint: a model config, with --weights");
ABSL_FLAG(lmf::RepeatedString, set, {},
          "overrides a field of --config, e.g. --set=model.n_layers=4; repeatable");
ABSL_FLAG(std::string, weights, "", "with --config: the model.safetensors to evaluate");
ABSL_FLAG(std::string, tokens, "", "a token file of the model's tokenizer");
ABSL_FLAG(std::optional<int64_t>, batch_size, std::nullopt,
          "sequences per forward; none: the run's run.batch_size");
ABSL_FLAG(std::optional<int64_t>, eval_tokens, std::nullopt,
          "tokens to score; none: the whole file, in whole batches of batch_size x context_length");

namespace lmf::experiments {
namespace {

constexpr char kUsage[] =
    "The loss and perplexity of a trained model on a token file.\n"
    "usage: eval (--checkpoint=DIR | --config=FILE [--set=...] --weights=FILE.safetensors) --tokens=FILE\n"
    "            [--batch_size=B] [--eval_tokens=N] [--device=cpu|cuda] [--cuda_device=N]\n"
    "            [--precision=fp32|bf16]";

absl::Status Run() {
  absl::StatusOr<ModelPlacement> placement = PlacementFromFlags();
  if (!placement.ok()) return placement.status();
  absl::StatusOr<LoadedModel> loaded;
  if (FlagGiven(FLAGS_checkpoint)) {
    loaded = LoadModelFromCheckpoint(UserPath(absl::GetFlag(FLAGS_checkpoint)), *placement);
  } else {
    const std::string config_path = absl::GetFlag(FLAGS_config);
    absl::StatusOr<std::string> text = ReadFile(UserPath(config_path));
    if (!text.ok()) return text.status();
    absl::StatusOr<config::Experiment> experiment =
        config::LoadExperimentText(*text, config_path, absl::GetFlag(FLAGS_set).values);
    if (!experiment.ok()) return experiment.status();
    config::MakePathsAbsolute(UserWorkingDirectory(), &*experiment);
    loaded = LoadModelFromWeights(*experiment, UserPath(absl::GetFlag(FLAGS_weights)), *placement);
  }
  if (!loaded.ok()) return loaded.status();
  for (const std::string& why : loaded->skipped_checkpoints) {
    std::fprintf(stderr, "eval: skipping damaged checkpoint: %s\n", why.c_str());
  }
  const config::Experiment& e = loaded->experiment;
  const std::optional<int64_t> batch_flag = absl::GetFlag(FLAGS_batch_size);  // at least 1 (ParseFlags)
  const int64_t batch = batch_flag.value_or(e.run().batch_size());
  TokenFileExpectations expect;
  expect.model_vocab_size = e.model().vocab_size();
  expect.batch_size = batch;
  expect.batch_size_source = batch_flag.has_value() ? "--batch_size" : "run.batch_size";
  expect.context_length = e.model().context_length();
  if (!e.data().tokenizer().empty() && FileExists(e.data().tokenizer())) {
    absl::StatusOr<tokenizer::Tokenizer> tok = tokenizer::LoadTokenizer(e.data().tokenizer());
    if (!tok.ok()) return tok.status();
    expect.tokenizer_hash = tok->Hash();
  }
  if (loaded->tokenizer_hash.has_value()) {  // what the model learned wins over a data.tokenizer file since
    expect.tokenizer_hash = *loaded->tokenizer_hash;
    expect.tokenizer_hash_source = "the model's training data (its checkpoint)";
  }
  const std::string tokens_path = UserPath(absl::GetFlag(FLAGS_tokens));
  absl::StatusOr<tokenizer::TokenFileReader> file = OpenTokenFile(tokens_path, expect);
  if (!file.ok()) return file.status();
  const int64_t available = static_cast<int64_t>(file->size()) - 1;
  const int64_t budget = absl::GetFlag(FLAGS_eval_tokens).value_or(available);  // at least 1
  absl::StatusOr<ValidationBatches> batches =
      ValidationBatches::Open(tokens_path, expect, std::min(budget, available));
  if (!batches.ok()) return batches.status();
  if (placement->device == config::RunConfig::CPU) {  // the forward's activations, with the model
    const model::ModelConfig& m = loaded->model->config();
    const model::ModelMemory need = model::CountModelMemory(m, loaded->model->activation_dtype(),
                                              batch * expect.context_length, /*training=*/false);
    if (absl::Status s = CheckFitsInMemory(need, 1, MemoryBytes(),
                                           absl::StrCat(expect.batch_size_source, "=", batch,
                                                        " x model.context_length=", expect.context_length,
                                                        " tokens per forward with ", loaded->weights_path));
        !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<double> loss = ValidationLoss(*loaded->model, *batches, batch, expect.context_length);
  if (!loss.ok()) return loss.status();
  if (!std::isfinite(*loss)) {
    return absl::DataLossError(absl::StrCat("the loss on ", tokens_path, " is ", *loss, " with the weights ",
                                            loaded->weights_path, " (finite weights; an overflow in ",
                                            loaded->device->name(), "'s arithmetic?)"));
  }
  const int64_t scored = batches->num_batches() * batch * expect.context_length;
  std::printf("%s\n", absl::StrFormat(
                          "loss %.4f | perplexity %.3f | %d tokens (%d batches of %d x %d) from %s | "
                          "weights %s | %s",
                          *loss, std::exp(*loss), scored, batches->num_batches(), batch,
                          expect.context_length, tokens_path, loaded->weights_path, loaded->device->name())
                          .c_str());
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  FlagsOptions flags;
  flags.usage_exit_code = 2;
  flags.value_exit_code = 1;
  flags.checks = {AtLeast(FLAGS_batch_size, 1), AtLeast(FLAGS_eval_tokens, 1)};
  ParseFlags(argc, argv, flags);
  // The two ways to name a model, whole and not mixed (--weights beside --checkpoint would be ignored).
  const bool checkpoint = FlagGiven(FLAGS_checkpoint);
  const bool mixed =
      checkpoint && (FlagGiven(FLAGS_config) || FlagGiven(FLAGS_weights) || FlagGiven(FLAGS_set));
  const bool config_and_weights = FlagGiven(FLAGS_config) && FlagGiven(FLAGS_weights);
  std::vector<std::string> problems;  // what is missing or mixed, by name
  if (mixed) {
    problems.push_back(
        "--checkpoint takes the model's config and weights from the run; it cannot be combined with "
        "--config, "
        "--weights or --set");
  }
  if (!FlagGiven(FLAGS_tokens)) {
    problems.push_back("--tokens=FILE (the token file to evaluate on) is required");
  }
  if (!mixed && !checkpoint && !config_and_weights) {
    problems.push_back("name the model: --checkpoint=DIR, or --config=FILE with --weights=FILE");
  }
  if (!problems.empty()) {
    for (size_t i = 0; i + 1 < problems.size(); ++i) std::fprintf(stderr, "eval: %s\n", problems[i].c_str());
    PrintUsageError(problems.back());
    return 2;
  }
  if (absl::Status s = Run(); !s.ok()) {
    std::fprintf(stderr, "eval: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace lmf::experiments

int main(int argc, char** argv) { return lmf::experiments::Main(argc, argv); }
