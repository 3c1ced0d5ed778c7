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

// nanoGPT's AdamW for GPT-2 small: lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1, clipping at 1.
config::OptimizerConfig Gpt2OptimizerConfig() {
  config::OptimizerConfig optimizer_config;
  optimizer_config.set_lr(6e-4);
  optimizer_config.mutable_adamw()->set_beta1(0.9);
  optimizer_config.mutable_adamw()->set_beta2(0.95);
  optimizer_config.mutable_adamw()->set_eps(1e-8);
  optimizer_config.mutable_adamw()->set_weight_decay(0.1);
  optimizer_config.set_grad_clip(1.0);
  return optimizer_config;
}

// One run of the benchmark on a model and its optimizer: Run times the steps and calls the optional parts
// (phases, autotuned GEMMs, op profile, the PyTorch peer) in order, printing each as it finishes.
class StepBenchmark {
 public:
  StepBenchmark(kernels::cuda::CudaContext& cuda, const model::ModelConfig& config, model::LanguageModel& model,
                ModelOptimizer& optimizer, int64_t b, int64_t t, int warmup, int steps)
      : cuda_(cuda), ctx_(cuda.context()), config_(config), model_(model), optimizer_(optimizer), b_(b), t_(t),
        warmup_(warmup), steps_(steps), ids_(b * t), targets_(b * t),
        flops_per_token_(model::CountFlopsPerToken(config, t).training()), device_name_(cuda.properties().name),
        peak_(GpuPeakFlops(device_name_, config::RunConfig::BF16)) {
    std::mt19937 rng(7);
    for (int32_t& id : ids_) id = static_cast<int32_t>(rng() % 50257);
    for (int32_t& id : targets_) id = static_cast<int32_t>(rng() % 50257);
  }

  int Run() {
    std::vector<double> ms = TimeSteps();
    std::sort(ms.begin(), ms.end());
    const double median_ms = ms[ms.size() / 2];
    const double tokens_per_second = Tokens() / (median_ms * 1e-3);
    std::printf("GPT-2 small (%.1fM parameters), bf16 activations, fp32 master weights; B=%ld T=%ld; %s\n",
                static_cast<double>(model_.parameter_count()) * 1e-6, static_cast<long>(b_), static_cast<long>(t_),
                device_name_.c_str());
    std::printf("training FLOPs per token (model/accounting): %.4g; last loss %.4f\n", flops_per_token_,
                last_loss_);
    std::printf(
        "lmforge: %.2f ms/step (median of %d, min %.2f, max %.2f), %.0f tokens/s, %s\n", median_ms, steps_,
        ms.front(), ms.back(), tokens_per_second, Mfu(tokens_per_second).c_str());
    // stdout is a file under tools/gpu_run.sh, so fully buffered: flush our figures before anything that can
    // run into the benchmark's time limit (timeout's SIGTERM ends the process without flushing stdio).
    std::fflush(stdout);
    if (absl::GetFlag(FLAGS_phases)) PrintPhases();
    const double tuned_tokens_per_second = absl::GetFlag(FLAGS_gemm_autotune) ? TimeAutotuned(median_ms) : 0;
    const bool op_profile = absl::GetFlag(FLAGS_op_profile);
    if (op_profile) {
      // ms per step of each kind of work (ours).
      const std::map<std::string, double> kind_ms = ProfileOps();
      if (!kind_ms.empty()) PrintKinds("lmforge", kind_ms);
    }
    std::fflush(stdout);
    if (absl::GetFlag(FLAGS_peer)) CompareWithPeer(tokens_per_second, tuned_tokens_per_second, op_profile);
    return 0;
  }

 private:
  double Tokens() const { return static_cast<double>(b_ * t_); }

  // One training step; with `phase_ms`, synchronised after each phase and its times appended.
  void Step(std::vector<double>* phase_ms) {
    Clock::time_point started = Clock::now();
    auto end_phase = [&](int phase) {
      if (phase_ms == nullptr) return;
      kernels::Synchronize(ctx_);
      phase_ms[phase].push_back(MillisecondsSince(started));
      started = Clock::now();
    };
    model_.ZeroGrad();
    absl::StatusOr<double> loss = model_.ForwardWithLoss(ids_.data(), targets_.data(), b_, t_);
    if (!loss.ok()) {
      std::fprintf(stderr, "train_step_cuda_benchmark: %s\n", std::string(loss.status().message()).c_str());
      std::exit(1);
    }
    last_loss_ = *loss;
    end_phase(0);
    model_.Backward();
    end_phase(1);
    optimizer_.Step(model_, 6e-4);
    end_phase(2);
    kernels::Synchronize(ctx_);
  }

