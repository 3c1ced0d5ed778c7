// MixtureOfExperts: the channel mixer that sends each token to top_k of n_experts feed-forwards (MoeSpec
// in model/config/config.h). It composes the router (router.h: fp32 logits z = h W_r^T, the selection and
// gates, the balancing loss and router z-loss), the dispatcher (dispatch.h: assignments sorted by expert into
// contiguous row blocks, capacity and dropping) and the experts (experts.h: one GEMM per expert and matrix),
// plus the shared experts, a dense FeedForward of width shared_d_ff that sees every token:
//   out = shared(h) + sum over the token's kept experts j of gate_j * expert_j(h)
// The auxiliary losses enter the objective through LayerActivations::aux_loss; Backward adds their gradient
// (weight 1) to the router's. Noisy top-k gating (spec.noisy_gating) adds its noise in training forwards
// only (ForwardMode, drawn by moe::GatingNoise from the mode's key and each token's index); an evaluation
// forward routes on the noise-free logits z. With spec.expert_bias, a per-expert bias (model state, not a parameter:
// VisitBuffers) is added to the selection scores only; EndStep moves it by bias_update_rate * sign(mean
// load - load) from the step's counts. The backwards count each expert's assignments and drops
// (VisitStepCounts: for the bias and for metrics); EndStep clears them.
//
// Parameters: "<prefix>.router.weight" (E, C), with noisy gating "<prefix>.router.noise.weight" (E, C), "<prefix>.experts.{e}.w1|w3|w2.*" (experts.h),
// "<prefix>.shared.w1|w3|w2.*" (the shared FeedForward). Buffer: "<prefix>.router.expert_bias" (E).
// Saved for the backward (MoeActivations): the logits, choices, gates and rows of the dispatch, the gathered
// inputs, both expert pre-activations and activation, the expert outputs, and the shared FeedForward's.
// Expert parallelism: given an ExpertExchange (expert_exchange.h) of ep ranks, the layer holds experts
// [rank E/ep, (rank+1) E/ep) only. It routes and applies the capacity on its own tokens as one process would
// (so which assignments are kept does not depend on the layout), sends the kept rows to their experts'
// ranks, runs its experts on the rows it receives and returns their outputs; the backward sends the
// outputs' gradients along the same plan and returns the inputs' gradients. The router, the losses and the
// counts stay local over all E experts.
//
// Devices: on the CPU in fp32, everything on the host, the rows moved by kernels/moe_rows' CPU ops and the
// experts' GEMMs run concurrently over the pool (experts.h). On CUDA in fp32 or bf16 (moe_device.cc), everything on
// the device: the router GEMM, the noise, the selection, the dispatch plan and the losses run as kernels
// (kernels/moe_route, which routes exactly as router.h and dispatch.h do), and ONE small copy per forward
// brings the per-expert counts and the two loss values to the host (the step counts, dropped(), aux_loss()
// and the activations' sizes read them); the backward copies nothing. The rows move and combine on the
// device (kernels/moe_rows) and every expert's rows run in one grouped GEMM per matrix
// (kernels/grouped_matmul, offsets on the device). bf16 follows the dense CUDA path: rows, weight copies and
// activation gradients bf16; the router (weights, logits, noise, gradient), the gates, the losses and the
// counts fp32. Not on CUDA: more than kernels::kMaxRouteExperts experts (CheckSupport). Expert parallelism
// runs on both: the exchange moves the rows where they live (host rows over Gloo; device rows in the
// activations' dtype over an NCCL group: distributed/expert/expert_parallel_cuda_test, on the CUDA emulation),
// with the same plan code (RouteExchange); LanguageModel::Create and config validation still refuse it on
// CUDA for a whole model. The step counts stay on the host on every device; the expert-selection bias lives
// on the model's device. Parameter gradients accumulate, activation gradients are written.
#ifndef LMFORGE_MODEL_LAYERS_MOE_MOE_H_
#define LMFORGE_MODEL_LAYERS_MOE_MOE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/layers/feed_forward/feed_forward.h"
#include "model/layers/layer.h"
#include "model/layers/linear/linear.h"
#include "model/layers/moe/dispatch.h"
#include "model/layers/moe/expert_exchange.h"
#include "model/layers/moe/experts.h"
#include "model/layers/parameter.h"

