// The registry of layer kinds: builds the token mixer and the channel mixer a LayerSpec names, checks that a
// device runs them, and counts what a layer costs from the config alone (parameters, FLOPs, the bytes its
// forward keeps). Adding a kind of layer: its package under model/layers/<kind>/, its spec in
// model/config/config.h, and one case in each function here.
#ifndef LMFORGE_MODEL_LAYERS_MIXERS_H_
#define LMFORGE_MODEL_LAYERS_MIXERS_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/layers/layer.h"
#include "model/layers/moe/expert_exchange.h"
#include "model/layers/parameter.h"

namespace lmf::model {

// Parameters on ctx's device, activations of type `dtype`; FLOPs counted into `counters`. A mixture of
// experts holds only its block of the experts when given `expert_exchange` (expert parallelism; null: all).
std::unique_ptr<TokenMixer> MakeTokenMixer(const TokenMixerSpec& spec, const ModelConfig& model,
                                           const kernels::Context& ctx, kernels::DType dtype,
                                           StepCounters* counters);
std::unique_ptr<ChannelMixer> MakeChannelMixer(const ChannelMixerSpec& spec, const ModelConfig& model,
                                               const kernels::Context& ctx, kernels::DType dtype,
                                               StepCounters* counters,
                                               moe::ExpertExchange* expert_exchange = nullptr);

// OK when `device` runs both mixers of `layer` with `dtype` activations; else InvalidArgument naming the
// op or limit (e.g. the attention's head size).
absl::Status CheckLayerSupport(const LayerSpec& layer, const ModelConfig& model, kernels::Device device,
                               kernels::DType dtype);

// The cost of one block of spec `layer` (its norms and both mixers) for sequences of length seq_len.
struct LayerCost {
  int64_t parameters = 0;
  int64_t inactive_parameters = 0;       // of those, the ones a token does not use (unchosen routed experts)
  double matmul_flops_per_token = 0;     // forward: 2 per multiply-add of every GEMM a token runs
  double attention_flops_per_token = 0;  // forward: Q K^T and P V over the causal triangle (the window's band)
  int64_t saved_bytes_per_token = 0;     // what its forward keeps for the backward (not its input)
};
LayerCost CountLayerCost(const ModelConfig& model, const LayerSpec& layer, int64_t seq_len, kernels::DType dtype);

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_MIXERS_H_
