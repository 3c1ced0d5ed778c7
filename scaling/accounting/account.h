// Accounting for an experiment config: what the model costs before it is trained. Parameters (with and
// without embeddings), training FLOPs per token three ways (6N, 6N plus the attention term, and the exact
// count of the model's own matmuls from model/accounting), the run's total tokens and FLOPs, memory for
// weights, gradients, optimizer state and activations, the arithmetic intensity of the main matmuls, and
// MFU for a given throughput and hardware peak. `./bazelw run //scaling:account -- --config=FILE`.
#ifndef LMFORGE_SCALING_ACCOUNTING_ACCOUNT_H_
#define LMFORGE_SCALING_ACCOUNTING_ACCOUNT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/experiment.pb.h"
#include "model/accounting/accounting.h"
#include "model/accounting/training_memory.h"
#include "model/config/config.h"

namespace lmf::scaling {

// One matmul of a training step's forward pass: out (M, N) = in (M, K) x W (K, N), run `count` times per
// step (once per layer, say). The backward runs two more of the same size (input and weight gradients).
struct MatmulCost {
  std::string name;  // "attention.qkv", "ffn.up", "lm_head", ...
  int64_t m = 0, k = 0, n = 0;
  int64_t count = 0;
  double flops() const { return 2.0 * static_cast<double>(m) * k * n; }
  // FLOPs per byte moved if each operand is read once and the output written once.
  double Intensity(int bytes_per_element) const {
    return flops() / (static_cast<double>(bytes_per_element) * (m * k + k * n + m * n));
  }
};

struct ExperimentAccount {
  model::ModelConfig model;
  model::ParameterCounts params;
  int64_t seq_len = 0;
  double flops_per_token_6n = 0;            // 6 N, N all parameters (a mixture of experts: the active ones)
  double flops_per_token_6n_attention = 0;  // 6 N + 6 * n_layers * seq_len * d_model (Kaplan et al. 2020)
  model::FlopsPerToken exact;               // the model's own matmuls and causal attention products
  int64_t tokens_per_step = 0;              // batch * grad_accum * seq_len
  int64_t steps = 0;
  double total_tokens = 0;
  double total_flops = 0;                   // exact count x total tokens

  // Training memory in bytes for one micro-batch of run.batch_size sequences (model::CountModelMemory, the
  // trainer's memory check's count): fp32 master weights (with bf16 compute copies and bf16 activations
  // for run.precision BF16), gradients, AdamW's two moments, the activations kept for the backward.
  model::ModelMemory memory;

  std::vector<MatmulCost> matmuls;  // one micro-batch's forward
};

// Fails with the config's own validation message if the model cannot be built.
absl::StatusOr<ExperimentAccount> AccountExperiment(const config::Experiment& experiment);

// Model FLOPs utilisation: achieved model FLOP/s (exact training FLOPs per token x tokens/s) over the peak.
double Mfu(const ExperimentAccount& account, double tokens_per_second, double peak_flops);

// The table `//scaling:account` prints. tokens_per_second <= 0 leaves out the MFU line.
std::string FormatAccount(const ExperimentAccount& account, double tokens_per_second, double peak_flops);

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_ACCOUNTING_ACCOUNT_H_
