// LanguageModel's incremental forward: the KV cache, Prefill (the causal forward over a prompt, keeping
// each layer's keys and values) and DecodeStep (one new token per sequence, attending over the cache),
// through the same modules and kernels as training (see language_model.h).
#include <unistd.h>

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/memory/memory.h"
#include "model/language_model/language_model.h"

namespace lmf::model {

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (const auto& layer : layers_) total += layer->bytes();
  return total;
}

absl::StatusOr<KvCache> LanguageModel::NewKvCache(int64_t b) const {
  if (b <= 0) return absl::InvalidArgumentError(absl::StrCat("KV cache batch size ", b, " must be positive"));
  if (!has_embedding() || !has_head()) {
    return absl::InvalidArgumentError(absl::StrCat("decoding needs the whole model; this one holds layers [",
                                                   first_layer_, ", ", last_layer_, ")"));
  }
  // On the CPU the allocation would succeed (overcommit) and the process be killed as the cache fills: refuse
  // a cache above half of the machine's memory. (On CUDA the allocator reports what does not fit.) Each
  // layer holds up to context_length positions (a windowed one only its window).
  double bytes = 0;
  for (const auto& block : blocks_) {
    bytes += static_cast<double>(block->token_mixer().DecodeStateBytes(b, config_.context_length));
  }
  const double memory =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (ctx_.device.is_cpu() && memory > 0 && bytes > memory / 2) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("a KV cache of %d sequences of %d tokens would take %.1f GiB, more than half of this "
                        "machine's %.1f GiB",
                        b, config_.context_length, bytes / (1 << 30), memory / (1 << 30)));
  }
  KvCache cache;
  cache.model_ = this;
  cache.b_ = b;
  // Positions are int32 on the device: a model that decodes past the context stops only there.
  cache.capacity_ =
      config_.decodes_past_context() ? std::numeric_limits<int32_t>::max() : config_.context_length;
  for (const auto& block : blocks_) {
    cache.layers_.push_back(block->token_mixer().NewDecodeState(ctx_, b, config_.context_length));
  }
  cache.position_ = kernels::Tensor::Empty({1}, kernels::DType::kI32, ctx_.allocator);
  return cache;
}

absl::Status LanguageModel::CheckCache(const KvCache& cache, int64_t b) const {
  if (cache.model_ != this) return absl::InvalidArgumentError("the KV cache was made by another model");
  if (b != cache.b_) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch size ", b, " does not match the KV cache's batch size ", cache.b_));
  }
  return absl::OkStatus();
}

absl::Status LanguageModel::Prefill(const int32_t* ids, int64_t b, int64_t t, KvCache& cache) {
  if (absl::Status status = CheckBatch(ids, "ids", b, t); !status.ok()) return status;
  if (absl::Status status = CheckCache(cache, b); !status.ok()) return status;
  const int64_t c = config_.d_model, v = config_.vocab_rows();
  own_.have_loss_ = false;
  own_.b_ = own_.t_ = 0;  // the activations no longer describe a training forward
  cache.length_ = 0;
  const void* h = FinalNorm(b * t, RunBlocks(StageInput{b, t, ids, nullptr, nullptr}, own_, &cache), own_);
  cache.length_ = t;
  // The LM head on each sequence's last position only: rows T-1, T*C apart.
  EnsureLogits(own_, b, 1);
  lm_head_->Forward(ctx_, b, ElementOffset(h, (t - 1) * c, dtype_), t * c, own_.logits_.data(), v,
                    /*accumulate=*/false);
  CapLogits(own_, b);
  return absl::OkStatus();
}

absl::Status LanguageModel::DecodeStep(const int32_t* ids, KvCache& cache) {
  if (absl::Status status = CheckCache(cache, cache.b_); !status.ok()) return status;
  if (cache.length_ == 0) {
    return absl::FailedPreconditionError("the KV cache is empty: Prefill a prompt before DecodeStep");
  }
  if (cache.length_ >= cache.capacity_) {
    return absl::FailedPreconditionError(
        config_.decodes_past_context()
            ? absl::StrCat(
                  "the KV cache is full: it holds ", cache.capacity_,
                  " positions per sequence (positions are 32-bit); Prefill a shorter window to continue")
            : absl::StrCat("the KV cache is full: it holds context_length=", cache.capacity_,
                           " tokens per sequence; Prefill a shorter window to continue"));
  }
  const int64_t b = cache.b_, c = config_.d_model, v = config_.vocab_rows();
  for (int64_t i = 0; i < b; ++i) {
    if (ids[i] < 0 || ids[i] >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ids[", i, "] = ", ids[i], " is outside the vocabulary [0, ", config_.vocab_size, ")"));
    }
  }
  own_.have_loss_ = false;
  own_.b_ = own_.t_ = 0;
  const int64_t position = cache.length_;
  const int32_t position32 = static_cast<int32_t>(position);
  kernels::CopyToDevice(ctx_, cache.position_.data(), &position32, sizeof(position32));
  // The new tokens' embeddings at `position` (token row plus the position table's row).
  embedding_->Forward(ctx_, b, 1, ids, position, own_.embedding_);
  const void* x = own_.embedding_.output();
  for (size_t i = 0; i < blocks_.size(); ++i) {
    blocks_[i]->Decode(ctx_, b, position, cache.position_.data<int32_t>(), x, *cache.layers_[i], *own_.blocks_[i]);
    x = own_.blocks_[i]->output;
  }
  const void* h = FinalNorm(b, x, own_);
  EnsureLogits(own_, b, 1);
  lm_head_->Forward(ctx_, b, h, c, own_.logits_.data(), v, /*accumulate=*/false);
  CapLogits(own_, b);
  cache.length_ = position + 1;
  return absl::OkStatus();
}

}  // namespace lmf::model
