// The mixture-of-experts layer's forward and forward + backward on the CPU (fp32) against a PyTorch MoE of
// the same shapes (tools/kernels/moe_cpu_peer.py: grouped token-choice, one GEMM per expert and matrix),
// measured in the same run on the same threads, in each peer of kernels/testing/torch_peers.h (the current
// PyTorch eager fp32, torch.compile and bf16 autocast; Debian's 1.13). Softmax-then-top-k router, SwiGLU
// experts, dropless.
//   bazel run -c opt //model/layers/moe:moe_benchmark -- --threads=2 [--torch_modes=eager,bf16]
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "base/thread_pool.h"
#include "kernels/testing/torch_peers.h"
#include "kernels/testing/timing.h"
#include "model/layers/moe/moe.h"

ABSL_FLAG(int, threads, 2, "threads (ours and PyTorch's)");
ABSL_FLAG(bool, torch, true, "also time PyTorch");

namespace lmf::model {
namespace {

struct Shape {
  std::string label;
  int64_t n, c, e, k, f;  // tokens, d_model, experts, top-k, expert width
};

// Best of 5 after a warm-up, in milliseconds (the peer times the same way).
template <typename F>
double Ms(F&& fn) {
  return 1e3 * kernels::Time(fn, 5);
}

int Run() {
  const int threads = absl::GetFlag(FLAGS_threads);
  ThreadPool pool(threads);
  const kernels::Context ctx = kernels::Context::Cpu(&pool);
  const std::vector<Shape> shapes = {
      {"tiny_moe", 16 * 32, 64, 8, 2, 48},          // experiments/configs/tiny_moe's layer, one micro-batch
      {"mixtral_like", 2048, 512, 8, 2, 1792},      // Mixtral's 8 experts top-2, scaled down 8x in width
      {"fine_grained", 2048, 512, 64, 8, 128},      // OLMoE / DeepSeek style: many narrow experts
  };
  std::string args;
  for (const Shape& s : shapes) absl::StrAppend(&args, " ", s.label, ":", s.n, ",", s.c, ",", s.e, ",", s.k, ",", s.f);
  std::vector<kernels::testing::TorchPeerRun> peers;
  if (absl::GetFlag(FLAGS_torch)) {
    absl::StatusOr<std::vector<kernels::testing::TorchPeerSpec>> specs = kernels::testing::TorchPeerSpecsFromFlags();
    if (!specs.ok()) {
      std::fprintf(stderr, "moe_benchmark: %s\n", std::string(specs.status().message()).c_str());
      return 2;
    }
    peers = kernels::testing::RunTorchPeers(*specs, "moe_cpu_peer.py", absl::StrCat(threads, args), threads);
  }
  std::printf("ours: lmforge MixtureOfExperts, %d threads\n", threads);
  std::printf("%-14s %10s %12s %14s\n", "shape", "fwd ms", "fwd+bwd ms", "tokens/s f+b");
  std::vector<std::pair<std::string, double>> ours_ms;  // for the peer table
  for (const Shape& s : shapes) {
    ModelConfig config = Cs336Config(64, 32, s.c, 1, 4, s.f);
    MoeSpec spec;
    spec.n_experts = s.e, spec.top_k = s.k, spec.d_expert = s.f;
    config.moe = spec;
    StepCounters counters;
    MixtureOfExperts layer(spec, config, ctx, kernels::DType::kF32, &counters);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    layer.VisitParameters("moe", [&](const std::string&, const Parameter& p) {
      for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] = normal(rng);
    });
    std::vector<float> h(s.n * s.c), out(s.n * s.c), dout(s.n * s.c), dh(s.n * s.c);
    std::normal_distribution<float> unit(0.0f, 1.0f);
    for (float& v : h) v = unit(rng);
    for (float& v : dout) v = unit(rng);
    std::unique_ptr<LayerActivations> saved = layer.NewActivations();
    Scratch scratch(ctx.allocator);
    const ForwardMode training = ForwardMode::Training(/*seed=*/1, /*step=*/0, /*first_token=*/0);
    const double fwd = Ms([&] { layer.Forward(ctx, 1, s.n, h.data(), out.data(), false, *saved, training); });
    const double fwdbwd = Ms([&] {
      layer.Forward(ctx, 1, s.n, h.data(), out.data(), false, *saved, training);
      scratch.Reset();
      layer.Backward(ctx, h.data(), *saved, dout.data(), dh.data(), scratch);
    });
    std::printf("%-14s %10.3f %12.3f %14.0f\n", s.label.c_str(), fwd, fwdbwd, s.n / (fwdbwd / 1e3));
    ours_ms.emplace_back(s.label + "_fwd", fwd);
    ours_ms.emplace_back(s.label + "_fwdbwd", fwdbwd);
  }
  if (!peers.empty()) {
    std::printf("\nPyTorch, same shapes, threads and run (vs: the peer's time over ours)\n%s",
                kernels::testing::FormatPeerTable(peers, ours_ms).c_str());
  }
  return 0;
}

}  // namespace
}  // namespace lmf::model

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("MoE layer forward and backward against a PyTorch MoE of the same shapes.");
  lmf::FlagsOptions options;
  options.checks = {lmf::AtLeast(FLAGS_threads, 1)};
  lmf::ParseFlags(argc, argv, options);
  return lmf::model::Run();
}
