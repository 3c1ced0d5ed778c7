// Test-only: the checks every token mixer and channel mixer passes, whatever it computes, on the CPU in fp32.
// A new layer's test instantiates them with its own layer; its numbers are checked against PyTorch at the
// model level (model/language_model's fixtures from tools/model/reference.py).
//   - ExpectGradientsMatchFiniteDifferences: Backward's input gradient and parameter gradients equal central
//     finite differences of Forward (every input entry, sampled parameter entries).
//   - ExpectMicroBatchesIndependent: the activations of several micro-batches held at once, their
//     backwards run in another order than their forwards, give bit for bit the outputs, input gradients
//     and accumulated parameter gradients of running each micro-batch alone in that order (no state hides
//     in the layer).
//   - ExpectRecomputeIsExact: activations released after the forward and rebuilt by a second Forward give
//     the same backward, bit for bit (activation recomputation).
//   - ExpectSavedBytes: what the activations hold is what the layer kind declares per token.
#ifndef LMFORGE_MODEL_TESTING_LAYER_CHECK_H_
#define LMFORGE_MODEL_TESTING_LAYER_CHECK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/context.h"
#include "model/layers/layer.h"
#include "model/layers/parameter.h"

namespace lmf::model::testing {

// A token mixer or a channel mixer seen through what the checks need, on a CPU f32 context.
struct MixerUnderTest {
  std::string name;
  int64_t channels = 0;  // C: input and output width
  std::function<std::unique_ptr<LayerActivations>()> new_activations;
  // h (B*T, C) -> out (B*T, C) written.
  std::function<void(int64_t b, int64_t t, const float* h, float* out, LayerActivations& saved)> forward;
  // dout (B*T, C) -> dh (B*T, C) written; parameter gradients accumulate.
  std::function<void(const float* h, const LayerActivations& saved, const float* dout, float* dh,
                     Scratch& scratch)> backward;
  std::function<void(const ParameterVisitor& visit)> visit_parameters;
};

MixerUnderTest UnderTest(const std::string& name, const TokenMixer& mixer, int64_t channels,
                         const kernels::Context& ctx);
// Every forward of a channel mixer runs in `mode` (evaluation by default).
MixerUnderTest UnderTest(const std::string& name, const ChannelMixer& mixer, int64_t channels,
                         const kernels::Context& ctx, const ForwardMode& mode = ForwardMode());

// Every parameter N(0, std) from `seed` (biases and gains too: the checks want every term to matter).
void RandomizeParameters(const MixerUnderTest& layer, uint64_t seed, double std);
void ZeroGradients(const MixerUnderTest& layer);

void ExpectGradientsMatchFiniteDifferences(const MixerUnderTest& layer, int64_t b, int64_t t, uint64_t seed);
void ExpectMicroBatchesIndependent(const MixerUnderTest& layer, int64_t b, int64_t t, int micro_batches,
                                   uint64_t seed);
void ExpectRecomputeIsExact(const MixerUnderTest& layer, int64_t b, int64_t t, uint64_t seed);
void ExpectSavedBytes(const MixerUnderTest& layer, int64_t b, int64_t t, int64_t bytes_per_token);

}  // namespace lmf::model::testing

#endif  // LMFORGE_MODEL_TESTING_LAYER_CHECK_H_
