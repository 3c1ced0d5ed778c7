// Experiment accounting (see account.h). The matmul list mirrors what model/language_model runs; the test
// checks its sum against model/accounting's exact count and both against a built model's counters.
#include "scaling/accounting/account.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/model_conversion.h"
#include "config/run_length.h"

namespace lmf::scaling {
namespace {

std::vector<MatmulCost> ForwardMatmuls(const model::ModelConfig& m, int64_t batch, int64_t seq_len) {
  const int64_t tokens = batch * seq_len;
  const int64_t layers = m.n_layers;
  std::vector<MatmulCost> out = {
      {"attention.q", tokens, m.d_model, m.q_width(), layers},
      {"attention.k", tokens, m.d_model, m.kv_width(), layers},
      {"attention.v", tokens, m.d_model, m.kv_width(), layers},
      {"attention.out", tokens, m.q_width(), m.d_model, layers},
  };
  // The dense feed-forward of the layers that have one (all, or a mixture of experts' first_k_dense).
  const int64_t dense = m.moe.has_value() ? m.first_k_dense : layers;
  if (dense > 0 && m.gated_ffn()) {
    out.push_back({"ffn.gate (w1)", tokens, m.d_model, m.d_ff, dense});
    out.push_back({"ffn.up (w3)", tokens, m.d_model, m.d_ff, dense});
  } else if (dense > 0) {
    out.push_back({"ffn.up (w1)", tokens, m.d_model, m.d_ff, dense});
  }
  if (dense > 0) out.push_back({"ffn.down (w2)", tokens, m.d_ff, m.d_model, dense});
  if (m.moe.has_value() && layers > dense) {
    // The router, and each expert's GEMMs over its share of the tokens (balanced: tokens * top_k / E rows).
    const model::MoeSpec& e = *m.moe;
    const int64_t moe_layers = layers - dense, rows = tokens * e.top_k / e.n_experts;
    out.push_back({"moe.router", tokens, m.d_model, e.n_experts, moe_layers});
    out.push_back({"moe.expert.w1 (+w3)", rows, m.d_model, (e.gated_experts() ? 2 : 1) * e.d_expert,
                   moe_layers * e.n_experts});
    out.push_back({"moe.expert.w2", rows, e.d_expert, m.d_model, moe_layers * e.n_experts});
    if (e.shared_d_ff > 0) {
      out.push_back({"moe.shared.w1 (+w3)", tokens, m.d_model, (e.gated_experts() ? 2 : 1) * e.shared_d_ff, moe_layers});
      out.push_back({"moe.shared.w2", tokens, e.shared_d_ff, m.d_model, moe_layers});
    }
  }
  out.push_back({"lm_head", tokens, m.d_model, m.vocab_size, 1});
  return out;
}

std::string Human(double x, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P", "E"};
  int i = 0;
  while (x >= 1000 && i < 6) x /= 1000, ++i;
  return absl::StrFormat("%.3g %s%s", x, prefixes[i], unit);
}

std::string Bytes(double x) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (x >= 1024 && i < 4) x /= 1024, ++i;
  return absl::StrFormat("%.3g %s", x, units[i]);
}

}  // namespace

absl::StatusOr<ExperimentAccount> AccountExperiment(const config::Experiment& experiment) {
  auto model_config = config::ToModelConfig(experiment.model());
  if (!model_config.ok()) return model_config.status();
  ExperimentAccount a;
  a.model = *model_config;
  a.seq_len = a.model.context_length;
  a.params = model::CountParameters(a.model);
  const double n = static_cast<double>(a.params.active());  // a mixture of experts: the parameters a token uses
  a.flops_per_token_6n = 6 * n;
  a.flops_per_token_6n_attention =
      6 * n + 6.0 * static_cast<double>(a.model.n_layers) * static_cast<double>(a.seq_len) * a.model.d_model;
  a.exact = model::CountFlopsPerToken(a.model, a.seq_len);
  const auto& run = experiment.run();
  const int64_t batch = run.batch_size();
  a.tokens_per_step = config::TokensPerStep(experiment);
  a.steps = config::TotalSteps(experiment);
  a.total_tokens = static_cast<double>(a.steps) * static_cast<double>(a.tokens_per_step);
  a.total_flops = a.total_tokens * a.exact.training();

  const kernels::DType activations =
      run.precision() == config::RunConfig::BF16 ? kernels::DType::kBF16 : kernels::DType::kF32;
  a.memory = model::CountModelMemory(a.model, activations, batch * a.seq_len, /*training=*/true);
  a.matmuls = ForwardMatmuls(a.model, batch, a.seq_len);
  return a;
}

double Mfu(const ExperimentAccount& account, double tokens_per_second, double peak_flops) {
  if (!(peak_flops > 0)) return 0;
  return tokens_per_second * account.exact.training() / peak_flops;
}

