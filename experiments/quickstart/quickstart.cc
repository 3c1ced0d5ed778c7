// The quickstart's stages (see quickstart.h). Each stage checks whether its output already exists and
// matches (a stamp for the corpus, the tokenizer's hash in the token files), so reruns are cheap.
#include "experiments/quickstart/quickstart.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "config/loader.h"
#include "experiments/crc32c/crc32c.h"
#include "experiments/quickstart/debian_docs.h"
#include "experiments/sweep/data_check.h"
#include "experiments/sweep/plan.h"
#include "experiments/sweep/runner.h"
#include "experiments/sweep/sweep_report.h"
#include "experiments/sweep/train_run.h"
#include "experiments/synthetic_corpus/story_generator.h"
#include "google/protobuf/text_format.h"
#include "tokenizer/bpe_train.h"
#include "tokenizer/encode_file.h"
#include "tokenizer/token_file.h"
#include "tokenizer/tokenizer_file.h"

namespace lmf::quickstart {
namespace {

constexpr char kEndOfText[] = "<|endoftext|>";

// What the corpus is made from: the synthetic corpus's seed and size, or each text file's path, size and
// CRC-32C (its contents: an edit that keeps the size is seen, while a touch, copy or checkout of the same
// text is not a change; a few seconds per GB of --data at each start). `legacy` gets the stamp the quickstart
// wrote before it hashed the text (paths and sizes), which an existing folder may hold.
absl::StatusOr<std::string> CorpusStamp(const QuickstartOptions& o, std::string* legacy) {
  std::string stamp = o.data.empty()
                          ? absl::StrFormat("synthetic stories: seed %d, %d bytes\n", o.seed, o.corpus_bytes)
                          : absl::StrCat("text files: ", absl::StrJoin(o.data, ", "), "\n");
  *legacy = stamp;
  for (const std::string& f : o.data) {
    absl::StatusOr<MappedFile> text = MappedFile::Open(f);
    if (!text.ok()) return absl::NotFoundError(absl::StrCat("--data: ", text.status().message()));
    absl::StrAppendFormat(&stamp, "%s %d bytes, CRC-32C %08x\n", f, text->size(),
                          experiments::Crc32c(text->view()));
    absl::StrAppendFormat(legacy, "%s %d bytes\n", f, text->size());
  }
  return stamp;
}

// Writes train.txt and val.txt: the synthetic corpus (two seeds), or the user's files with the last ~2%
// of each (cut at a line break) held out for validation.
absl::Status WriteCorpus(const QuickstartOptions& o, const std::string& train, const std::string& val) {
  if (o.data.empty()) {
    corpus::StoryCorpusOptions opts;
    opts.seed = o.seed;
    opts.target_bytes = o.corpus_bytes;
    if (auto s = corpus::WriteStoryCorpus(train, opts); !s.ok()) return s.status();
    opts.seed = o.seed + 1000003;  // a different stream of stories for validation
    opts.target_bytes = std::max<uint64_t>(o.corpus_bytes / 32, 256 << 10);
    if (auto s = corpus::WriteStoryCorpus(val, opts); !s.ok()) return s.status();
    return absl::OkStatus();
  }
  auto train_out = AtomicFileWriter::Create(train);
  if (!train_out.ok()) return train_out.status();
  auto val_out = AtomicFileWriter::Create(val);
  if (!val_out.ok()) return val_out.status();
  for (const std::string& f : o.data) {
    auto text = MappedFile::Open(f);
    if (!text.ok()) return absl::NotFoundError(absl::StrCat("--data: ", text.status().message()));
    std::string_view all = text->view();
    if (all.size() < 1024) {
      return absl::InvalidArgumentError(
          absl::StrCat("--data: ", f, " has ", all.size(), " bytes; need at least 1 KiB of text per file"));
    }
    size_t cut = all.size() - all.size() / 50;
    const size_t newline = all.find('\n', cut);
    if (newline != std::string_view::npos && newline + 1 < all.size()) cut = newline + 1;
    if (absl::Status s = train_out->Write(all.substr(0, cut)); !s.ok()) return s;
    if (absl::Status s = train_out->Write(absl::StrCat("\n", kEndOfText, "\n")); !s.ok()) return s;
    if (absl::Status s = val_out->Write(all.substr(cut)); !s.ok()) return s;
    if (absl::Status s = val_out->Write(absl::StrCat("\n", kEndOfText, "\n")); !s.ok()) return s;
  }
  if (absl::Status s = train_out->Commit(); !s.ok()) return s;
  return val_out->Commit();
}

absl::StatusOr<tokenizer::Tokenizer> MakeTokenizer(const QuickstartOptions& o, const std::string& train,
                                                   const std::string& path, bool corpus_changed) {
  if (!corpus_changed && FileExists(path)) {
    auto existing = tokenizer::LoadTokenizer(path);
    if (existing.ok() && existing->vocab_size() == static_cast<uint32_t>(o.vocab_size)) return existing;
  }
  tokenizer::TrainOptions opts;
  opts.vocab_size = static_cast<uint32_t>(o.vocab_size);
  opts.special_tokens = {kEndOfText};
  auto trained = tokenizer::TrainBpeOnFiles({train}, opts);
  if (!trained.ok()) return trained.status();
  if (absl::Status s = tokenizer::SaveTokenizer(*trained, path); !s.ok()) return s;
  return trained;
}

absl::StatusOr<uint64_t> MakeTokens(const tokenizer::Tokenizer& tok, const std::string& text,
                                    const std::string& tokens) {
  auto existing = tokenizer::TokenFileReader::Open(tokens);
  if (existing.ok() && existing->header().tokenizer_hash == tok.Hash()) return existing->size();
  auto stats = tokenizer::EncodeFilesToTokenFile(tok, {text}, tokens, {});
  if (!stats.ok()) return stats.status();
  return stats->tokens;
}

}  // namespace

absl::StatusOr<bool> PrepareCorpus(const QuickstartOptions& o,
                                   const std::function<void(const std::string&)>& say) {
  const std::string data_dir = o.out_dir + "/data";
  const std::string train = data_dir + "/train.txt", val = data_dir + "/val.txt";
  const std::string stamp_path = data_dir + "/corpus.stamp";
  std::string legacy;
  absl::StatusOr<std::string> stamp = CorpusStamp(o, &legacy);  // reads --data: a missing file fails here
  if (!stamp.ok()) return stamp.status();
  if (absl::Status s = MakeDirs(data_dir); !s.ok()) return s;
  const absl::StatusOr<std::string> old = ReadFile(stamp_path);
  // The same corpus (a folder stamped before the text was hashed is taken to be: what it was checked by
  // then): only the text files are made again if they were deleted, the same bytes as before.
  if (old.ok() && (*old == *stamp || *old == legacy)) {
    if (!FileExists(train) || !FileExists(val)) {
      if (absl::Status s = WriteCorpus(o, train, val); !s.ok()) return s;
    }
    if (*old != *stamp) {
      if (absl::Status s = WriteFileAtomically(stamp_path, *stamp); !s.ok()) return s;
    }
    return false;
  }

  // Everything made from an earlier corpus goes before the new one is written, so that a start killed at
  // any point finds either the old corpus's stamp (and redoes this) or the new one with nothing stale after
  // it: the sweep's runs move aside (kept: they were real), the tokenizer and token files are deleted.
  const std::string sweep_dir = o.out_dir + "/sweep";
  if (FileExists(sweep_dir)) {
    std::string aside;
    for (int n = 1; aside.empty() || FileExists(aside); ++n)
      aside = absl::StrCat(sweep_dir, ".superseded-", n);
    if (::rename(sweep_dir.c_str(), aside.c_str()) != 0) {
      return absl::InternalError(
          absl::StrCat("cannot move ", sweep_dir, " to ", aside, ": ", std::strerror(errno)));
    }
    say(absl::StrCat("      the corpus changed since the sweep in ", sweep_dir,
                     " trained on it: that sweep moved to ", aside, "; every run trains again"));
  }
  for (const std::string& path :
       {o.out_dir + "/tokenizer.lmftok", data_dir + "/train.tok", data_dir + "/val.tok"}) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return absl::InternalError(absl::StrCat("cannot delete ", path, ": ", std::strerror(errno)));
    }
  }
  if (absl::Status s = WriteCorpus(o, train, val); !s.ok()) return s;
  if (absl::Status s = WriteFileAtomically(stamp_path, *stamp); !s.ok()) return s;
  return true;
}

