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
// --device=cpu|cuda (default cpu), --cuda_device=N (default 0) and --precision=fp32|bf16 (default fp32; bf16
// on cuda only) say where the model runs, opened as the trainer opens run.device (TrainingDevice).
#include <cmath>
#include <cstdio>
#include <string>

#include "absl/strings/str_format.h"
#include "base/file.h"
#include "config/loader.h"
#include "experiments/cli_args.h"
#include "experiments/data/token_batches.h"
#include "experiments/model_loading.h"
#include "experiments/trainer/memory_check.h"
#include "experiments/trainer/weights.h"
#include "model/accounting/training_memory.h"
#include "tokenizer/tokenizer_file.h"

namespace lmf::experiments {
namespace {

constexpr char kUsage[] =
    "usage: eval (--checkpoint=DIR | --config=FILE [--set=...] --weights=FILE.safetensors) --tokens=FILE\n"
    "            [--batch_size=B] [--eval_tokens=N] [--device=cpu|cuda] [--cuda_device=N]\n"
    "            [--precision=fp32|bf16]\n"
    "  --checkpoint    a run folder (its newest intact checkpoint) or one checkpoint's folder\n"
    "  --config, --weights  instead: a model config (with --set overrides) and its model.safetensors\n"
    "  --tokens        a token file of the model's tokenizer\n"
    "  --batch_size    sequences per forward; default: the run's run.batch_size\n"
    "  --eval_tokens   default: the whole file, in whole batches of batch_size x context_length\n"
    "  --device        default cpu; --cuda_device default 0; --precision default fp32 (bf16 needs cuda)\n";

absl::Status Run(const CliArgs& args) {
  absl::StatusOr<ModelPlacement> placement = ParsePlacementFlags(args);
  if (!placement.ok()) return placement.status();
  absl::StatusOr<LoadedModel> loaded;
  if (args.Has("checkpoint")) {
    loaded = LoadModelFromCheckpoint(UserPath(args.Get("checkpoint")), *placement);
  } else {
    absl::StatusOr<std::string> text = ReadFile(UserPath(args.Get("config")));
    if (!text.ok()) return text.status();
    absl::StatusOr<config::Experiment> experiment =
        config::LoadExperimentText(*text, args.Get("config"), args.GetAll("set"));
    if (!experiment.ok()) return experiment.status();
    config::MakePathsAbsolute(UserWorkingDirectory(), &*experiment);
    loaded = LoadModelFromWeights(*experiment, UserPath(args.Get("weights")), *placement);
  }
  if (!loaded.ok()) return loaded.status();
  for (const std::string& why : loaded->skipped_checkpoints) {
    std::fprintf(stderr, "eval: skipping damaged checkpoint: %s\n", why.c_str());
  }
  const config::Experiment& e = loaded->experiment;
  absl::StatusOr<int64_t> batch = args.GetInt("batch_size", e.run().batch_size(), 1);
  if (!batch.ok()) return batch.status();
  TokenFileExpectations expect;
  expect.model_vocab_size = e.model().vocab_size();
  expect.batch_size = *batch;
  expect.batch_size_source = args.Has("batch_size") ? "--batch_size" : "run.batch_size";
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
  const std::string tokens_path = UserPath(args.Get("tokens"));
  absl::StatusOr<tokenizer::TokenFileReader> file = OpenTokenFile(tokens_path, expect);
  if (!file.ok()) return file.status();
  const int64_t available = static_cast<int64_t>(file->size()) - 1;
  absl::StatusOr<int64_t> budget = args.GetInt("eval_tokens", available, 1);
  if (!budget.ok()) return budget.status();
  absl::StatusOr<ValidationBatches> batches =
      ValidationBatches::Open(tokens_path, expect, std::min(*budget, available));
  if (!batches.ok()) return batches.status();
  if (placement->device == config::RunConfig::CPU) {  // the forward's activations, with the model
    const model::ModelConfig& m = loaded->model->config();
    const model::ModelMemory need = model::CountModelMemory(m, loaded->model->activation_dtype(),
                                                            *batch * expect.context_length, /*training=*/false);
    if (absl::Status s = CheckFitsInMemory(need, 1, MemoryBytes(),
                                           absl::StrCat(expect.batch_size_source, "=", *batch,
                                                        " x model.context_length=", expect.context_length,
                                                        " tokens per forward with ", loaded->weights_path));
        !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<double> loss = ValidationLoss(*loaded->model, *batches, *batch, expect.context_length);
  if (!loss.ok()) return loss.status();
  if (!std::isfinite(*loss)) {
    return absl::DataLossError(absl::StrCat("the loss on ", tokens_path, " is ", *loss, " with the weights ",
                                            loaded->weights_path, " (finite weights; an overflow in ",
                                            loaded->device->name(), "'s arithmetic?)"));
  }
  const int64_t scored = batches->num_batches() * *batch * expect.context_length;
  std::printf("%s\n", absl::StrFormat(
                          "loss %.4f | perplexity %.3f | %d tokens (%d batches of %d x %d) from %s | "
                          "weights %s | %s",
                          *loss, std::exp(*loss), scored, batches->num_batches(), *batch,
                          expect.context_length, tokens_path, loaded->weights_path, loaded->device->name())
                          .c_str());
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::StatusOr<CliArgs> args =
      CliArgs::Parse(argc, argv,
                     {"checkpoint", "config", "set", "weights", "tokens", "batch_size", "eval_tokens",
                      "device", "cuda_device", "precision", "help"});
  if (PrintHelpIfAsked(args, kUsage)) return 0;
  // The two ways to name a model, whole and not mixed (--weights beside --checkpoint would be ignored).
  const bool mixed = args.ok() && args->Has("checkpoint") &&
                     (args->Has("config") || args->Has("weights") || args->Has("set"));
  const bool usable = args.ok() && args->Has("tokens") && !mixed &&
                      (args->Has("checkpoint") != (args->Has("config") && args->Has("weights")));
  if (!usable) {
    if (!args.ok()) std::fprintf(stderr, "eval: %s\n", std::string(args.status().message()).c_str());
    if (mixed)
      std::fprintf(stderr,
                   "eval: --checkpoint takes the model's config and weights from the run; it "
                   "cannot be combined with --config, --weights or --set\n");
    // What is missing, by name.
    if (args.ok()) {
      if (!args->Has("tokens")) std::fprintf(stderr, "eval: --tokens=FILE (the token file to evaluate on) is required\n");
      if (!mixed && !args->Has("checkpoint") && !(args->Has("config") && args->Has("weights"))) {
        std::fprintf(stderr, "eval: name the model: --checkpoint=DIR, or --config=FILE with --weights=FILE\n");
      }
    }
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  if (absl::Status s = Run(*args); !s.ok()) {
    std::fprintf(stderr, "eval: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace lmf::experiments

int main(int argc, char** argv) { return lmf::experiments::Main(argc, argv); }
