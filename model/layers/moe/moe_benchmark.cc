// The mixture-of-experts layer's forward and forward + backward on the CPU (fp32) against a PyTorch MoE of
// the same shapes (tools/kernels/moe_cpu_peer.py: grouped token-choice, one GEMM per expert and matrix),
// measured in the same run on the same threads, in each peer of kernels/testing/torch_peers.h (the current
// PyTorch eager fp32, torch.compile and bf16 autocast; Debian's 1.13). Softmax-then-top-k router, SwiGLU
// experts, dropless. Also prints our GEMM GFLOP/s in the forward + backward against the measured FMA peak
// (kernels/cpu/peak_flops.h), and with --op_profile the time per op of one more forward + backward.
//   bazel run -c opt //model/layers/moe:moe_benchmark -- --threads=2 [--torch_modes=eager,bf16] [--op_profile]
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
#include "kernels/cpu/peak_flops.h"
#include "kernels/profile/cpu_op_profiler.h"
#include "kernels/testing/torch_peers.h"
#include "kernels/testing/timing.h"
#include "model/layers/moe/moe.h"

ABSL_FLAG(int, threads, 2, "threads (ours and PyTorch's)");
ABSL_FLAG(bool, torch, true, "also time PyTorch");
ABSL_FLAG(bool, op_profile, false, "also print the time per op of one more forward + backward of ours");

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

// The op table (kernels/profile/cpu_op_profiler.h) of one call of fn.
template <typename F>
std::string OpProfile(const kernels::Context& ctx, F&& fn) {
  absl::StatusOr<std::unique_ptr<kernels::CpuOpProfiler>> profiler = kernels::CpuOpProfiler::Start(ctx);
  if (!profiler.ok()) return absl::StrCat("op profile: ", profiler.status().ToString(), "\n");
  fn();
  absl::StatusOr<kernels::OpProfile> ops = (*profiler)->Finish();
  if (!ops.ok()) return absl::StrCat("op profile: ", ops.status().ToString(), "\n");
  return kernels::FormatOpProfile(*ops, 1);
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
  const kernels::CpuPeak& peak = kernels::CpuFmaPeak(threads);
  std::printf("ours: lmforge MixtureOfExperts, %d threads; GF/s: GEMM FLOPs of fwd+bwd over its time (%s FMA peak "
              "%.1f GF/s)\n", threads, peak.isa, peak.flops_per_second / 1e9);
  std::printf("%-14s %10s %12s %14s %8s %6s\n", "shape", "fwd ms", "fwd+bwd ms", "tokens/s f+b", "GF/s", "peak");
  std::string profiles;
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
    const auto step = [&] {
      layer.Forward(ctx, 1, s.n, h.data(), out.data(), false, *saved, training);
      scratch.Reset();
      layer.Backward(ctx, h.data(), *saved, dout.data(), dh.data(), scratch);
    };
    const double fwdbwd = Ms(step);
    counters.matmul_flops = 0;
    step();
    const double gflops = counters.matmul_flops / (fwdbwd / 1e3) / 1e9;
    std::printf("%-14s %10.3f %12.3f %14.0f %8.1f %5.0f%%\n", s.label.c_str(), fwd, fwdbwd, s.n / (fwdbwd / 1e3),
                gflops, 100 * gflops * 1e9 / peak.flops_per_second);
    if (absl::GetFlag(FLAGS_op_profile)) {
      absl::StrAppend(&profiles, "\n", s.label, ": ours, one forward + backward, per op (wall time)\n",
                      OpProfile(ctx, step));
    }
    ours_ms.emplace_back(s.label + "_fwd", fwd);
    ours_ms.emplace_back(s.label + "_fwdbwd", fwdbwd);
  }
  std::printf("%s", profiles.c_str());
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
