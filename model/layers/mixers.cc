// The layer registry: one switch per question over the kinds of token and channel mixer.
#include "model/layers/mixers.h"

#include "model/layers/attention/attention.h"
#include "model/layers/block/block.h"
#include "model/layers/feed_forward/feed_forward.h"
#include "model/layers/moe/moe.h"

namespace lmf::model {

std::unique_ptr<TokenMixer> MakeTokenMixer(const TokenMixerSpec& spec, const ModelConfig& model,
                                           const kernels::Context& ctx, kernels::DType dtype,
                                           StepCounters* counters) {
  switch (spec.kind) {
    case TokenMixerSpec::Kind::kAttention:
      return std::make_unique<Attention>(spec.attention, model, ctx, dtype, counters);
  }
  LMF_CHECK(false) << "unknown token mixer kind " << static_cast<int>(spec.kind);
  return nullptr;
}

std::unique_ptr<ChannelMixer> MakeChannelMixer(const ChannelMixerSpec& spec, const ModelConfig& model,
                                               const kernels::Context& ctx, kernels::DType dtype,
                                               StepCounters* counters, moe::ExpertExchange* expert_exchange) {
  switch (spec.kind) {
    case ChannelMixerSpec::Kind::kFeedForward:
      return std::make_unique<FeedForward>(spec.feed_forward, model, ctx, dtype, counters);
    case ChannelMixerSpec::Kind::kMoe:
      return std::make_unique<MixtureOfExperts>(spec.moe, model, ctx, dtype, counters, expert_exchange);
  }
  LMF_CHECK(false) << "unknown channel mixer kind " << static_cast<int>(spec.kind);
  return nullptr;
}

absl::Status CheckLayerSupport(const LayerSpec& layer, const ModelConfig& model, kernels::Device device,
                               kernels::DType dtype) {
  switch (layer.token_mixer.kind) {
    case TokenMixerSpec::Kind::kAttention:
      if (absl::Status s = Attention::CheckSupport(layer.token_mixer.attention, model, device, dtype); !s.ok()) {
        return s;
      }
      break;
  }
  switch (layer.channel_mixer.kind) {
    case ChannelMixerSpec::Kind::kFeedForward:
      return FeedForward::CheckSupport(layer.channel_mixer.feed_forward, device, dtype);
    case ChannelMixerSpec::Kind::kMoe:
      return MixtureOfExperts::CheckSupport(layer.channel_mixer.moe, device, dtype);
  }
  return absl::OkStatus();
}

LayerCost CountLayerCost(const ModelConfig& model, const LayerSpec& spec, int64_t seq_len, kernels::DType dtype) {
  LayerCost cost;
  cost.parameters = Block::NormParameters(model);
  cost.saved_bytes_per_token = Block::SavedBytesPerToken(model, dtype);
  switch (spec.token_mixer.kind) {
    case TokenMixerSpec::Kind::kAttention: {
      const AttentionSpec& attention = spec.token_mixer.attention;
      cost.parameters += Attention::Parameters(attention, model);
      cost.matmul_flops_per_token += Attention::MatmulFlopsPerToken(attention, model);
      cost.attention_flops_per_token += Attention::AttentionFlopsPerToken(attention, model, seq_len);
      cost.saved_bytes_per_token += Attention::SavedBytesPerToken(attention, model, dtype);
      break;
    }
  }
  switch (spec.channel_mixer.kind) {
    case ChannelMixerSpec::Kind::kFeedForward: {
      const FeedForwardSpec& ffn = spec.channel_mixer.feed_forward;
      cost.parameters += FeedForward::Parameters(ffn, model);
      cost.matmul_flops_per_token += FeedForward::MatmulFlopsPerToken(ffn, model);
      cost.saved_bytes_per_token += FeedForward::SavedBytesPerToken(ffn, dtype);
      break;
    }
    case ChannelMixerSpec::Kind::kMoe: {
      const MoeSpec& moe = spec.channel_mixer.moe;
      cost.parameters += MixtureOfExperts::Parameters(moe, model);
      cost.inactive_parameters += MixtureOfExperts::Parameters(moe, model) - MixtureOfExperts::ActiveParameters(moe, model);
      cost.matmul_flops_per_token += MixtureOfExperts::MatmulFlopsPerToken(moe, model);
      cost.saved_bytes_per_token += MixtureOfExperts::SavedBytesPerToken(moe, model, dtype);
      break;
    }
  }
  return cost;
}

}  // namespace lmf::model
