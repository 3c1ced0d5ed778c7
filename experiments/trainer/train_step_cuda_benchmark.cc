// End-to-end training step on one GPU: GPT-2 small (124M: 12 layers, d_model 768, 12 heads, vocabulary
// 50304, T=1024) in bf16 (fp32 master weights and moments), random tokens, batch B. One step is what the
// trainer runs (experiments/trainer/trainer.cc): zero grad, forward + loss, backward, global grad norm,
// clipping and AdamW (ModelOptimizer, which also refreshes the bf16 weights). Timed as the median of
// --steps steps after --warmup, each ended by a stream synchronise and measured with a steady clock.
// Prints ms/step, tokens/s and MFU against the device's dense bf16 peak (GpuPeakFlops: 989.4 TFLOP/s on
// an H200) with the model's training FLOPs per token from model/accounting; then runs the PyTorch peer in
// the same run (tools/gpu_peers/nanogpt_peer.py: nanoGPT's GPT-2 with torch.compile, SDPA, bf16 autocast,
// fused AdamW, same B and T) and prints the ratio of our tokens/s to PyTorch's. With --phases, also the
// median time of each phase (forward + loss, backward, optimizer) from separate steps synchronised after
// every phase, and the device memory the caching allocator holds. With --gemm_autotune, the same steps
// again with run.gemm_autotune (each GEMM shape's fastest cuBLASLt candidate) and its ratio to the default
// and to PyTorch. With --op_profile, the device time of every
// op per step (kernels/cuda/op_profiler.h) from separate steps, and per kind of work (GEMM, attention,
// optimizer, the rest) with achieved TFLOP/s, beside the same split of the PyTorch peer's kernels
// (torch.profiler), so the largest gap shows first.
//
//   ./bazelw run //experiments/trainer:train_step_cuda_benchmark -- [--batch=16] [--seq=1024]
//       [--warmup=3] [--steps=10] [--peer=true] [--phases=true] [--gemm_autotune=true]
//       [--op_profile=true]
// Without a CUDA device it prints "no CUDA device, nothing measured" and exits 0.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "config/optimizer.pb.h"
#include "experiments/trainer/optimizer.h"
#include "experiments/trainer/training_device.h"
#include "kernels/core/context.h"
#include "kernels/cuda/bench_util.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/op_profiler.h"
#include "kernels/memory/memory.h"
#include "model/accounting/accounting.h"
#include "model/config/config.h"
#include "model/language_model/language_model.h"

ABSL_FLAG(int, batch, 16, "B: sequences per step");
ABSL_FLAG(int, seq, 1024, "T: tokens per sequence (at most 1024, GPT-2's context)");
ABSL_FLAG(int, warmup, 3, "untimed steps first");
ABSL_FLAG(int, steps, 10, "timed steps (the median is reported)");
ABSL_FLAG(bool, peer, true, "also run the PyTorch peer (python3 tools/gpu_peers/nanogpt_peer.py)");
ABSL_FLAG(bool, phases, true, "also time forward + loss, backward and optimizer separately");
ABSL_FLAG(bool, gemm_autotune, true,
          "also time the step with run.gemm_autotune (the fastest of cuBLASLt's candidates per GEMM shape)");
ABSL_FLAG(bool, op_profile, true, "also print the device time per op and per kind of work (ours and PyTorch's)");

