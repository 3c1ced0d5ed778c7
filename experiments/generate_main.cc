// `generate`: samples text from a trained model.
//
//   ./bazelw run //experiments:generate -- --checkpoint=runs/cs336_tinystories --prompt="Once upon a time"
//       [--tokenizer=FILE] [--max_tokens=256] [--temperature=0.8] [--top_p=0.95] [--seed=0]
//       [--num_samples=1] [--device=cpu|cuda] [--cuda_device=N] [--precision=fp32|bf16]
//   ... --prompt_file=prompts.txt   (instead of --prompt: one prompt per line, blank lines skipped; each
//       prompt's output after a "=== prompt i (line L) ===" line, exactly what --prompt=<that line> with the
//       same flags prints)
//
// The tokenizer defaults to the run's data.tokenizer. Generation stops at <|endoftext|> (when the
// tokenizer has it) or after --max_tokens. One sample's text streams to stdout as it is sampled;
// --num_samples=N (at most 256) draws N continuations of the prompt as one batch (GenerateSamples: sample i
// is what --seed=S+i alone gives) and prints each, after a "=== sample i (seed S+i) ===" line, once all are
// done. The model decodes with its KV cache (LanguageModel::Prefill / DecodeStep) where the placement flags
// say, as eval's do:
// --device=cpu|cuda (default cpu), --cuda_device=N (default 0), --precision=fp32|bf16 (default fp32), the
// device opened by the trainer's TrainingDevice (experiments/model_loading.h); its errors come back prefixed
// by the flags.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/flags.h"
#include "experiments/model_loading.h"
#include "experiments/placement_flags.h"
#include "experiments/sampling/sampling.h"
#include "tokenizer/tokenizer_file.h"

ABSL_FLAG(std::string, checkpoint, "",
          "a run folder (its newest intact checkpoint) or one checkpoint's folder");
ABSL_FLAG(std::string, prompt, "", "the text to continue");
ABSL_FLAG(std::string, prompt_file, "", "instead of --prompt: one prompt per line (blank lines skipped)");
ABSL_FLAG(std::string, tokenizer, "", "the model's tokenizer file; none: the run's data.tokenizer");
ABSL_FLAG(int64_t, max_tokens, 256,
          "new tokens per prompt (fewer where <|endoftext|> comes, if the tokenizer has it)");
ABSL_FLAG(double, temperature, 0.8, "sampling temperature; 0 is greedy");
ABSL_FLAG(double, top_p, 0.95, "nucleus sampling, in (0, 1]");
ABSL_FLAG(int64_t, seed, 0, "a non-negative integer");
ABSL_FLAG(int64_t, num_samples, 1, "continuations per prompt, drawn as one batch; at most 256");

namespace lmf::experiments {
namespace {

constexpr char kUsage[] =
    "Samples text from a trained model.\n"
    "usage: generate --checkpoint=DIR (--prompt=TEXT | --prompt_file=FILE) [--tokenizer=FILE] "
    "[--max_tokens=N]\n"
    "                [--temperature=T] [--top_p=P] [--seed=S] [--num_samples=N] [--device=cpu|cuda]\n"
    "                [--cuda_device=N] [--precision=fp32|bf16]";

constexpr int64_t kMaxSamples = 256;

// The value checks, run by ParseFlags (a failure exits 1 naming the flag).
std::vector<FlagCheck> Checks() {
  return {AtLeast(FLAGS_max_tokens, 1),
          Finite(FLAGS_temperature),
          AtLeast(FLAGS_temperature, 0.0),
          Finite(FLAGS_top_p),
          {"top_p", "a number in (0, 1]",
           [] { return absl::GetFlag(FLAGS_top_p) > 0 && absl::GetFlag(FLAGS_top_p) <= 1; }},
          AtLeast(FLAGS_seed, 0),
          AtLeast(FLAGS_num_samples, 1),
          AtMost(FLAGS_num_samples, kMaxSamples, "the samples are one batch of the KV cache")};
}

// A prompt and the line of --prompt_file it came from (0 for --prompt).
struct Prompt {
  std::string text;
  int64_t line = 0;
};

// --prompt, or --prompt_file's non-blank lines (a trailing \r dropped): InvalidArgument naming the file for
// one that cannot be read or holds no prompt.
absl::StatusOr<std::vector<Prompt>> ReadPrompts() {
  if (!FlagGiven(FLAGS_prompt_file)) return std::vector<Prompt>{{absl::GetFlag(FLAGS_prompt), 0}};
  const std::string path = UserPath(absl::GetFlag(FLAGS_prompt_file));
  absl::StatusOr<std::string> text = ReadFile(path);  // its errors name the path and why (missing, a folder)
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--prompt_file=", text.status().message()));
  }
  std::vector<Prompt> prompts;
  int64_t number = 0;
  for (absl::string_view view : absl::StrSplit(*text, '\n')) {
    ++number;
    std::string line(view);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) prompts.push_back({line, number});
  }
  if (prompts.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prompt_file=", path, ": no prompt in it (one per line; blank lines are skipped)"));
  }
  return prompts;
}