namespace lmf::model {

struct MoeActivations : LayerActivations {
  int64_t b = 0, t = 0;
  std::vector<float> logits;      // (N, E) the router's fp32 logits (noisy gating in training: H, with the noise)
  std::vector<float> noise_logits, noise;  // (N, E) each: noisy gating's h W_noise^T and eps (else empty)
  std::vector<int32_t> experts;   // (N, k) each token's experts, best first
  std::vector<float> gates;       // (N, k)
  moe::Dispatch dispatch;         // this rank's M kept rows sorted by expert (sized N * k)
  // The rows this rank's experts run: R = M without expert parallelism, else what the exchange brought.
  std::vector<int64_t> expert_counts, expert_offsets;  // (local experts), (local experts + 1)
  std::unique_ptr<moe::ExpertExchange::Plan> plan;     // expert parallelism's, else null
  kernels::Tensor x, pre, act;  // (R, C), (R, W), (R, F): the expert-side rows; capacity may exceed R
  kernels::Tensor expert_y;     // (R, C) the experts' outputs before they return (expert parallelism only)
  kernels::Tensor y;            // (M, C) each kept row's expert output, in this rank's row order
  kernels::Tensor sent;         // (M, C) the rows' inputs on their way out (expert parallelism only)
  // The device path's routing (moe_device.cc; the host vectors above stay empty there), on the model's device:
  kernels::Tensor route_logits;   // (N, E) fp32: z, or H with noise
  kernels::Tensor route_noise;    // (2, N, E) fp32: h W_noise^T and eps (noisy training forwards only)
  kernels::Tensor route_ints;     // (3, N k) int32: experts, row_assignment, assignment_row
  kernels::Tensor route_gates;    // (N k) fp32
  // (E + 1) int32: each expert's first row (O(E): not counted in bytes()); with expert parallelism, after
  // the exchange's plan, its first E/ep + 1 entries are the local experts' first rows among the R received.
  kernels::Tensor route_offsets;
  std::vector<int64_t> selected;  // (E) the device path's selections per expert, before the capacity
  std::unique_ptr<LayerActivations> shared;  // the shared experts' (null without)
  double balance_loss = 0, z_loss = 0;        // this forward's router losses (their sum is aux_loss())

  // The per-token buffers; the dispatch's per-expert counts (O(E)) are not counted.
  int64_t bytes() const override;
  void Release() override;
  double aux_loss() const override { return balance_loss + z_loss; }
  int64_t dropped() const { return dispatch.dropped; }  // assignments over capacity in this forward
};

class MixtureOfExperts final : public ChannelMixer {
 public:
  // `exchange`: expert parallelism (null: every expert here), kept by the caller for the layer's lifetime;
  // spec.n_experts must divide by its ranks.
  // `dtype`: the activations' (f32; bf16 on CUDA).
  MixtureOfExperts(const MoeSpec& spec, const ModelConfig& model, const kernels::Context& ctx, kernels::DType dtype,
                   StepCounters* counters, moe::ExpertExchange* exchange = nullptr);

  std::unique_ptr<LayerActivations> NewActivations() const override;
  void Forward(const kernels::Context& ctx, int64_t b, int64_t t, const void* h, void* out, bool accumulate,
               LayerActivations& saved, const ForwardMode& mode) const override;
  void Backward(const kernels::Context& ctx, const void* h, const LayerActivations& saved, const void* dout,
                void* dh, Scratch& scratch) const override;
  void VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const override;
  void VisitBuffers(const std::string& prefix, const BufferVisitor& visit) const override;
  // "<prefix>.router.expert_load" (E): the assignments each expert was routed by the step's backwards
  // (before any capacity drop); "<prefix>.router.expert_dropped" (E): those of them dropped.
  void VisitStepCounts(const std::string& prefix, const BufferVisitor& visit) const override;
  void EndStep() const override;