  // `warmup` untimed steps, then the ms of each of `steps` timed ones.
  std::vector<double> TimeSteps() {
    for (int i = 0; i < warmup_; ++i) Step(nullptr);
    std::vector<double> ms;
    for (int i = 0; i < steps_; ++i) {
      const Clock::time_point started = Clock::now();
      Step(nullptr);
      ms.push_back(MillisecondsSince(started));
    }
    return ms;
  }

  // MFU against the device's dense bf16 peak from the trainer's table (989.4 TFLOP/s on an H200).
  std::string Mfu(double tokens_per_s) const {
    if (!peak_.has_value()) return absl::StrCat("MFU n/a (no known bf16 peak for ", device_name_, ")");
    return absl::StrFormat("MFU %.1f%% of %.1f TFLOP/s", 100 * tokens_per_s * flops_per_token_ / *peak_,
                           *peak_ * 1e-12);
  }

  void PrintPhases() {
    std::vector<double> phase_ms[3];
    for (int i = 0; i < steps_; ++i) Step(phase_ms);
    const kernels::cuda::CachingAllocatorStats memory = cuda_.allocator().stats();
    std::printf(
        "phases (median of %d, synchronised after each): zero grad + forward + loss %.2f ms, backward %.2f "
        "ms, grad norm + AdamW %.2f ms; device memory %.2f GiB in use, %.2f GiB cached\n",
        steps_, Median(phase_ms[0]), Median(phase_ms[1]), Median(phase_ms[2]),
        static_cast<double>(memory.bytes_in_use) / (1 << 30),
        static_cast<double>(memory.bytes_cached) / (1 << 30));
    std::fflush(stdout);
  }

  // The same steps with every GEMM shape autotuned (tuned on the warm-up steps); the plans of the default
  // (the heuristic's first) are kept apart, so the op profile times the default again. Its tokens/s.
  double TimeAutotuned(double median_ms) {
    cuda_.set_gemm_autotune(true);
    const double tuned_median = Median(TimeSteps());
    cuda_.set_gemm_autotune(false);
    const double tuned_tokens_per_second = Tokens() / (tuned_median * 1e-3);
    std::printf("with run.gemm_autotune: %.2f ms/step (median of %d), %.0f tokens/s, %s; %.3fx the default\n",
                tuned_median, steps_, tuned_tokens_per_second, Mfu(tuned_tokens_per_second).c_str(),
                median_ms / tuned_median);
    std::fflush(stdout);
    return tuned_tokens_per_second;
  }

  // The device time of every op over `steps` profiled steps, printed; the ms per step of each kind of work
  // (empty when the profile failed).
  std::map<std::string, double> ProfileOps() {
    std::map<std::string, double> kind_ms;
    absl::StatusOr<std::unique_ptr<kernels::cuda::OpProfiler>> profiler = kernels::cuda::OpProfiler::Start(ctx_);
    absl::StatusOr<kernels::OpProfile> profile = profiler.status();
    if (profiler.ok()) {
      for (int i = 0; i < steps_; ++i) Step(nullptr);
      profile = (*profiler)->Finish();
    }
    if (!profile.ok()) {
      std::printf("op profile: %s\n", std::string(profile.status().message()).c_str());
    } else {
      std::printf("device time per op (%d profiled steps, a CUDA event after each op):\n%s", steps_,
                  kernels::FormatOpProfile(*profile, steps_).c_str());
      for (const kernels::OpTime& op : profile->ops) kind_ms[KindOfOp(op.op)] += op.total_ms / steps_;
      kind_ms["other"] += profile->outside_ops_ms / steps_;
    }
    std::fflush(stdout);
    return kind_ms;
  }