// --num_samples > 1: every sample, prompt first, after a line naming it and its seed.
absl::Status PrintSamples(model::LanguageModel& model, const tokenizer::Tokenizer& tok,
                          const std::string& prompt, const std::vector<int32_t>& ids,
                          const GenerateOptions& options, int64_t num_samples) {
  absl::StatusOr<std::vector<std::vector<int32_t>>> samples =
      GenerateSamples(model, ids, options, num_samples, nullptr);
  if (!samples.ok()) return samples.status();
  for (size_t i = 0; i < samples->size(); ++i) {
    const std::vector<uint32_t> sample((*samples)[i].begin(), (*samples)[i].end());
    absl::StatusOr<std::string> text = tok.DecodeBytes(sample);
    if (!text.ok()) return text.status();
    std::printf("=== sample %zu (seed %llu) ===\n", i,
                static_cast<unsigned long long>(options.sampling.seed + i));
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fwrite(text->data(), 1, text->size(), stdout);
    std::printf("\n");
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

// One prompt's output: its samples (PrintSamples) or, for one, the text streamed as it is sampled.
absl::Status GenerateFor(model::LanguageModel& model, const tokenizer::Tokenizer& tok, const Prompt& prompt,
                         const GenerateOptions& options, int64_t num_samples) {
  std::vector<int32_t> ids;
  for (uint32_t id : tok.Encode(prompt.text)) ids.push_back(static_cast<int32_t>(id));
  if (ids.empty()) return absl::InvalidArgumentError("--prompt is empty");
  if (num_samples > 1) return PrintSamples(model, tok, prompt.text, ids, options, num_samples);
  std::fwrite(prompt.text.data(), 1, prompt.text.size(), stdout);
  std::fflush(stdout);
  absl::Status print_status;
  absl::StatusOr<std::vector<int32_t>> generated = Generate(model, ids, options, [&](int32_t id) {
    absl::StatusOr<std::string> bytes = tok.DecodeBytes({static_cast<uint32_t>(id)});
    if (!bytes.ok()) {
      print_status = bytes.status();
      return;
    }
    std::fwrite(bytes->data(), 1, bytes->size(), stdout);
    std::fflush(stdout);
  });
  std::printf("\n");
  if (!generated.ok()) return generated.status();
  return print_status;
}

absl::Status Run() {
  absl::StatusOr<std::vector<Prompt>> prompts = ReadPrompts();  // before the model: a bad file fails fast
  if (!prompts.ok()) return prompts.status();
  absl::StatusOr<ModelPlacement> placement = PlacementFromFlags();
  if (!placement.ok()) return placement.status();
  absl::StatusOr<LoadedModel> loaded =
      LoadModelFromCheckpoint(UserPath(absl::GetFlag(FLAGS_checkpoint)), *placement);
  if (!loaded.ok()) return loaded.status();
  for (const std::string& why : loaded->skipped_checkpoints) {
    std::fprintf(stderr, "generate: skipping damaged checkpoint: %s\n", why.c_str());
  }
  if (!loaded->skipped_checkpoints.empty()) {
    std::fprintf(stderr, "generate: weights %s\n", loaded->weights_path.c_str());
  }
  const bool tokenizer_given = FlagGiven(FLAGS_tokenizer);
  const std::string tokenizer_path =
      tokenizer_given ? UserPath(absl::GetFlag(FLAGS_tokenizer)) : loaded->experiment.data().tokenizer();
  if (tokenizer_path.empty()) {
    return absl::InvalidArgumentError(
        tokenizer_given ? "--tokenizer= is empty: give a tokenizer file, or leave the flag out "
                          "for the run's data.tokenizer"
                        : "the run names no data.tokenizer; pass --tokenizer=FILE");
  }
  absl::StatusOr<tokenizer::Tokenizer> tok = tokenizer::LoadTokenizer(tokenizer_path);
  if (!tok.ok() && !tokenizer_given) {  // say where the path came from and what to do
    return absl::Status(
        tok.status().code(),
        absl::StrCat("the run's data.tokenizer=", tokenizer_path, ": ", tok.status().message(),
                     "; pass the tokenizer the model was trained with as --tokenizer=FILE"));
  }
  if (!tok.ok()) return tok.status();
  if (static_cast<int64_t>(tok->vocab_size()) > loaded->experiment.model().vocab_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(tokenizer_path, ": vocab_size=", tok->vocab_size(),
                     " exceeds the model's vocab_size=", loaded->experiment.model().vocab_size()));
  }
  if (loaded->tokenizer_hash.has_value() && tok->Hash() != *loaded->tokenizer_hash) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: tokenizer hash %016x, but the model was trained on token ids of the tokenizer with hash %016x "
        "(its checkpoint); its text would be nonsense: pass that tokenizer with --tokenizer",
        tokenizer_path, tok->Hash(), *loaded->tokenizer_hash));
  }
  GenerateOptions options;  // the flags' values passed Checks()
  options.max_new_tokens = absl::GetFlag(FLAGS_max_tokens);
  options.vocab_limit = tok->vocab_size();  // ids past the tokenizer's vocabulary cannot be decoded
  options.sampling.temperature = absl::GetFlag(FLAGS_temperature);
  options.sampling.top_p = absl::GetFlag(FLAGS_top_p);
  options.sampling.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  const int64_t end_of_text = tok->SpecialId("<|endoftext|>");
  if (end_of_text >= 0) options.stop_token = static_cast<int32_t>(end_of_text);

  for (size_t i = 0; i < prompts->size(); ++i) {
    const Prompt& prompt = (*prompts)[i];
    if (prompt.line > 0)
      std::printf("=== prompt %zu (line %lld) ===\n", i, static_cast<long long>(prompt.line));
    if (absl::Status s = GenerateFor(*loaded->model, *tok, prompt, options, absl::GetFlag(FLAGS_num_samples));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  FlagsOptions flags;
  flags.usage_exit_code = 2;
  flags.value_exit_code = 1;
  flags.checks = Checks();
  ParseFlags(argc, argv, flags);
  const char* problem = nullptr;
  if (!FlagGiven(FLAGS_checkpoint)) {
    problem = "--checkpoint=DIR (the run or checkpoint to sample from) is required";
  } else if (FlagGiven(FLAGS_prompt) == FlagGiven(FLAGS_prompt_file)) {
    problem = FlagGiven(FLAGS_prompt) ? "--prompt and --prompt_file: give one of them"
                                      : "give --prompt=TEXT or --prompt_file=FILE";
  }
  if (problem != nullptr) {
    PrintUsageError(problem);
    return 2;
  }
  if (absl::Status s = Run(); !s.ok()) {
    std::fprintf(stderr, "generate: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace lmf::experiments

int main(int argc, char** argv) { return lmf::experiments::Main(argc, argv); }