namespace lmf::experiments {
namespace {

using Clock = std::chrono::steady_clock;

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The kinds of work a step's time is split into, for comparing with the PyTorch peer's kernels (the peer
// classifies its kernels by name the same way: tools/gpu_peers/nanogpt_peer.py, kernel_kind).
constexpr const char* kKinds[] = {"gemm", "attention", "optimizer", "other"};

const char* KindOfOp(const std::string& op) {
  if (op.rfind("Matmul", 0) == 0) return "gemm";
  if (op.rfind("Attention", 0) == 0) return "attention";
  if (op.find("AdamW") != std::string::npos || op.find("GradNorm") != std::string::npos) return "optimizer";
  return "other";
}

int Main() {
  if (kernels::cuda::CudaDeviceCount() == 0) {
    std::printf("no CUDA device, nothing measured\n");
    return 0;
  }
  const int64_t b = absl::GetFlag(FLAGS_batch), t = absl::GetFlag(FLAGS_seq);
  const int warmup = absl::GetFlag(FLAGS_warmup), steps = absl::GetFlag(FLAGS_steps);
  if (b < 1 || t < 1 || t > 1024 || warmup < 0 || steps < 1) {
    std::fprintf(stderr, "train_step_cuda_benchmark: need --batch >= 1, 1 <= --seq <= 1024, --steps >= 1\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<kernels::cuda::CudaContext>> cuda = kernels::cuda::CudaContext::Create(0);
  if (!cuda.ok()) {
    std::fprintf(stderr, "train_step_cuda_benchmark: %s\n", std::string(cuda.status().message()).c_str());
    return 1;
  }
  const kernels::Context ctx = (*cuda)->context();
  const model::ModelConfig config = model::Gpt2Config(50304, 1024, 768, 12, 12);
  absl::StatusOr<std::unique_ptr<model::LanguageModel>> created =
      model::LanguageModel::Create(config, ctx, kernels::DType::kBF16);
  if (!created.ok()) {
    std::fprintf(stderr, "train_step_cuda_benchmark: %s\n", std::string(created.status().message()).c_str());
    return 1;
  }
  model::LanguageModel& model = **created;
  model.InitializeParameters(1337);
  config::OptimizerConfig optimizer_config;
  optimizer_config.set_lr(6e-4);
  optimizer_config.mutable_adamw()->set_beta1(0.9);
  optimizer_config.mutable_adamw()->set_beta2(0.95);
  optimizer_config.mutable_adamw()->set_eps(1e-8);
  optimizer_config.mutable_adamw()->set_weight_decay(0.1);
  optimizer_config.set_grad_clip(1.0);
  ModelOptimizer optimizer(optimizer_config, model);

  std::mt19937 rng(7);
  std::vector<int32_t> ids(b * t), targets(b * t);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 50257);
  for (int32_t& id : targets) id = static_cast<int32_t>(rng() % 50257);

  double last_loss = 0;
  // One training step; with `phase_ms`, synchronised after each phase and its times appended.
  auto step = [&](std::vector<double>* phase_ms) {
    Clock::time_point started = Clock::now();
    auto end_phase = [&](int phase) {
      if (phase_ms == nullptr) return;
      kernels::Synchronize(ctx);
      phase_ms[phase].push_back(MillisecondsSince(started));
      started = Clock::now();
    };
    model.ZeroGrad();
    absl::StatusOr<double> loss = model.ForwardWithLoss(ids.data(), targets.data(), b, t);
    if (!loss.ok()) {
      std::fprintf(stderr, "train_step_cuda_benchmark: %s\n", std::string(loss.status().message()).c_str());
      std::exit(1);
    }
    last_loss = *loss;
    end_phase(0);
    model.Backward();
    end_phase(1);
    optimizer.Step(model, 6e-4);
    end_phase(2);
    kernels::Synchronize(ctx);
  };
  // `warmup` untimed steps, then the ms of each of `steps` timed ones.
  auto time_steps = [&] {
    for (int i = 0; i < warmup; ++i) step(nullptr);
    std::vector<double> ms;
    for (int i = 0; i < steps; ++i) {
      const Clock::time_point started = Clock::now();
      step(nullptr);
      ms.push_back(MillisecondsSince(started));
    }
    return ms;
  };
  std::vector<double> ms = time_steps();
  std::sort(ms.begin(), ms.end());
  const double median_ms = ms[ms.size() / 2];
  const double tokens_per_second = static_cast<double>(b * t) / (median_ms * 1e-3);
  const double flops_per_token = model::CountFlopsPerToken(config, t).training();
  // MFU against the device's dense bf16 peak from the trainer's table (989.4 TFLOP/s on an H200).
  const std::string device_name = (*cuda)->properties().name;
  const std::optional<double> peak = GpuPeakFlops(device_name, config::RunConfig::BF16);
  auto mfu = [&](double tokens_per_s) {
    if (!peak.has_value()) return absl::StrCat("MFU n/a (no known bf16 peak for ", device_name, ")");
    return absl::StrFormat("MFU %.1f%% of %.1f TFLOP/s", 100 * tokens_per_s * flops_per_token / *peak,
                           *peak * 1e-12);
  };

  std::printf("GPT-2 small (%.1fM parameters), bf16 activations, fp32 master weights; B=%ld T=%ld; %s\n",
              static_cast<double>(model.parameter_count()) * 1e-6, static_cast<long>(b), static_cast<long>(t),
              device_name.c_str());
  std::printf("training FLOPs per token (model/accounting): %.4g; last loss %.4f\n", flops_per_token,
              last_loss);
  std::printf(
      "lmforge: %.2f ms/step (median of %d, min %.2f, max %.2f), %.0f tokens/s, %s\n", median_ms, steps,
      ms.front(), ms.back(), tokens_per_second, mfu(tokens_per_second).c_str());
  // stdout is a file under tools/gpu_run.sh, so fully buffered: flush our figures before anything that can
  // run into the benchmark's time limit (timeout's SIGTERM ends the process without flushing stdio).
  std::fflush(stdout);
  if (absl::GetFlag(FLAGS_phases)) {
    std::vector<double> phase_ms[3];
    for (int i = 0; i < steps; ++i) step(phase_ms);
    const kernels::cuda::CachingAllocatorStats memory = (*cuda)->allocator().stats();
    std::printf(
        "phases (median of %d, synchronised after each): zero grad + forward + loss %.2f ms, backward %.2f "
        "ms, grad norm + AdamW %.2f ms; device memory %.2f GiB in use, %.2f GiB cached\n",
        steps, Median(phase_ms[0]), Median(phase_ms[1]), Median(phase_ms[2]),
        static_cast<double>(memory.bytes_in_use) / (1 << 30),
        static_cast<double>(memory.bytes_cached) / (1 << 30));
    std::fflush(stdout);
  }
  // The same steps with every GEMM shape autotuned (tuned on the warm-up steps); the plans of the default
  // (the heuristic's first) are kept apart, so the op profile below times the default again.
  double tuned_tokens_per_second = 0;
  if (absl::GetFlag(FLAGS_gemm_autotune)) {
    (*cuda)->set_gemm_autotune(true);
    const double tuned_median = Median(time_steps());
    (*cuda)->set_gemm_autotune(false);
    tuned_tokens_per_second = static_cast<double>(b * t) / (tuned_median * 1e-3);
    std::printf("with run.gemm_autotune: %.2f ms/step (median of %d), %.0f tokens/s, %s; %.3fx the default\n",
                tuned_median, steps, tuned_tokens_per_second, mfu(tuned_tokens_per_second).c_str(),
                median_ms / tuned_median);
    std::fflush(stdout);
  }
  // ms per step of each kind of work (ours), filled by the op profile.
  std::map<std::string, double> kind_ms;
  const bool op_profile = absl::GetFlag(FLAGS_op_profile);
  if (op_profile) {
    absl::StatusOr<std::unique_ptr<kernels::cuda::OpProfiler>> profiler = kernels::cuda::OpProfiler::Start(ctx);
    absl::StatusOr<kernels::OpProfile> profile = profiler.status();
    if (profiler.ok()) {
      for (int i = 0; i < steps; ++i) step(nullptr);
      profile = (*profiler)->Finish();
    }
    if (!profile.ok()) {
      std::printf("op profile: %s\n", std::string(profile.status().message()).c_str());
    } else {
      std::printf("device time per op (%d profiled steps, a CUDA event after each op):\n%s", steps,
                  kernels::FormatOpProfile(*profile, steps).c_str());
      for (const kernels::OpTime& op : profile->ops) kind_ms[KindOfOp(op.op)] += op.total_ms / steps;
      kind_ms["other"] += profile->outside_ops_ms / steps;
    }
    std::fflush(stdout);
  }
  const model::FlopsPerToken flops = model::CountFlopsPerToken(config, t);
  const double tokens = static_cast<double>(b * t);
  // Achieved TFLOP/s of a kind's model FLOPs (3x the forward's, as MFU counts them) in `ms` per step.
  auto tflops = [&](const std::string& kind, double ms) -> std::string {
    const double per_token = kind == "gemm" ? 3 * flops.matmul_forward
                             : kind == "attention" ? 3 * flops.attention_forward
                                                   : 0.0;
    if (per_token == 0 || !(ms > 0)) return "";
    return absl::StrFormat(" (%.0f TFLOP/s)", per_token * tokens / (ms * 1e-3) * 1e-12);
  };
  auto print_kinds = [&](const char* who, const std::map<std::string, double>& ms) {
    std::string line = absl::StrCat(who, " ms/step by kind:");
    for (const char* kind : kKinds) {
      auto it = ms.find(kind);
      absl::StrAppend(&line, absl::StrFormat(" %s %.3f%s;", kind, it == ms.end() ? 0.0 : it->second,
                                             tflops(kind, it == ms.end() ? 0.0 : it->second)));
    }
    std::printf("%s\n", line.c_str());
  };
  if (op_profile && !kind_ms.empty()) print_kinds("lmforge", kind_ms);
  std::fflush(stdout);

  if (!absl::GetFlag(FLAGS_peer)) return 0;
  absl::StatusOr<std::map<std::string, double>> peer = kernels::cuda::bench::RunPeer(
      "nanogpt_peer.py",
      absl::StrCat("--batch ", b, " --seq ", t, op_profile ? absl::StrCat(" --kernel-kinds ", steps) : ""));
  if (!peer.ok()) {
    std::printf("PyTorch peer: %s\nratio ours/PyTorch: n/a\n", std::string(peer.status().message()).c_str());
    return 0;
  }
  auto it = peer->find("train_step_ms");
  if (it == peer->end() || !(it->second > 0)) {
    std::printf("PyTorch peer printed no train_step_ms line\nratio ours/PyTorch: n/a\n");
    return 0;
  }
  const double peer_tokens_per_second = static_cast<double>(b * t) / (it->second * 1e-3);
  std::printf(
      "PyTorch (nanoGPT, torch.compile, SDPA, bf16 autocast, fused AdamW): %.2f ms/step, %.0f tokens/s, "
      "%s\n",
      it->second, peer_tokens_per_second, mfu(peer_tokens_per_second).c_str());
  std::printf("ratio ours/PyTorch (tokens/s): %.2fx\n", tokens_per_second / peer_tokens_per_second);
  if (tuned_tokens_per_second > 0) {
    std::printf("ratio ours/PyTorch with run.gemm_autotune (tokens/s): %.2fx\n",
                tuned_tokens_per_second / peer_tokens_per_second);
  }
  if (op_profile) {
    std::map<std::string, double> peer_kind_ms;
    for (const char* kind : kKinds) {
      auto k = peer->find(absl::StrCat("peer_", kind, "_ms"));
      if (k != peer->end()) peer_kind_ms[kind] = k->second;
    }
    if (peer_kind_ms.empty()) {
      std::printf("PyTorch ms/step by kind: n/a (the peer printed no peer_<kind>_ms lines)\n");
    } else {
      print_kinds("PyTorch", peer_kind_ms);
    }
  }
  return 0;
}

}  // namespace
}  // namespace lmf::experiments

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "One bf16 training step of GPT-2 small on one GPU: ms/step, tokens/s and MFU, against the "
      "PyTorch nanoGPT peer measured in the same run.");
  lmf::ParseFlags(argc, argv);
  return lmf::experiments::Main();
}
