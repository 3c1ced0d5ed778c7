// The checks of a continuation (see continuation.h).
#include "experiments/trainer/continuation.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "config/loader.h"
#include "config/run_length.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/schedule/lr_schedule.h"

namespace lmf::experiments {

absl::Status CheckResumable(const config::Experiment& now, const config::Experiment& then,
                            const std::string& checkpoint_path, const std::string& how) {
  auto differs = [&](const std::string& field, const std::string& detail = "") {
    return absl::FailedPreconditionError(absl::StrCat("cannot ", how, checkpoint_path, ": ", field,
                                                      " differs from the checkpoint's config",
                                                      detail.empty() ? "" : absl::StrCat(" (", detail, ")")));
  };
  if (const std::string d = config::ConfigDifference(then.model(), now.model()); !d.empty())
    return differs("model", d);
  if (then.data().train_tokens() != now.data().train_tokens()) {
    return differs("data.train_tokens",
                   absl::StrCat(then.data().train_tokens(), " -> ", now.data().train_tokens()));
  }
  {
    config::DataConfig mixture_then, mixture_now;  // the mixtures alone (val_tokens and tokenizer may change)
    *mixture_then.mutable_train_mixture() = then.data().train_mixture();
    *mixture_now.mutable_train_mixture() = now.data().train_mixture();
    if (const std::string d = config::ConfigDifference(mixture_then, mixture_now); !d.empty()) {
      return differs("data.train_mixture", d);
    }
  }
  const auto changed = [](auto a, auto b) { return absl::StrCat(a, " -> ", b); };
  if (then.run().batch_size() != now.run().batch_size()) {
    return differs("run.batch_size", changed(then.run().batch_size(), now.run().batch_size()));
  }
  if (then.run().grad_accum_steps() != now.run().grad_accum_steps()) {
    return differs("run.grad_accum_steps",
                   changed(then.run().grad_accum_steps(), now.run().grad_accum_steps()));
  }
  if (then.run().seed() != now.run().seed())
    return differs("run.seed", changed(then.run().seed(), now.run().seed()));
  return absl::OkStatus();
}

absl::Status CheckBranch(const config::Experiment& now, const config::Experiment& then,
                         const std::string& checkpoint_path, int64_t branch_step) {
  config::OptimizerConfig optimizer_then = then.optimizer(), optimizer_now = now.optimizer();
  optimizer_then.clear_lr(), optimizer_now.clear_lr();  // the learning rates are compared step by step below
  if (const std::string d = config::ConfigDifference(optimizer_then, optimizer_now); !d.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot start from run.init_from=", checkpoint_path,
                                                      ": optimizer differs from the checkpoint's config (", d,
                                                      ")"));
  }
  const LrSchedule before(then.schedule(), then.optimizer().lr(), config::TotalSteps(then),
                          config::TokensPerStep(then));
  const LrSchedule after(now.schedule(), now.optimizer().lr(), config::TotalSteps(now),
                         config::TokensPerStep(now));
  const auto mismatch = [&](int64_t step, double took, const char* source) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cannot start from run.init_from=%s: its run took step %d at lr %.9g (%s), this config's schedule "
        "gives "
        "%.9g there; a branch must share the learning rates of the %d steps it takes over (schedule, "
        "optimizer.lr; with WSD, branch at or before this run's decay start)",
        checkpoint_path, step + 1, took, source, after.At(step), branch_step));
  };
  for (int64_t step = 0; step < branch_step; ++step) {
    if (before.At(step) != after.At(step)) return mismatch(step, before.At(step), "by its config");
  }
  // The rates its steps really took, where its run folder logged them: a run extended by --resume took its
  // earlier steps under its earlier, shorter schedule, which its final config no longer says.
  const std::string run_dir = std::filesystem::path(checkpoint_path).parent_path().parent_path().string();
  if (FileExists(run_dir + "/metrics.jsonl")) {
    absl::StatusOr<std::vector<StepMetrics>> logged = ReadMetricsLog(run_dir + "/metrics.jsonl");
    if (!logged.ok()) return logged.status();
    for (const StepMetrics& m : *logged) {
      if (m.step >= 1 && m.step <= branch_step && m.lr != after.At(m.step - 1)) {
        return mismatch(m.step - 1, m.lr, "by its metrics.jsonl");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckUpcycle(const config::Experiment& now, const config::Experiment& then,
                          const std::string& checkpoint_path) {
  const auto refuse = [&](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot upcycle run.init_from=", checkpoint_path, " (a dense model) into model.moe: ", what));
  };
  config::ModelConfig dense = then.model(), moe = now.model();
  dense.clear_feed_forward();
  moe.clear_feed_forward();
  if (const std::string d = config::ConfigDifference(dense, moe); !d.empty()) {
    return refuse(absl::StrCat("the models differ beyond the feed-forward (", d, ")"));
  }
  const config::FeedForwardConfig& ffn = then.model().ffn();
  const config::MoeConfig& m = now.model().moe();
  if (m.expert_kind() != ffn.kind() || m.d_expert() != ffn.d_ff()) {
    return refuse(absl::StrCat("each expert copies the dense FFN: model.moe.expert_kind=",
                               config::FeedForwardConfig::Kind_Name(m.expert_kind()), " and model.moe.d_expert=",
                               m.d_expert(), " must be its kind ", config::FeedForwardConfig::Kind_Name(ffn.kind()),
                               " and d_ff ", ffn.d_ff()));
  }
  if (m.first_k_dense() > 0) {
    if (const std::string d = config::ConfigDifference(ffn, m.dense_ffn()); !d.empty()) {
      return refuse(absl::StrCat("model.moe.dense_ffn must be the dense model's ffn (", d, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSameData(const checkpoint::TrainerState& state, const std::vector<uint32_t>& fingerprints,
                           const TrainBatchSampler& sampler, const std::string& what) {
  if (state.train_data_size() == 0) return absl::OkStatus();  // a checkpoint from before fingerprints
  if (static_cast<size_t>(state.train_data_size()) != fingerprints.size()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot ", what, ": its run read ",
                                                      state.train_data_size(),
                                                      " training files, this config ", fingerprints.size()));
  }
  for (size_t i = 0; i < fingerprints.size(); ++i) {
    const checkpoint::DataFingerprint& then = state.train_data(static_cast<int>(i));
    const uint64_t num_tokens = sampler.files()[i].size();
    if (then.num_tokens() != num_tokens || then.crc32c() != fingerprints[i]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot ", what, ": the training file ", sampler.files()[i].path(),
          " changed since the checkpoint (",
          then.num_tokens() != num_tokens
              ? absl::StrCat(then.num_tokens(), " tokens then, ", num_tokens, " now")
              : "the same length, other ids",
          "; the checkpoint's run read ", then.path(), "): the run would not continue on the same data"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lmf::experiments
