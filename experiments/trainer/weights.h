// Moving a LanguageModel's parameters in and out of safetensors by name: the names are the model's
// checkpoint names (model/language_model, documented in experiments/README.md), so weights written by
// PyTorch under the same names load here and ours load there. What moves is the fp32 master weights, through
// host staging buffers, on every device: a checkpoint written by a CPU run loads into a CUDA model (FP32 or
// BF16) and the reverse, under the same names.
#ifndef LMFORGE_EXPERIMENTS_TRAINER_WEIGHTS_H_
#define LMFORGE_EXPERIMENTS_TRAINER_WEIGHTS_H_

#include <deque>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "experiments/checkpoint/checkpoint.h"
#include "experiments/checkpoint/safetensors.h"
#include "experiments/data/token_batches.h"
#include "model/language_model/language_model.h"

namespace lmf::experiments {

// Named fp32 tensors copied to host memory, e.g. for a checkpoint: tensors[i].data points into `storage`
// (a deque, so the buffers never move) and stays valid while this object lives.
struct HostTensors {
  std::vector<NamedTensor> tensors;
  std::deque<std::vector<float>> storage;

  // Appends a tensor named `name` of `shape` with numel(shape) floats copied from `data` on ctx's device.
  void AddFromDevice(const kernels::Context& ctx, const std::string& name, const std::vector<int64_t>& shape,
                     const float* data);
};

// Every parameter's fp32 master weights, then the model's state that is not trained (LanguageModel::
// VisitBuffers: a mixture of experts' expert-selection bias), as (name, shape, host copy).
HostTensors ModelTensors(const model::LanguageModel& model);

// Copies every parameter and buffer from `weights` (F32, BF16, F16 or F64) into the fp32 master weights and
// buffers on the model's device, then refreshes the bf16 compute copies (RefreshComputeWeights). A missing
// tensor, a shape mismatch or a tensor the model does not have is an error naming it; a model that holds a
// block of its experts (expert parallelism) skips the other blocks' tensors.
absl::Status LoadWeights(const SafetensorsReader& weights, model::LanguageModel& model);
// The same for a stage slice (LanguageModel's LayerRange) from a whole model's file (resharding a
// checkpoint into pipeline stages): the slice's own tensors are loaded and checked as above; the file's
// other tensors must be ones the whole model has outside the slice (another layer's "layers.{i}.", the
// embeddings before the first layer, the final norm and LM head after the last; for a slice holding a block
// of its experts, the other blocks), else an error naming them.
absl::Status LoadSliceWeights(const SafetensorsReader& weights, model::LanguageModel& slice);

// Sparse upcycling (Komatsuzaki et al. 2022): a dense model's weights into a mixture-of-experts model of
// the same shape. Every parameter the two share by name is copied; each routed expert's
// "layers.{i}.ffn.experts.{e}.<w>" is the dense "layers.{i}.ffn.<w>"; the router, the shared experts and the
// expert bias keep the MoE model's own initial values. With gates that sum to 1 (top-k then softmax, or
// normalised gates, route_scale 1) and no shared experts, the MoE computes the dense model's function.
// A dense tensor the MoE model has no use for, or one it needs and the file lacks, is an error naming it.
absl::Status LoadUpcycledWeights(const SafetensorsReader& dense, model::LanguageModel& moe);

// Mean cross-entropy over every batch of `batches` (each batch weighs the same: they all hold B x T
// targets).
absl::StatusOr<double> ValidationLoss(model::LanguageModel& model, const ValidationBatches& batches,
                                      int64_t batch_size, int64_t context_length);

// The mean cross-entropy of batches first, first + stride, ... of `batches`, in a vector of one entry per
// batch (0 for the others): a data-parallel rank's share, summed over the ranks and then in batch order so
// that the mean is the one ValidationLoss computes.
absl::StatusOr<std::vector<double>> ValidationBatchLosses(model::LanguageModel& model,
                                                          const ValidationBatches& batches,
                                                          int64_t batch_size, int64_t context_length,
                                                          int64_t first, int64_t stride);

// The same with each batch's mean cross-entropy from `loss` (ids, targets (B, T) in host memory): through a
// pipeline's stages.
using BatchLoss = std::function<absl::StatusOr<double>(const int32_t* ids, const int32_t* targets)>;
absl::StatusOr<std::vector<double>> ValidationBatchLosses(const BatchLoss& loss,
                                                          const ValidationBatches& batches,
                                                          int64_t batch_size, int64_t context_length,
                                                          int64_t first, int64_t stride);

// The mean of per-batch losses, summed in batch order.
double MeanInOrder(const std::vector<double>& losses);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_WEIGHTS_H_