  // What a layer of this spec costs, from the config alone: every parameter, and the forward FLOPs of one
  // token through the router, its top_k experts and the shared experts (dropless), and the bytes a training
  // forward keeps.
  static int64_t Parameters(const MoeSpec& spec, const ModelConfig& model);
  static int64_t ActiveParameters(const MoeSpec& spec, const ModelConfig& model);
  static double MatmulFlopsPerToken(const MoeSpec& spec, const ModelConfig& model);
  static int64_t SavedBytesPerToken(const MoeSpec& spec, const ModelConfig& model, kernels::DType dtype);
  static absl::Status CheckSupport(const MoeSpec& spec, kernels::Device device, kernels::DType dtype);

 private:
  static FeedForwardSpec SharedSpec(const MoeSpec& spec) { return {spec.expert_kind, spec.shared_d_ff}; }
  void Resize(int64_t b, int64_t t, const kernels::Context& ctx, MoeActivations& saved) const;
  // Expert parallelism: the exchange's plan for saved.dispatch's rows (sorted by expert), the counts and
  // offsets of the rows this rank's experts receive, and the expert-side rows sized for them.
  void RouteExchange(const kernels::Context& ctx, MoeActivations& saved) const;
  size_t RowBytes() const;  // one (C) row in dtype_
  // The kept rows (saved.dispatch) to the experts that run them and their outputs into saved.y: here, or
  // through the exchange.
  void RunExperts(const kernels::Context& ctx, const float* h, MoeActivations& saved) const;
  // dy (M, C), the gradient of saved.y -> drows (M, C), the gradient of the rows' inputs.
  void RunExpertsBackward(const kernels::Context& ctx, const MoeActivations& saved, const float* dy, float* drows,
                          Scratch& scratch) const;
  // The CUDA path (moe_device.cc): Forward and Backward on device pointers in dtype_.
  void ForwardOnDevice(const kernels::Context& ctx, int64_t b, int64_t t, const void* h, void* out, bool accumulate,
                       MoeActivations& saved, const ForwardMode& mode) const;
  void BackwardOnDevice(const kernels::Context& ctx, const void* h, const MoeActivations& saved, const void* dout,
                        void* dh, Scratch& scratch) const;
  // The device path's routing: logits, noise, selection, plan and losses into saved's route_* tensors, and
  // the one copy of the counts and losses to the host. Returns the kept rows M.
  int64_t RouteOnDevice(const kernels::Context& ctx, int64_t b, int64_t t, const void* h32, MoeActivations& saved,
                        const ForwardMode& mode) const;
  // The device path's expert parallelism: saved.expert_offsets into route_offsets; returns R.
  int64_t UploadExpertOffsets(const kernels::Context& ctx, MoeActivations& saved) const;
  // Adds each assignment of `saved` to the step's counts (expert_load_, expert_dropped_).
  void CountAssignments(const MoeActivations& saved) const;

  MoeSpec spec_;
  int64_t c_;
  kernels::Context ctx_;   // the model's: EndStep moves the bias on its device
  kernels::DType dtype_;   // the activations'
  moe::ExpertExchange* exchange_;
  Linear router_;  // (E, C), no bias
  std::optional<Linear> noise_router_;  // (E, C): noisy gating's W_noise
  moe::Experts experts_;
  std::optional<FeedForward> shared_;
  kernels::Tensor expert_bias_;                    // (E) fp32 on the model's device, with spec.expert_bias
  kernels::Tensor expert_load_, expert_dropped_;  // (E) fp32 each on the host: the step's counts
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_MOE_MOE_H_