std::string FormatAccount(const ExperimentAccount& a, double tokens_per_second, double peak_flops) {
  std::string out;
  absl::StrAppendFormat(&out, "model: %s\n\n", a.model.DebugString());
  absl::StrAppendFormat(&out, "parameters\n");
  absl::StrAppendFormat(&out, "  %-28s %14d\n", "token embedding", a.params.token_embedding);
  if (a.params.position_embedding > 0) {
    absl::StrAppendFormat(&out, "  %-28s %14d\n", "position embedding", a.params.position_embedding);
  }
  absl::StrAppendFormat(&out, "  %-28s %14d\n", "blocks", a.params.blocks);
  absl::StrAppendFormat(&out, "  %-28s %14d\n", "final norm", a.params.final_norm);
  absl::StrAppendFormat(&out, "  %-28s %14d%s\n", "lm head", a.params.lm_head,
                        a.model.tied_embeddings ? " (tied)" : "");
  absl::StrAppendFormat(&out, "  %-28s %14d (%s)\n", "total N", a.params.total(), Human(a.params.total(), ""));
  absl::StrAppendFormat(&out, "  %-28s %14d (%s)\n", "non-embedding N", a.params.non_embedding(),
                        Human(a.params.non_embedding(), ""));
  if (a.params.inactive_experts > 0) {
    absl::StrAppendFormat(&out, "  %-28s %14d (%s)\n", "active N (per token)", a.params.active(),
                          Human(a.params.active(), ""));
    absl::StrAppendFormat(&out, "  %-28s %14d (%s)\n", "active non-embedding N", a.params.active_non_embedding(),
                          Human(a.params.active_non_embedding(), ""));
  }
  out += "\n";

  absl::StrAppendFormat(&out, "training FLOPs per token (sequence length %d)\n", a.seq_len);
  absl::StrAppendFormat(&out, "  %-28s %14.4g\n", "6N", a.flops_per_token_6n);
  absl::StrAppendFormat(&out, "  %-28s %14.4g\n", "6N + 6 L T d (attention)", a.flops_per_token_6n_attention);
  absl::StrAppendFormat(&out, "  %-28s %14.4g  (matmuls %.4g + causal attention %.4g)\n", "exact (model's matmuls)",
                        a.exact.training(), 3 * a.exact.matmul_forward, 3 * a.exact.attention_forward);
  absl::StrAppendFormat(&out, "run: %d steps x %d tokens = %s tokens, %s (%.3g FLOP)\n\n", a.steps,
                        a.tokens_per_step, Human(a.total_tokens, ""), Human(a.total_flops, "FLOP"), a.total_flops);

  absl::StrAppendFormat(&out, "training memory (fp32 master weights, AdamW)\n");
  absl::StrAppendFormat(&out, "  %-28s %14s\n", "weights", Bytes(a.memory.weights));
  absl::StrAppendFormat(&out, "  %-28s %14s\n", "gradients", Bytes(a.memory.gradients));
  absl::StrAppendFormat(&out, "  %-28s %14s\n", "optimizer state", Bytes(a.memory.optimizer));
  absl::StrAppendFormat(&out, "  %-28s %14s\n", "activations (micro-batch)", Bytes(a.memory.activations));
  absl::StrAppendFormat(&out, "  %-28s %14s\n\n", "total", Bytes(a.memory.total()));

  absl::StrAppendFormat(&out, "forward matmuls of one micro-batch (backward: 2x each)\n");
  absl::StrAppendFormat(&out, "  %-16s %8s %8s %8s %6s %12s %10s %10s\n", "matmul", "M", "K", "N", "count",
                        "FLOP", "AI fp32", "AI bf16");
  for (const MatmulCost& m : a.matmuls) {
    absl::StrAppendFormat(&out, "  %-16s %8d %8d %8d %6d %12.4g %10.1f %10.1f\n", m.name, m.m, m.k, m.n, m.count,
                          m.flops() * m.count, m.Intensity(4), m.Intensity(2));
  }
  if (tokens_per_second > 0) {
    const double mfu = Mfu(a, tokens_per_second, peak_flops);
    absl::StrAppendFormat(&out, "\nat %s tokens/s: %s of model FLOPs, MFU %.1f%% of a %s peak\n",
                          Human(tokens_per_second, ""), Human(tokens_per_second * a.exact.training(), "FLOP/s"),
                          100 * mfu, Human(peak_flops, "FLOP/s"));
    if (mfu > 1) {
      absl::StrAppend(&out,
                      "(above 100%: more tokens/s than the peak allows; check the tokens/s and the peak)\n");
    }
  }
  return out;
}

}  // namespace lmf::scaling
