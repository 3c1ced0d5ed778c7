// The layer checks (see layer_check.h).
#include "model/testing/layer_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <utility>

#include "gtest/gtest.h"
#include "kernels/core/tensor.h"

namespace lmf::model::testing {
namespace {

std::vector<float> RandomVector(size_t n, uint64_t seed, double std) {
  std::mt19937_64 engine(seed);
  std::normal_distribution<double> normal(0.0, std);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(normal(engine));
  return v;
}

// sum(out .* weights) in double.
double Dot(const std::vector<float>& out, const std::vector<float>& weights) {
  double sum = 0;
  for (size_t i = 0; i < out.size(); ++i) sum += static_cast<double>(out[i]) * weights[i];
  return sum;
}

// Every parameter gradient, by name (host copies: the checks run on the CPU).
std::map<std::string, std::vector<float>> Gradients(const MixerUnderTest& layer) {
  std::map<std::string, std::vector<float>> grads;
  layer.visit_parameters([&](const std::string& name, const Parameter& p) {
    grads[name].assign(p.grad_data(), p.grad_data() + p.grad.numel());
  });
  return grads;
}

struct Run {
  std::vector<float> out, dh;
};

}  // namespace

namespace {

// A token mixer's forward; a channel mixer's in `mode`.
void MixerForward(const TokenMixer& mixer, const kernels::Context& ctx, int64_t b, int64_t t, const float* h,
                  float* out, LayerActivations& saved, const ForwardMode& /*mode*/) {
  mixer.Forward(ctx, b, t, h, out, /*accumulate=*/false, saved);
}
void MixerForward(const ChannelMixer& mixer, const kernels::Context& ctx, int64_t b, int64_t t, const float* h,
                  float* out, LayerActivations& saved, const ForwardMode& mode) {
  mixer.Forward(ctx, b, t, h, out, /*accumulate=*/false, saved, mode);
}

// A token mixer and a channel mixer have the same calls the checks make.
template <typename Mixer>
MixerUnderTest UnderTestOf(const std::string& name, const Mixer& mixer, int64_t channels,
                           const kernels::Context& ctx, const ForwardMode& mode) {
  MixerUnderTest t;
  t.name = name;
  t.channels = channels;
  t.new_activations = [&mixer] { return mixer.NewActivations(); };
  t.forward = [&mixer, ctx, mode](int64_t b, int64_t len, const float* h, float* out, LayerActivations& saved) {
    MixerForward(mixer, ctx, b, len, h, out, saved, mode);
  };
  t.backward = [&mixer, ctx](const float* h, const LayerActivations& saved, const float* dout, float* dh,
                             Scratch& scratch) { mixer.Backward(ctx, h, saved, dout, dh, scratch); };
  t.visit_parameters = [&mixer](const ParameterVisitor& visit) { mixer.VisitParameters("layer", visit); };
  return t;
}

}  // namespace

MixerUnderTest UnderTest(const std::string& name, const TokenMixer& mixer, int64_t channels,
                         const kernels::Context& ctx) {
  return UnderTestOf(name, mixer, channels, ctx, ForwardMode());
}

MixerUnderTest UnderTest(const std::string& name, const ChannelMixer& mixer, int64_t channels,
                         const kernels::Context& ctx, const ForwardMode& mode) {
  return UnderTestOf(name, mixer, channels, ctx, mode);
}

void RandomizeParameters(const MixerUnderTest& layer, uint64_t seed, double std) {
  layer.visit_parameters([&](const std::string&, const Parameter& p) {
    const std::vector<float> values = RandomVector(static_cast<size_t>(p.value.numel()), seed++, std);
    std::copy(values.begin(), values.end(), p.data());
  });
}

void ZeroGradients(const MixerUnderTest& layer) {
  layer.visit_parameters([](const std::string&, const Parameter& p) { std::memset(p.grad_data(), 0, p.grad.nbytes()); });
}

// L(h, params) = sum(forward(h) .* R) for a fixed random R, so dL/dout = R. Central differences with step
// eps = 1e-2 on inputs and weights of order 1: the truncation error is eps^2/6 |L'''| (~1e-5 here), the
// rounding error of the difference about sqrt(N) fp32 ulps of the outputs over 2 eps (~1e-4 for N of a few
// hundred outputs of order 1). So 2e-3 of the gradient's scale (plus 2e-4) separates them from any wrong
// term, sign or factor, which errs by a sizeable fraction of the scale.
void ExpectGradientsMatchFiniteDifferences(const MixerUnderTest& layer, int64_t b, int64_t t, uint64_t seed) {
  const size_t n = static_cast<size_t>(b * t * layer.channels);
  RandomizeParameters(layer, seed, 0.3);
  ZeroGradients(layer);
  std::vector<float> h = RandomVector(n, seed + 1000, 1.0);
  const std::vector<float> r = RandomVector(n, seed + 2000, 1.0);
  std::vector<float> out(n), dh(n);
  std::unique_ptr<LayerActivations> saved = layer.new_activations();
  Scratch scratch(&kernels::CpuAllocator::Default());
  layer.forward(b, t, h.data(), out.data(), *saved);
  layer.backward(h.data(), *saved, r.data(), dh.data(), scratch);
  const double eps = 1e-2;
  const auto loss = [&] {
    std::unique_ptr<LayerActivations> s = layer.new_activations();
    std::vector<float> o(n);
    layer.forward(b, t, h.data(), o.data(), *s);
    return Dot(o, r);
  };
  const auto expect_close = [&](const std::string& what, const std::vector<double>& numeric,
                                const std::vector<float>& analytic) {
    double scale = 0, worst = 0;
    size_t worst_at = 0;
    for (double x : numeric) scale = std::max(scale, std::fabs(x));
    for (size_t i = 0; i < numeric.size(); ++i) {
      const double err = std::fabs(numeric[i] - analytic[i]);
      if (err > worst) worst = err, worst_at = i;
    }
    EXPECT_LE(worst, 2e-3 * scale + 2e-4) << layer.name << ": " << what << " differs from finite differences at "
                                          << worst_at << " (analytic " << analytic[worst_at] << ", numeric "
                                          << numeric[worst_at] << ", scale " << scale << ")";
  };
  // The input gradient, every entry.
  std::vector<double> numeric(n);
  for (size_t i = 0; i < n; ++i) {
    const float keep = h[i];
    h[i] = static_cast<float>(keep + eps);
    const double plus = loss();
    h[i] = static_cast<float>(keep - eps);
    const double minus = loss();
    h[i] = keep;
    numeric[i] = (plus - minus) / (2 * eps);
  }
  expect_close("the input gradient", numeric, dh);
  // Each parameter's gradient at up to 24 entries spread over it.
  int checked = 0;
  layer.visit_parameters([&](const std::string& name, const Parameter& p) {
    const int64_t count = p.value.numel();
    const int64_t stride = std::max<int64_t>(1, count / 24);
    std::vector<double> num;
    std::vector<float> ana;
    for (int64_t i = 0; i < count; i += stride) {
      float* w = p.data() + i;
      const float keep = *w;
      *w = static_cast<float>(keep + eps);
      const double plus = loss();
      *w = static_cast<float>(keep - eps);
      const double minus = loss();
      *w = keep;
      num.push_back((plus - minus) / (2 * eps));
      ana.push_back(p.grad_data()[i]);
    }
    expect_close("the gradient of " + name, num, ana);
    ++checked;
  });
  EXPECT_GT(checked, 0) << layer.name << " visited no parameter";
}

void ExpectMicroBatchesIndependent(const MixerUnderTest& layer, int64_t b, int64_t t, int micro_batches,
                                   uint64_t seed) {
  const size_t n = static_cast<size_t>(b * t * layer.channels);
  RandomizeParameters(layer, seed, 0.3);
  std::vector<std::vector<float>> inputs, douts;
  for (int m = 0; m < micro_batches; ++m) {
    inputs.push_back(RandomVector(n, seed + 100 + m, 1.0));
    douts.push_back(RandomVector(n, seed + 200 + m, 1.0));
  }
  // Backwards in another order than the forwards: the last first, then the others from the front.
  std::vector<int> order;
  order.push_back(micro_batches - 1);
  for (int m = 0; m + 1 < micro_batches; ++m) order.push_back(m);
  Scratch scratch(&kernels::CpuAllocator::Default());

  // Each micro-batch alone (forward then backward), in the backward order: the reference.
  ZeroGradients(layer);
  std::vector<Run> alone(static_cast<size_t>(micro_batches));
  for (int m : order) {
    Run& run = alone[static_cast<size_t>(m)];
    run.out.resize(n), run.dh.resize(n);
    std::unique_ptr<LayerActivations> saved = layer.new_activations();
    layer.forward(b, t, inputs[m].data(), run.out.data(), *saved);
    scratch.Reset();
    layer.backward(inputs[m].data(), *saved, douts[m].data(), run.dh.data(), scratch);
  }
  const auto alone_grads = Gradients(layer);

  // All forwards first, each into its own activations, then the backwards.
  ZeroGradients(layer);
  std::vector<std::unique_ptr<LayerActivations>> held;
  std::vector<Run> together(static_cast<size_t>(micro_batches));
  for (int m = 0; m < micro_batches; ++m) {
    held.push_back(layer.new_activations());
    together[static_cast<size_t>(m)].out.resize(n);
    layer.forward(b, t, inputs[m].data(), together[static_cast<size_t>(m)].out.data(), *held.back());
  }
  for (int m : order) {
    together[static_cast<size_t>(m)].dh.resize(n);
    scratch.Reset();
    layer.backward(inputs[m].data(), *held[static_cast<size_t>(m)], douts[m].data(),
                   together[static_cast<size_t>(m)].dh.data(), scratch);
  }
  for (int m = 0; m < micro_batches; ++m) {
    EXPECT_EQ(together[m].out, alone[m].out) << layer.name << ": micro-batch " << m << "'s output";
    EXPECT_EQ(together[m].dh, alone[m].dh) << layer.name << ": micro-batch " << m << "'s input gradient";
  }
  const auto together_grads = Gradients(layer);
  for (const auto& [name, grad] : alone_grads) {
    EXPECT_EQ(together_grads.at(name), grad) << layer.name << ": the accumulated gradient of " << name;
  }
}

void ExpectRecomputeIsExact(const MixerUnderTest& layer, int64_t b, int64_t t, uint64_t seed) {
  const size_t n = static_cast<size_t>(b * t * layer.channels);
  RandomizeParameters(layer, seed, 0.3);
  const std::vector<float> h = RandomVector(n, seed + 1, 1.0), dout = RandomVector(n, seed + 2, 1.0);
  Scratch scratch(&kernels::CpuAllocator::Default());
  std::map<std::string, std::vector<float>> grads[2];
  Run runs[2];  // [0]: activations kept; [1]: released after the forward and recomputed
  for (int recompute = 0; recompute < 2; ++recompute) {
    Run& run = runs[recompute];
    ZeroGradients(layer);
    run.out.resize(n), run.dh.resize(n);
    std::unique_ptr<LayerActivations> saved = layer.new_activations();
    layer.forward(b, t, h.data(), run.out.data(), *saved);
    if (recompute == 1) {
      saved->Release();
      EXPECT_EQ(saved->bytes(), 0) << layer.name << ": released activations still hold memory";
      std::vector<float> again(n);
      layer.forward(b, t, h.data(), again.data(), *saved);
      EXPECT_EQ(again, run.out) << layer.name << ": the recomputed forward";
    }
    scratch.Reset();
    layer.backward(h.data(), *saved, dout.data(), run.dh.data(), scratch);
    grads[recompute] = Gradients(layer);
  }
  EXPECT_EQ(runs[1].dh, runs[0].dh) << layer.name << ": the input gradient after recomputation";
  for (const auto& [name, grad] : grads[0]) {
    EXPECT_EQ(grads[1].at(name), grad) << layer.name << ": the gradient of " << name << " after recomputation";
  }
}

void ExpectSavedBytes(const MixerUnderTest& layer, int64_t b, int64_t t, int64_t bytes_per_token) {
  const size_t n = static_cast<size_t>(b * t * layer.channels);
  const std::vector<float> h = RandomVector(n, 7, 1.0);
  std::vector<float> out(n);
  std::unique_ptr<LayerActivations> saved = layer.new_activations();
  EXPECT_EQ(saved->bytes(), 0) << layer.name;
  layer.forward(b, t, h.data(), out.data(), *saved);
  EXPECT_EQ(saved->bytes(), bytes_per_token * b * t) << layer.name;
}

}  // namespace lmf::model::testing