// The validation tokens each evaluation of a quickstart run reads.
constexpr int kQuickstartEvalTokens = 16384;

config::Sweep QuickstartSweep(const QuickstartOptions& o, const std::string& train_tokens,
                              const std::string& val_tokens, const std::string& tokenizer) {
  // Small Llama-style models (RMSNorm, SwiGLU, RoPE), 64-token context, 16 sequences a step. The time
  // estimate's 3.5e10 FLOP/s per run is a little under what the default design's runs averaged on a 2-core
  // machine, two at a time (1.225e13 FLOP in 318 run-seconds: 3.85e10, 2026-12-01).
  const std::string text = absl::StrFormat(
      R"pb(
        name: "quickstart"
        output_dir: "%s/sweep"
        parallel_runs: %d
        evals_per_run: 6
        estimate_flops_per_second: 3.5e10
        target_flops: %g
        experiment {
          name: "quickstart"
          model {
            vocab_size: %d
            context_length: 64
            d_model: 64
            n_layers: 2
            n_heads: 8
            norm { kind: RMSNORM }
            ffn { kind: SWIGLU d_ff: 176 }
            positional { kind: ROPE rope_theta: 10000 }
            init { scheme: TRUNCATED_NORMAL }
          }
          optimizer {
            lr: 4e-3
            adamw { beta1: 0.9 beta2: 0.95 weight_decay: 0.1 }
            grad_clip: 1.0
          }
          schedule { kind: COSINE warmup: 10 min_lr_ratio: 0.1 }
          data { train_tokens: "%s" val_tokens: "%s" tokenizer: "%s" }
          run { batch_size: 16 max_steps: 100 eval_tokens: %d seed: %d output_dir: "unused" }
          logging { log_interval: 50 }
        }
        isoflop {
          family {
            aspect_ratio: 16
            head_size: 8
            min_layers: 1
            max_layers: 8
            aspect_spread: 1.5
            ffn_ratio: 2.75
          }
          models_per_budget: %d
          min_tokens_per_param: 2
          max_tokens_per_param: 250
          min_steps: 40
        }
      )pb",
      o.out_dir, o.parallel_runs, o.target_flops, o.vocab_size, train_tokens, val_tokens, tokenizer,
      kQuickstartEvalTokens, o.seed, o.models_per_budget);
  config::Sweep sweep;
  google::protobuf::TextFormat::ParseFromString(text, &sweep);  // a fixed template: always parses
  for (double b : o.budgets) sweep.mutable_isoflop()->add_budgets(b);
  if (o.recipe) {
    // A 5 x 5 grid of batch size x lr around each budget's expected optimum: per micro-batch 1 to 16
    // sequences in steps of 2, 2 micro-batches a step, and lr from 1/4 to 4 times the budget's expected
    // lr_opt in steps of 2. A fixed lr axis cannot hold every budget's optimum: a pilot sweep of this design
    // (lr 4e-3 to 6.4e-2 at every budget) had its best lr fall 8x over the 4 budgets (6.4e-2, 1.6e-2, 8e-3,
    // 8e-3), the smallest budget's optimum past the axis's end. Its fit, lr_opt ~ 1.6e-2 (C / 4e11)^-0.77,
    // is the prior that moves the lr axis with the budget (grid_lr_prior). The batch axis spans 2 to 32
    // sequences a step: with 4 to 16 one budget's optimum fell at its end (docs/benchmarks.md). The other
    // models train at 4 x 2 and lr 2.4e-2. The losses spread by tens of percent over the grid: the report
    // fits each grid within 15% of its best.
    google::protobuf::TextFormat::MergeFromString(R"pb(
      point_grid {
        axis { field: "run.batch_size" values: [ "1", "2", "4", "8", "16" ] }
        axis { field: "optimizer.lr" values: [ "4e-3", "8e-3", "1.6e-2", "3.2e-2", "6.4e-2" ] }
      }
      grid_models: NEAR_TOKENS_PER_PARAM
      grid_tokens_per_param: 20
      grid_fit_window: 0.15
      grid_lr_prior { exponent: -0.77 reference_flops: 4e11 }
    )pb", sweep.mutable_isoflop());  // a fixed template: always parses
    sweep.mutable_experiment()->mutable_run()->set_batch_size(4);
    sweep.mutable_experiment()->mutable_run()->set_grad_accum_steps(2);
    sweep.mutable_experiment()->mutable_optimizer()->set_lr(2.4e-2);
  }
  if (o.wsd) {
    // Warmup-stable-decay, each model size's stable phase trained once for all its budgets.
    sweep.mutable_experiment()->mutable_schedule()->set_kind(config::ScheduleConfig::WSD);
    sweep.set_wsd_branches(true);
    sweep.mutable_isoflop()->set_shared_sizes(true);
  }
  return sweep;
}

