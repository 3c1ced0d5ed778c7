// One training step (forward, backward, clip, AdamW) of lmforge's LanguageModel against the same model in
// PyTorch (tools/model/torch_train_step.py, same thread count), measured in one run on one machine: the
// current PyTorch (tools/peers/setup_torch.sh) in eager fp32, torch.compile fp32 and eager bf16 autocast,
// and Debian's PyTorch 1.13 in eager fp32 (kernels/testing/torch_peers.h), each row naming its version.
// Prints s/step and tokens/s for each, our speed over each, and achieved FLOP/s (model FLOPs from
// model/accounting) as a fraction of this CPU's sgemm peak, measured here with the same GEMM and threads.
// Ours runs in fp32 and in bf16 (--precisions; bf16 storage with fp32 math, kernels/cpu/bf16.h), and the
// header names the CPU's ISA (AVX2 or AVX-512 forms; whether it has AVX512-BF16 or AMX-BF16 units).
//
//   ./bazelw run --config=opt //model:train_step_benchmark -- --threads=2
//   flags: --threads (2), --steps (timed steps, 3), --shapes (gpt2_t64,gpt2_t256,small_t64,small_t256; also
//          tiny_t64, the quickstart's sizes),
//          --precisions (fp32,bf16: ours), --torch (true: also run PyTorch), --torch_python, --torch_modes (eager,compile,bf16),
//          --debian_python (/usr/bin/python3; "" for none), --torch_script (path),
//          --op_profile (false: also time every op of one more step of ours,
//          kernels/profile/cpu_op_profiler.h, and print the table after the shape's row)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "base/thread_pool.h"
#include "kernels/core/context.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/peak_flops.h"
#include "kernels/matmul/matmul.h"
#include "kernels/profile/cpu_op_profiler.h"
#include "kernels/testing/cpu_peer.h"
#include "kernels/testing/torch_peers.h"
#include "model/accounting/accounting.h"
#include "model/language_model/language_model.h"
#include "model/optimizer/adamw.h"

ABSL_FLAG(int, threads, 2, "CPU threads for both lmforge and PyTorch");
ABSL_FLAG(int, steps, 3, "timed training steps per shape (after one warm-up step)");
ABSL_FLAG(std::string, shapes, "gpt2_t64,gpt2_t256,small_t64,small_t256", "shapes to run");
ABSL_FLAG(std::string, precisions, "fp32,bf16", "lmforge's precisions to time (fp32, bf16)");
ABSL_FLAG(bool, torch, true, "also time PyTorch");
ABSL_FLAG(bool, op_profile, false, "also print the time per op of one more step of ours");
ABSL_FLAG(std::string, torch_script, "", "tools/model/torch_train_step.py (default: found from the workspace)");

namespace lmf::model {
namespace {

struct Shape {
  std::string name;
  ModelConfig config;
  int64_t b, t;
};

Shape ShapeByName(const std::string& name) {
  // GPT-2 small with the vocabulary (50257) padded to 50304 rows (a multiple of 64); a 6-layer, 384-wide
  // GPT-2-style model with the same vocabulary.
  ModelConfig gpt2 = Gpt2Config(50257, 1024, 768, 12, 12);
  gpt2.padded_vocab_size = 50304;
  ModelConfig small = Gpt2Config(50257, 1024, 384, 6, 6);
  small.padded_vocab_size = 50304;
  if (name == "gpt2_t64") return {name, gpt2, 4, 64};
  if (name == "gpt2_t256") return {name, gpt2, 4, 256};
  if (name == "small_t64") return {name, small, 4, 64};
  if (name == "small_t256") return {name, small, 4, 256};
  // The quickstart's largest model's sizes (d_model 72, 4 layers, 9 heads of 8, 64-token context, 16
  // sequences, a 512-token vocabulary) in the GPT-2 style both sides build.
  if (name == "tiny_t64") return {name, Gpt2Config(512, 64, 72, 4, 9), 16, 64};
  std::fprintf(stderr, "unknown shape %s\n", name.c_str());
  std::exit(2);
}

// Which bf16 matrix units this CPU has (our bf16 path computes in fp32 on every CPU; PyTorch's autocast uses
// them where present).
const char* Bf16Units() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("amx-bf16")) return "AMX-BF16 and AVX512-BF16";
  if (__builtin_cpu_supports("avx512bf16")) return "AVX512-BF16";
  return "none (no AVX512-BF16, no AMX)";
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best GFLOP/s of a 2048^3 sgemm over a few runs, with the GEMM the model uses (kernels/matmul).
double MeasureSgemmPeak(const kernels::Context& ctx) {
  const int64_t n = 2048;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.0f);
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    const double start = Now();
    kernels::MatmulParams p;
    p.M = p.N = p.K = n;
    p.a = a.data(), p.lda = n, p.b = b.data(), p.ldb = n, p.c = c.data(), p.ldc = n;
    kernels::Matmul(ctx, p);
    best = std::max(best, 2.0 * n * n * n / (Now() - start) / 1e9);
  }
  return best;
}

