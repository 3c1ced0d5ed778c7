// The interfaces a block composes: a token mixer (mixes information across the positions of a sequence:
// softmax attention today; latent, linear and lightning attention, Mamba-2 and Gated DeltaNet next) and a
// channel mixer (transforms each position alone: the dense feed-forward today; a mixture of experts next).
// A block (block/block.h) runs one of each with the norms around them; model/layers/mixers.h builds them
// from a LayerSpec.
//
// Layers keep no step state. What a forward keeps for its backward lives in a LayerActivations the layer
// makes (NewActivations) and the caller owns, one per micro-batch in flight: a pipeline schedule holds
// several and runs their backwards in any order; recomputation Releases one layer's after the forward and
// rebuilds them with a second Forward before the backward. Forward, Backward and Decode are const: nothing
// but the activations, the decode state, the output buffers and the parameter gradients changes.
//
// Conventions (as in every layer of model/): tensors are (rows, channels) row-major in the activation dtype
// on the model's device, N = B*T rows of C channels; the input h is the normed residual stream, which the
// caller keeps unchanged until the backward and passes again; parameter gradients (fp32) accumulate (+=),
// activation gradients are written (=).
#ifndef LMFORGE_MODEL_LAYERS_LAYER_H_
#define LMFORGE_MODEL_LAYERS_LAYER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include "absl/status/status.h"
#include "base/check.h"
#include "kernels/core/context.h"
#include "kernels/core/tensor.h"
#include "model/layers/deferred_weight_grads.h"
#include "model/layers/parameter.h"

