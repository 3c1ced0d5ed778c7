// FlashAttention-2 benchmark (bf16, kernels/attention): forward and backward TFLOP/s for head sizes 64 and
// 128, causal and not, T from 512 to 16384 at 16384 tokens per batch and 2048 channels, against
// torch.nn.functional.scaled_dot_product_attention with the flash backend measured in the same run
// (tools/gpu_peers/attention_peer.py). FLOPs: forward 4 B NH T S HS (halved when causal), backward 2.5x the
// forward (FlashAttention's convention; our deterministic dq recomputes S and dP, so it does more work than
// it is credited for). FlashAttention-3 reports ~740 TFLOP/s forward (bf16, H100); printed as a fraction.
// "ldsm ms" times the ldmatrix forward variant (AttentionForwardVariant::kLdmatrixV) on the same inputs.
// On sm_90 only, a second table follows the first (so that a crash of a Hopper kernel loses only its own
// figures): the wgmma forward (kWgmma), the backward with the wgmma dk/dv kernel
// (AttentionBackwardVariant::kWgmmaDkDv, "dkdv") and the whole backward on wgmma (kWgmma, "wgmma": the wgmma
// dq kernel too), against the same SDPA numbers. Every row is flushed as printed.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/flags.h"
#include "kernels/attention/attention.h"
#include "kernels/cuda/bench_util.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/gpu_test_util.h"

namespace lmf::kernels::cuda {
namespace {

constexpr int64_t kTokens = 16384, kChannels = 2048;

int Main() {
  int exit_code = 0;
  const std::unique_ptr<CudaContext> cc = bench::OpenDevice("attention_cuda_benchmark", &exit_code);
  if (cc == nullptr) return exit_code;
  const Context ctx = cc->context();
  struct Case {
    int64_t hs, T;
    bool causal;
    std::string label;
  };
  std::vector<Case> cases;
  std::vector<std::string> args;
  for (int64_t hs : {64, 128})
    for (bool causal : {false, true})
      for (int64_t T : {512, 2048, 8192, 16384}) {
        const std::string label = absl::StrCat(causal ? "causal" : "full", "_hs", hs, "_t", T);
        cases.push_back({hs, T, causal, label});
        args.push_back(
            absl::StrCat(label, ":", kTokens / T, ",", T, ",", kChannels / hs, ",", hs, ",", causal ? 1 : 0));
      }
  auto peer = bench::RunPeer("attention_peer.py", absl::StrJoin(args, " "));
  if (!peer.ok())
    std::printf("peer (torch SDPA flash): unavailable: %s\n", std::string(peer.status().message()).c_str());
  const std::map<std::string, double>* pm = peer.ok() ? &*peer : nullptr;
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx.device.index);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ctx.device.index);
  const bool sm90 = major == 9 && minor == 0;
  // The inputs and outputs of one case (random q, k, v, dout; MHA, self-attention, contiguous).
  struct Buffers {
    Buffers(const Case& c, int64_t B, int64_t NH, int64_t n)
        : q(bench::RandomUniform(n, 1), DType::kBF16),
          k(bench::RandomUniform(n, 2), DType::kBF16),
          v(bench::RandomUniform(n, 3), DType::kBF16),
          out(n, DType::kBF16),
          dout(bench::RandomUniform(n, 4), DType::kBF16),
          dq(n, DType::kBF16),
          dk(n, DType::kBF16),
          dv(n, DType::kBF16),
          lse(B * NH * c.T, DType::kF32) {
      p = ContiguousAttentionParams(B, c.T, c.T, NH, NH, c.hs, c.causal, q.get(), k.get(), v.get(), out.get(),
                                    lse.as<float>());
      p.dtype = DType::kBF16;
      bp.forward = p, bp.dout = dout.get(), bp.dq = dq.get(), bp.dk = dk.get(), bp.dv = dv.get();
    }
    testing::DeviceBuffer q, k, v, out, dout, dq, dk, dv, lse;
    AttentionParams p;
    AttentionBackwardParams bp;
  };
  auto flops_of = [](const Case& c) {
    const int64_t B = kTokens / c.T, NH = kChannels / c.hs;
    return 4.0 * B * NH * c.T * c.T * c.hs * (c.causal ? 0.5 : 1.0);
  };