// Mean seconds per step of ours; with --op_profile, `profile` gets the op table of one more step.
double TimeOurs(const kernels::Context& ctx, const Shape& s, kernels::DType dtype, int steps, double* last_loss,
                std::string* profile) {
  auto model = LanguageModel::Create(s.config, ctx, dtype);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    std::exit(1);
  }
  (*model)->InitializeParameters(1);
  AdamW optimizer(AdamWConfig{}, **model);
  std::mt19937 rng(1);
  std::vector<int32_t> ids(s.b * s.t), targets(s.b * s.t);
  const auto vocab = static_cast<uint64_t>(s.config.vocab_size);  // the real vocabulary, not the padded rows
  for (auto& x : ids) x = static_cast<int32_t>(rng() % vocab);
  for (auto& x : targets) x = static_cast<int32_t>(rng() % vocab);
  double total = 0;
  for (int i = 0; i <= steps; ++i) {
    const double start = Now();
    auto result = TrainStep(**model, optimizer, ids.data(), targets.data(), s.b, s.t, 1e-4);
    if (!result.ok()) {
      std::fprintf(stderr, "%s\n", result.status().ToString().c_str());
      std::exit(1);
    }
    if (i > 0) total += Now() - start;
    *last_loss = result->loss;
  }
  if (absl::GetFlag(FLAGS_op_profile)) {
    absl::StatusOr<std::unique_ptr<kernels::CpuOpProfiler>> profiler = kernels::CpuOpProfiler::Start(ctx);
    if (!profiler.ok()) {
      std::fprintf(stderr, "%s\n", profiler.status().ToString().c_str());
      std::exit(1);
    }
    auto result = TrainStep(**model, optimizer, ids.data(), targets.data(), s.b, s.t, 1e-4);
    absl::StatusOr<kernels::OpProfile> ops = (*profiler)->Finish();
    if (!result.ok() || !ops.ok()) {
      std::fprintf(stderr, "%s\n", (result.ok() ? ops.status() : result.status()).ToString().c_str());
      std::exit(1);
    }
    *profile = kernels::FormatOpProfile(*ops, 1);
  }
  return total / steps;
}

// PyTorch's step on `peer`'s python and mode: "seconds_per_step <x>" and the script's "peer ..." line.
absl::StatusOr<kernels::testing::CpuPeer> TimeTorch(const kernels::testing::TorchPeerSpec& peer, const Shape& s,
                                                    int steps, int threads, const std::string& script) {
  // Debian's OpenBLAS, 1.13's BLAS, does not know this CPU: without OPENBLAS_CORETYPE it picks a slow
  // generic path (13 vs 48 GFLOP/s on a 2048^3 matmul, 2 threads). PeerEnvironment gives it the AVX2
  // (Haswell) kernel, unless the caller chose one; the PyPI wheels' oneDNN/MKL ignore it.
  return kernels::testing::RunPeerCommand(absl::StrFormat(
      "%s '%s' '%s' --mode=%s "
      "--d_model=%d --n_layers=%d --n_heads=%d --vocab_size=%d --token_ids=%d --context=%d --batch=%d "
      "--seq=%d --steps=%d --threads=%d",
      kernels::testing::PeerEnvironment(threads), peer.python, script, peer.mode, s.config.d_model,
      s.config.n_layers, s.config.n_heads, s.config.vocab_rows(), s.config.vocab_size, s.config.context_length,
      s.b, s.t, steps, threads));
}

std::string FindTorchScript() {
  if (!absl::GetFlag(FLAGS_torch_script).empty()) return absl::GetFlag(FLAGS_torch_script);
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");  // set by `bazel run`
  return absl::StrCat(workspace != nullptr ? workspace : ".", "/tools/model/torch_train_step.py");
}

// One row: who ran the step, its seconds, tokens/s, ours over it, and its share of the sgemm and FMA peaks.
void PrintRow(const std::string& shape, const std::string& who, double seconds, double ours, double tokens,
              double flops, double peak_gflops, double fma_flops) {
  std::printf("%-11s %-52s %9.3f %10.0f %8.2fx %8.1f%% %8.1f%%\n", shape.c_str(), who.c_str(), seconds,
              tokens / seconds, seconds / ours, 100 * flops / seconds / 1e9 / peak_gflops,
              100 * flops / seconds / fma_flops);
}