namespace lmf::model {

// What one layer's forward kept for its backward, for one micro-batch. Made by the layer, owned by the
// caller; sized by the first Forward of a (B, T) and reused by the next Forward of that shape.
class LayerActivations {
 public:
  virtual ~LayerActivations() = default;
  // Bytes of device memory held for the backward.
  virtual int64_t bytes() const = 0;
  // Frees everything; the next Forward allocates again (activation recomputation).
  virtual void Release() = 0;
  // The auxiliary loss this forward added to the training objective (a mixture of experts' balancing loss
  // and router z-loss), whose gradient the layer's Backward includes with weight 1; 0 for most layers.
  virtual double aux_loss() const { return 0; }
};

// A layer's activations or decode state as the concrete type it made (StateAs<AttentionCache>(state)); a
// program error (abort naming both types) when a caller hands it another layer's.
template <typename T, typename Base>
T& StateAs(Base& state) {
  T* typed = dynamic_cast<T*>(&state);
  LMF_CHECK(typed != nullptr) << "a layer was given state of type " << typeid(state).name() << ", not its own "
                              << typeid(T).name();
  return *typed;
}
template <typename T, typename Base>
const T& StateAs(const Base& state) {
  return StateAs<T>(const_cast<Base&>(state));
}

// Bytes a tensor holds, 0 for an undefined one (whose rank-0 shape would count one element).
inline int64_t HeldBytes(const kernels::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

// A token mixer's state for decoding B sequences one token at a time (a KV cache for attention; a
// recurrent state for linear attention and state-space layers). Made by the layer, owned by the caller.
class DecodeState {
 public:
  virtual ~DecodeState() = default;
  virtual int64_t bytes() const = 0;
};

// Temporaries of a backward: Take hands out uninitialised tensors that stay valid until Reset, which the
// owner calls between layers. Memory is kept and reused: the same sequence of Takes at the next step
// allocates nothing. It also carries where the backward's weight gradients go: with deferred() set (a
// zero-bubble pipeline's split backward), layers queue their GEMM weight gradients there instead of running
// them (Linear::Backward and the experts take it); null, the default, computes them in the backward.
class Scratch {
 public:
  explicit Scratch(kernels::Allocator* allocator) : allocator_(allocator) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  kernels::Tensor Take(const kernels::Shape& shape, kernels::DType dtype);
  void Reset();
  int64_t bytes() const;  // memory kept

  void set_deferred(DeferredWeightGrads* deferred) { deferred_ = deferred; }
  DeferredWeightGrads* deferred() const { return deferred_; }

 private:
  struct Buffer {
    kernels::Tensor memory;  // bytes, 1-D
    bool taken = false;
  };
  kernels::Allocator* allocator_;
  std::vector<Buffer> buffers_;
  DeferredWeightGrads* deferred_ = nullptr;
};

// How a forward runs. Evaluation (the default: validation losses, generation) is deterministic. A training
// forward may also draw random numbers (a mixture of experts' noisy top-k gating); each draw is a
// counter-based hash of (seed, step, layer, the token's index among the step's tokens, what is drawn), never
// of the activations, so a recomputed forward repeats it and every data- or expert-parallel layout gives a
// token the draws one process gives it.
struct ForwardMode {
  bool training = false;
  uint64_t seed = 0;        // the run's seed
  int64_t step = 0;         // the optimizer step the forward belongs to (0-based)
  int64_t first_token = 0;  // the index of row 0 among the step's tokens: (its sequence's index in the step) * T
  int64_t layer = 0;        // the layer running, numbered as in the whole model (LanguageModel sets it)

  static ForwardMode Training(uint64_t seed, int64_t step, int64_t first_token) {
    return ForwardMode{true, seed, step, first_token, 0};
  }
};

// Visits a tensor of model state by checkpoint name.
using BufferVisitor = std::function<void(const std::string& name, const kernels::Tensor& tensor)>;

// OK when a backend in this binary runs every op (kernels/core/dispatch.h names) on `device` with `dtype`
// activations; else InvalidArgument naming the first op it lacks. Layers check their ops with it before the
// model allocates anything.
absl::Status CheckOpsSupported(const std::vector<const char*>& ops, kernels::Device device, kernels::DType dtype);
// "cpu" / "cuda:0" and "F32" / "BF16", as the support errors name them.
std::string DeviceName(kernels::Device device);
std::string PrecisionName(kernels::DType dtype);

class TokenMixer {
 public:
  virtual ~TokenMixer() = default;

  virtual std::unique_ptr<LayerActivations> NewActivations() const = 0;
  // h (B*T, C) -> out (B*T, C) += mix(h) (= when !accumulate), keeping in `saved` what Backward needs. With
  // `fill`, also writes positions [0, T) into that decode state (a prefill).
  virtual void Forward(const kernels::Context& ctx, int64_t b, int64_t t, const void* h, void* out,
                       bool accumulate, LayerActivations& saved, DecodeState* fill = nullptr) const = 0;
  // dout (B*T, C), the gradient of out -> dh (B*T, C) written; `h` and `saved` as given to and kept by the
  // Forward of this micro-batch.
  virtual void Backward(const kernels::Context& ctx, const void* h, const LayerActivations& saved,
                        const void* dout, void* dh, Scratch& scratch) const = 0;

  // Incremental decoding of B sequences that share one length. A state holds up to `max_positions`
  // positions per sequence (a windowed or recurrent layer may keep less); its bytes are known before it
  // is made, so a caller can refuse one that does not fit.
  virtual int64_t DecodeStateBytes(int64_t b, int64_t max_positions) const = 0;
  virtual std::unique_ptr<DecodeState> NewDecodeState(const kernels::Context& ctx, int64_t b,
                                                      int64_t max_positions) const = 0;
  // One token per sequence at `position` (positions [0, position) are in `state`): h (B, C) -> out (B, C)
  // += mix (= when !accumulate), and the token is added to `state`. `device_position` points to one int32
  // equal to `position` on the model's device. `scratch_saved` is overwritten (sized for (B, 1)).
  virtual void Decode(const kernels::Context& ctx, int64_t b, int64_t position, const int32_t* device_position,
                      const void* h, void* out, bool accumulate, DecodeState& state,
                      LayerActivations& scratch_saved) const = 0;

  virtual void VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const = 0;
};

class ChannelMixer {
 public:
  virtual ~ChannelMixer() = default;

  virtual std::unique_ptr<LayerActivations> NewActivations() const = 0;
  // h (B*T, C) -> out (B*T, C) += mix(h) (= when !accumulate), keeping in `saved` what Backward needs.
  // `mode`: training or evaluation (only a layer that draws random numbers tells them apart).
  virtual void Forward(const kernels::Context& ctx, int64_t b, int64_t t, const void* h, void* out,
                       bool accumulate, LayerActivations& saved, const ForwardMode& mode) const = 0;
  // dout (B*T, C) -> dh (B*T, C) written.
  virtual void Backward(const kernels::Context& ctx, const void* h, const LayerActivations& saved,
                        const void* dout, void* dh, Scratch& scratch) const = 0;

  virtual void VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const = 0;

  // State that is not a trained parameter (a mixture of experts' expert-selection bias): fp32 tensors on
  // the model's device, visited by checkpoint name; none by default.
  virtual void VisitBuffers(const std::string& /*prefix*/, const BufferVisitor& /*visit*/) const {}
  // What the backwards of an optimizer step counted for that state's update (the tokens routed to each
  // expert), accumulated like a gradient: a data-parallel strategy sums it over the processes before
  // EndStep. None by default.
  virtual void VisitStepCounts(const std::string& /*prefix*/, const BufferVisitor& /*visit*/) const {}
  // Once per optimizer step, after the update: updates the state from the step's counts and clears them.
  virtual void EndStep() const {}
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_LAYER_H_