  std::printf("FlashAttention-2 (mma.sync)\n%-22s %9s %9s %9s %9s %9s %9s %9s %8s\n", "case", "fwd ms",
              "TFLOP/s", "vs torch", "ldsm ms", "bwd ms", "TFLOP/s", "vs torch", "of FA3");
  std::fflush(stdout);
  for (const Case& c : cases) {
    const int64_t B = kTokens / c.T, NH = kChannels / c.hs;
    Buffers x(c, B, NH, B * c.T * NH * c.hs);
    bool ok = true;
    const double fwd = bench::MedianMs(ctx.stream, [&] { ok = ok && cuda::AttentionForward(ctx, x.p).ok(); });
    const double fwd_ldsm = bench::MedianMs(ctx.stream, [&] {
      ok = ok && cuda::AttentionForwardWithVariant(ctx, x.p, AttentionForwardVariant::kLdmatrixV).ok();
    });
    const double bwd =
        bench::MedianMs(ctx.stream, [&] { ok = ok && cuda::AttentionBackward(ctx, x.bp).ok(); });
    if (!ok) {
      std::printf("%-22s failed\n", c.label.c_str());
      std::fflush(stdout);
      continue;
    }
    const double flops = flops_of(c);
    const double ftf = flops / (fwd * 1e-3) / 1e12, btf = 2.5 * flops / (bwd * 1e-3) / 1e12;
    std::printf("%-22s %9.3f %9.1f %9s %9.3f %9.3f %9.1f %9s %7.0f%%\n", c.label.c_str(), fwd, ftf,
                bench::Ratio(pm, c.label + "_fwd", fwd).c_str(), fwd_ldsm, bwd, btf,
                bench::Ratio(pm, c.label + "_bwd", bwd).c_str(), 100.0 * ftf / 740.0);
    std::fflush(stdout);
  }
  if (!sm90) {
    std::printf("wgmma variants: not measured (sm_%d%d; they run on sm_90 only)\n", major, minor);
    return 0;
  }
  std::printf(
      "\nHopper (wgmma forward; backward with the wgmma dk/dv kernel and FA2's dq (dkdv), all on wgmma "
      "(wgmma))\n"
      "%-22s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n",
      "case", "fwd ms", "TFLOP/s", "vs torch", "dkdv ms", "TFLOP/s", "vs torch", "wgmma ms", "TFLOP/s",
      "vs torch");
  std::fflush(stdout);
  for (const Case& c : cases) {
    const int64_t B = kTokens / c.T, NH = kChannels / c.hs;
    Buffers x(c, B, NH, B * c.T * NH * c.hs);
    bool ok = true;
    const double fwd = bench::MedianMs(ctx.stream, [&] {
      ok = ok && cuda::AttentionForwardWithVariant(ctx, x.p, AttentionForwardVariant::kWgmma).ok();
    });
    const double bwd = bench::MedianMs(ctx.stream, [&] {
      ok = ok && cuda::AttentionBackwardWithVariant(ctx, x.bp, AttentionBackwardVariant::kWgmmaDkDv).ok();
    });
    const double wbwd = bench::MedianMs(ctx.stream, [&] {
      ok = ok && cuda::AttentionBackwardWithVariant(ctx, x.bp, AttentionBackwardVariant::kWgmma).ok();
    });
    if (!ok) {
      std::printf("%-22s failed\n", c.label.c_str());
      std::fflush(stdout);
      continue;
    }
    const double flops = flops_of(c);
    std::printf("%-22s %9.3f %9.1f %9s %9.3f %9.1f %9s %9.3f %9.1f %9s\n", c.label.c_str(), fwd,
                flops / (fwd * 1e-3) / 1e12, bench::Ratio(pm, c.label + "_fwd", fwd).c_str(), bwd,
                2.5 * flops / (bwd * 1e-3) / 1e12, bench::Ratio(pm, c.label + "_bwd", bwd).c_str(), wbwd,
                2.5 * flops / (wbwd * 1e-3) / 1e12, bench::Ratio(pm, c.label + "_bwd", wbwd).c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace lmf::kernels::cuda

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "FlashAttention-2 (bf16) forward and backward TFLOP/s against PyTorch's SDPA flash backend; takes no "
      "flags.");
  lmf::ParseFlags(argc, argv);
  return lmf::kernels::cuda::Main();
}