int Main() {
  const int threads = absl::GetFlag(FLAGS_threads);
  const int steps = absl::GetFlag(FLAGS_steps);
  std::vector<kernels::DType> precisions;
  for (absl::string_view p : absl::StrSplit(absl::GetFlag(FLAGS_precisions), ',', absl::SkipEmpty())) {
    if (p != "fp32" && p != "bf16") {
      std::fprintf(stderr, "train_step_benchmark: --precisions=%s: expected fp32 and/or bf16\n",
                   absl::GetFlag(FLAGS_precisions).c_str());
      return 2;
    }
    precisions.push_back(p == "bf16" ? kernels::DType::kBF16 : kernels::DType::kF32);
  }
  if (precisions.empty()) {
    std::fprintf(stderr, "train_step_benchmark: --precisions is empty (expected fp32 and/or bf16)\n");
    return 2;
  }
  std::vector<kernels::testing::TorchPeerSpec> peers;
  if (absl::GetFlag(FLAGS_torch)) {
    absl::StatusOr<std::vector<kernels::testing::TorchPeerSpec>> specs = kernels::testing::TorchPeerSpecsFromFlags();
    if (!specs.ok()) {
      std::fprintf(stderr, "train_step_benchmark: %s\n", std::string(specs.status().message()).c_str());
      return 2;
    }
    peers = *specs;
  }
  ThreadPool pool(threads);
  const kernels::Context ctx = kernels::Context::Cpu(&pool);
  // The peak is re-measured before and after each shape and the best so far is used: on a shared machine a single
  // early measurement can catch a busy moment and flatter the percentages.
  double peak = MeasureSgemmPeak(ctx);
  // MFU as the trainer logs it: against the FMA peak of the same threads (kernels/cpu/peak_flops.h).
  const kernels::CpuPeak& fma = kernels::CpuFmaPeak(threads);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf(
      "threads=%d  sgemm peak: kernels/matmul 2048^3 with %d threads, best so far (GFLOP/s); %s FMA peak "
      "(the trainer's MFU basis): %.1f GFLOP/s; attention's GEMM tiles: %s (LMF_CPU_ISA); bf16 units: %s; "
      "PyTorch runs with OPENBLAS_CORETYPE=%s\n",
      threads, threads, fma.isa, fma.flops_per_second / 1e9, kernels::vec::IsaName(), Bf16Units(),
      coretype != nullptr && *coretype != '\0' ? coretype : "Haswell");
  std::printf("%-11s %-52s %9s %10s %9s %9s %9s\n", "shape", "who", "s/step", "tokens/s", "its/ours", "% sgemm",
              "MFU");
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_shapes), ',', absl::SkipEmpty())) {
    const Shape s = ShapeByName(std::string(name));
    peak = std::max(peak, MeasureSgemmPeak(ctx));
    const double tokens = static_cast<double>(s.b * s.t);
    const double flops = CountFlopsPerToken(s.config, s.t).training() * tokens;
    double loss = 0;
    std::string profile;
    std::vector<std::pair<std::string, double>> ours_by_precision;  // ("fp32", s/step), ...
    for (const kernels::DType dtype : precisions) {
      const std::string precision = dtype == kernels::DType::kBF16 ? "bf16" : "fp32";
      std::string op_table;
      ours_by_precision.push_back({precision, TimeOurs(ctx, s, dtype, steps, &loss, &op_table)});
      if (!op_table.empty()) profile += absl::StrCat("lmforge ", precision, ":\n", op_table);
    }
    const double ours = ours_by_precision.front().second;  // the ratios' basis: the first precision
    std::vector<kernels::testing::TorchPeerRun> runs;
    for (const kernels::testing::TorchPeerSpec& peer : peers) {
      runs.push_back({peer, TimeTorch(peer, s, steps, threads, FindTorchScript())});
    }
    peak = std::max(peak, MeasureSgemmPeak(ctx));
    for (const auto& [precision, seconds] : ours_by_precision)
      PrintRow(s.name, "lmforge " + precision, seconds, ours, tokens, flops, peak, fma.flops_per_second);
    for (const kernels::testing::TorchPeerRun& run : runs) {
      const double seconds = run.result.ok() && run.result->ms.count("seconds_per_step") > 0
                                 ? run.result->ms.at("seconds_per_step")
                                 : -1;
      if (seconds > 0) {
        PrintRow(s.name, run.Name(), seconds, ours, tokens, flops, peak, fma.flops_per_second);
        for (const auto& [precision, mine] : ours_by_precision) {  // like against like: bf16 with autocast
          if ((precision == "bf16") == (run.spec.mode == "bf16")) {
            std::printf("%-11s   lmforge %s over %s: %.2fx\n", s.name.c_str(), precision.c_str(), run.Name().c_str(),
                        seconds / mine);
          }
        }
      } else {
        std::printf("%-11s %-52s unavailable: %s\n", s.name.c_str(), run.Name().c_str(),
                    run.result.ok() ? "no seconds_per_step line" : std::string(run.result.status().message()).c_str());
      }
    }
    if (!profile.empty()) std::printf("%s: ours, one step, per op (wall time on the calling thread)\n%s\n",
                                      s.name.c_str(), profile.c_str());
    std::fflush(stdout);
  }
  std::printf("sgemm peak %.1f GFLOP/s (best measured); its/ours: the row's s/step over lmforge's\n", peak);
  return 0;
}

}  // namespace
}  // namespace lmf::model

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "One training step of lmforge's LanguageModel on the CPU against the same model in "
      "PyTorch: tokens/s, the ratio, and FLOP/s against this CPU's sgemm peak.");
  lmf::ParseFlags(argc, argv);
  return lmf::model::Main();
}