namespace {

// --data=debian-docs: builds the corpus file and makes `o` name it (its data note says where it came from).
absl::Status ResolveDebianDocs(QuickstartOptions* o, std::string* data_note,
                               const std::function<void(const std::string&)>& say) {
  if (std::find(o->data.begin(), o->data.end(), kDebianDocsData) == o->data.end()) return absl::OkStatus();
  if (o->data.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--data=", kDebianDocsData,
                                                   " stands alone: it cannot be mixed with text files"));
  }
  DocsCorpusOptions docs;
  docs.root = o->docs_root;
  docs.max_bytes = o->corpus_bytes;
  docs.min_bytes = std::min<uint64_t>(docs.min_bytes, o->corpus_bytes);
  const std::string path = o->out_dir + "/data/debian-docs.txt";
  if (absl::Status s = MakeDirs(o->out_dir + "/data"); !s.ok()) return s;
  absl::StatusOr<DocsCorpus> corpus = WriteDebianDocsCorpus(docs, path);
  if (!corpus.ok()) return corpus.status();
  *data_note = absl::StrFormat("Real English: the plain-text documentation of the Debian packages installed "
                               "under %s (%d files, %.1f MB; READMEs, manuals, release notes, with some code "
                               "and lists).", docs.root, corpus->files, corpus->bytes / 1e6);
  say(absl::StrFormat("      debian-docs: %d files of %s (%.1f MB) -> %s", corpus->files, docs.root,
                      corpus->bytes / 1e6, path));
  o->data = {path};
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<QuickstartResult> RunQuickstart(const QuickstartOptions& options) {
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  QuickstartOptions o = options;
  std::string docs_note;
  if (absl::Status s = ResolveDebianDocs(&o, &docs_note, say); !s.ok()) return s;
  if (o.vocab_size < 258) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--vocab_size=", o.vocab_size, ": needs at least 256 byte tokens + <|endoftext|> + 1 merge"));
  }
  if (o.budgets.empty()) return absl::InvalidArgumentError("--budgets is empty");
  const std::string data_dir = o.out_dir + "/data";
  const std::string train_txt = data_dir + "/train.txt", val_txt = data_dir + "/val.txt";

  say(o.data.empty() ? absl::StrFormat("[1/5] corpus: synthetic stories (%.1f MB, seed %d) -> %s",
                                       o.corpus_bytes / 1e6, o.seed, data_dir)
                     : absl::StrCat("[1/5] corpus: ", absl::StrJoin(o.data, ", "), " -> ", data_dir));
  absl::StatusOr<bool> corpus_changed = PrepareCorpus(o, say);
  if (!corpus_changed.ok()) return corpus_changed.status();

  const std::string tok_path = o.out_dir + "/tokenizer.lmftok";
  say(absl::StrFormat("[2/5] tokenizer: byte-level BPE, vocab %d -> %s", o.vocab_size, tok_path));
  auto tok = MakeTokenizer(o, train_txt, tok_path, *corpus_changed);
  if (!tok.ok()) return tok.status();

  const std::string train_tok = data_dir + "/train.tok", val_tok = data_dir + "/val.tok";
  auto train_count = MakeTokens(*tok, train_txt, train_tok);
  if (!train_count.ok()) return train_count.status();
  auto val_count = MakeTokens(*tok, val_txt, val_tok);
  if (!val_count.ok()) return val_count.status();
  say(absl::StrFormat("[3/5] token files: %d train and %d validation tokens", *train_count, *val_count));

  const config::Sweep sweep = QuickstartSweep(o, train_tok, val_tok, tok_path);
  std::string sweep_text;
  google::protobuf::TextFormat::PrintToString(sweep, &sweep_text);
  const std::string sweep_path = o.out_dir + "/sweep.textproto";
  if (absl::Status s = WriteFileAtomically(
          sweep_path, absl::StrCat("# Written by //experiments:quickstart; rerun with\n#   ./bazelw run "
                                   "//experiments:sweep -- --sweep=",
                                   sweep_path, "\n", sweep_text));
      !s.ok()) {
    return s;
  }
  auto plan = sweep::PlanSweep(sweep, sweep_path, o.out_dir, sweep::SizeOfModel);
  if (!plan.ok()) return plan.status();
  if (absl::Status s = sweep::CheckRunsCanReadTheirData(*plan); !s.ok()) {
    if (o.data.empty()) return s;
    // The trainer's message names config fields the quickstart sets itself: say what to change here. The
    // validation text is the last ~2% of each file, and an evaluation reads kQuickstartEvalTokens of it.
    std::string more;
    const absl::StatusOr<uint64_t> val_bytes = FileSize(val_txt);
    if (val_bytes.ok() && *val_count > 0) {
      const double bytes_per_token = static_cast<double>(*val_bytes) / static_cast<double>(*val_count);
      more = absl::StrFormat(
          " The quickstart holds out the last ~2%% of each --data file for validation and evaluates on %d "
          "tokens of it: at %.2g bytes per token that needs about %.2g MB of text in all (give more text, or "
          "run //experiments:sweep on the quickstart's sweep.textproto with a smaller run.eval_tokens).",
          kQuickstartEvalTokens, bytes_per_token, (kQuickstartEvalTokens + 1) * bytes_per_token / 0.02 / 1e6);
    }
    return absl::Status(s.code(), absl::StrCat("--data: too little text for the sweep's runs: ", s.message(), more));
  }
  say(absl::StrCat("[4/5] IsoFLOP sweep (", sweep_path, "):\n", sweep::FormatPlan(*plan)));
  sweep::RunnerOptions runner;
  runner.command = o.train_command;
  runner.threads_per_run =
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / o.parallel_runs);
  runner.progress = say;
  runner.restarted_by = "the quickstart";
  const std::string report_dir = plan->output_dir + "/report";
  // The report, written before RunSweep releases the sweep folder's lock.
  runner.finish = [&](const sweep::SweepSummary& summary) -> absl::Status {
    say(absl::StrFormat("[5/5] fits and report -> %s", report_dir));
    const std::string data_note =
        o.data.empty() ? absl::StrFormat(
                             "SYNTHETIC data: the built-in generator of simple English stories (seed %d, "
                             "%.1f MB). Fits on it show the method, not the scaling of natural language.",
                             o.seed, o.corpus_bytes / 1e6)
                       : !docs_note.empty() ? docs_note
                                            : absl::StrCat("Text files: ", absl::StrJoin(o.data, ", "));
    return sweep::WriteSweepReport(*plan, summary.results_path, data_note, sweep::SizeOfModel).status();
  };
  auto summary = sweep::RunSweep(*plan, runner);
  if (!summary.ok()) return summary.status();

  QuickstartResult result;
  result.results_csv = summary->results_path;
  result.report = report_dir + "/report.md";
  result.finished_runs = summary->finished;
  result.failed_runs = summary->failed + summary->diverged;
  return result;
}

}  // namespace lmf::quickstart