  // Achieved TFLOP/s of a kind's model FLOPs (3x the forward's, as MFU counts them) in `ms` per step.
  std::string KindTflops(const std::string& kind, double ms) const {
    const model::FlopsPerToken flops = model::CountFlopsPerToken(config_, t_);
    const double per_token = kind == "gemm" ? 3 * flops.matmul_forward
                             : kind == "attention" ? 3 * flops.attention_forward
                                                   : 0.0;
    if (per_token == 0 || !(ms > 0)) return "";
    return absl::StrFormat(" (%.0f TFLOP/s)", per_token * Tokens() / (ms * 1e-3) * 1e-12);
  }

  void PrintKinds(const char* who, const std::map<std::string, double>& ms) const {
    std::string line = absl::StrCat(who, " ms/step by kind:");
    for (const char* kind : kKinds) {
      auto it = ms.find(kind);
      absl::StrAppend(&line, absl::StrFormat(" %s %.3f%s;", kind, it == ms.end() ? 0.0 : it->second,
                                             KindTflops(kind, it == ms.end() ? 0.0 : it->second)));
    }
    std::printf("%s\n", line.c_str());
  }

  // The PyTorch peer on the same B and T: its time, our ratios to it, and its time per kind of work.
  void CompareWithPeer(double tokens_per_second, double tuned_tokens_per_second, bool op_profile) {
    absl::StatusOr<std::map<std::string, double>> peer = kernels::cuda::bench::RunPeer(
        "nanogpt_peer.py",
        absl::StrCat("--batch ", b_, " --seq ", t_, op_profile ? absl::StrCat(" --kernel-kinds ", steps_) : ""));
    if (!peer.ok()) {
      std::printf("PyTorch peer: %s\nratio ours/PyTorch: n/a\n", std::string(peer.status().message()).c_str());
      return;
    }
    auto it = peer->find("train_step_ms");
    if (it == peer->end() || !(it->second > 0)) {
      std::printf("PyTorch peer printed no train_step_ms line\nratio ours/PyTorch: n/a\n");
      return;
    }
    const double peer_tokens_per_second = Tokens() / (it->second * 1e-3);
    std::printf(
        "PyTorch (nanoGPT, torch.compile, SDPA, bf16 autocast, fused AdamW): %.2f ms/step, %.0f tokens/s, "
        "%s\n",
        it->second, peer_tokens_per_second, Mfu(peer_tokens_per_second).c_str());
    std::printf("ratio ours/PyTorch (tokens/s): %.2fx\n", tokens_per_second / peer_tokens_per_second);
    if (tuned_tokens_per_second > 0) {
      std::printf("ratio ours/PyTorch with run.gemm_autotune (tokens/s): %.2fx\n",
                  tuned_tokens_per_second / peer_tokens_per_second);
    }
    if (!op_profile) return;
    std::map<std::string, double> peer_kind_ms;
    for (const char* kind : kKinds) {
      auto k = peer->find(absl::StrCat("peer_", kind, "_ms"));
      if (k != peer->end()) peer_kind_ms[kind] = k->second;
    }
    if (peer_kind_ms.empty()) {
      std::printf("PyTorch ms/step by kind: n/a (the peer printed no peer_<kind>_ms lines)\n");
    } else {
      PrintKinds("PyTorch", peer_kind_ms);
    }
  }

  kernels::cuda::CudaContext& cuda_;
  const kernels::Context ctx_;
  const model::ModelConfig& config_;
  model::LanguageModel& model_;
  ModelOptimizer& optimizer_;
  const int64_t b_, t_;
  const int warmup_, steps_;
  std::vector<int32_t> ids_, targets_;
  const double flops_per_token_;
  const std::string device_name_;
  const std::optional<double> peak_;
  double last_loss_ = 0;
};

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
  const model::ModelConfig config = model::Gpt2Config(50304, 1024, 768, 12, 12);
  absl::StatusOr<std::unique_ptr<model::LanguageModel>> created =
      model::LanguageModel::Create(config, (*cuda)->context(), kernels::DType::kBF16);
  if (!created.ok()) {
    std::fprintf(stderr, "train_step_cuda_benchmark: %s\n", std::string(created.status().message()).c_str());
    return 1;
  }
  model::LanguageModel& model = **created;
  model.InitializeParameters(1337);
  ModelOptimizer optimizer(Gpt2OptimizerConfig(), model);
  return StepBenchmark(**cuda, config, model, optimizer, b, t, warmup, steps).Run();
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
