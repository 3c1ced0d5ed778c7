// Memory-bound kernel benchmark (bf16 activations): achieved GB/s (the fewest bytes each op must
// move: inputs read once, outputs written once) against the device-to-device copy bandwidth measured in the
// same run, and time against the PyTorch eager equivalent (tools/gpu_peers/memory_bound_peer.py).
// Shapes: N = 16384 rows of C = 2048 (norms), H = 8192 (SwiGLU), RoPE on (16, 1024, 16, 128) and on the q|k
// heads of GPT-2 small's fused qkv, the token embedding (16K ids, 50304 x 768), fused cross-entropy on
// 8192 x 50304 (in place), AdamW (bf16 grads with the bf16 copy; fp32 grads without) and the grad norm (fp32,
// bf16) over 124M parameters.
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/usage.h"
#include "base/flags.h"
#include "kernels/activations/activations.h"
#include "kernels/adamw/adamw.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/cuda/bench_util.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/embedding/embedding.h"
#include "kernels/grad_norm/grad_norm.h"
#include "kernels/layernorm/layernorm.h"
#include "kernels/matmul/column_sum_cuda.h"
#include "kernels/residual/residual.h"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/rope/rope.h"
#include "kernels/swiglu/swiglu.h"

namespace lmf::kernels::cuda {
namespace {

using testing::DeviceBuffer;

DeviceBuffer Random(int64_t n, DType dt, uint64_t seed) {
  return DeviceBuffer(bench::RandomUniform(n, seed), dt);
}

constexpr DType kB = DType::kBF16;
constexpr int64_t kN = 16384, kC = 2048, kH = 8192, kV = 50304, kNce = 8192, kP = 124000000;

// report(name, bytes, fn): times fn (the median of several runs) and prints its ms, GB/s, share of the copy
// bandwidth and ratio to the peer's time for `name`.
using Report = std::function<void(const char* name, double bytes, const std::function<absl::Status()>& fn)>;

// RMSNorm, LayerNorm and the residual RMSNorm over N x C.
void BenchNorms(const Context& ctx, const Report& report) {
  const int64_t N = kN, C = kC;
  DeviceBuffer x = Random(N * C, kB, 1), r = Random(N * C, kB, 2), w = Random(C, kB, 3), out(N * C, kB);
  DeviceBuffer dout = Random(N * C, kB, 4), dx(N * C, kB), rstd(N, DType::kF32), mean(N, DType::kF32),
               dw(C, DType::kF32), db(C, DType::kF32);
  report("rmsnorm_fwd", 4.0 * N * C, [&] {
    return cuda::RmsNormForward(
        ctx, RmsNormForwardParams{kB, N, C, 1e-5f, x.get(), w.get(), out.get(), rstd.as<float>()});
  });
  report("rmsnorm_bwd", 6.0 * N * C, [&] {
    return cuda::RmsNormBackward(ctx, RmsNormBackwardParams{kB, N, C, x.get(), w.get(), rstd.as<float>(),
                                                            dout.get(), dx.get(), dw.get()});
  });
  report("layernorm_fwd", 4.0 * N * C, [&] {
    return cuda::LayerNormForward(
        ctx, LayerNormForwardParams{kB, N, C, 1e-5f, x.get(), w.get(), w.get(), out.get(), mean.as<float>(),
                                    rstd.as<float>()});
  });
  report("layernorm_bwd", 6.0 * N * C, [&] {  // with dweight and dbias
    return cuda::LayerNormBackward(ctx, LayerNormBackwardParams{kB, N, C, x.get(), w.get(), mean.as<float>(),
                                                                rstd.as<float>(), dout.get(), dx.get(),
                                                                dw.get(), db.get()});
  });
  report("residual_rmsnorm_fwd", 8.0 * N * C, [&] {
    return cuda::ResidualRmsNormForward(
        ctx, ResidualRmsNormForwardParams{kB, N, C, 1e-5f, r.get(), x.get(), dx.get(), w.get(), out.get(),
                                          rstd.as<float>()});
  });
}

// SwiGLU over N x H.
void BenchSwiGlu(const Context& ctx, const Report& report) {
  const int64_t N = kN, H = kH;
  DeviceBuffer gu = Random(N * 2 * H, kB, 5), out(N * H, kB), dout = Random(N * H, kB, 6),
               dgu(N * 2 * H, kB);
  char* g = gu.as<char>();
  char* dg = dgu.as<char>();
  report("swiglu_fwd", 6.0 * N * H, [&] {
    return cuda::SwiGluForward(ctx, SwiGluForwardParams{kB, N, H, g, 2 * H, g + 2 * H, 2 * H, out.get()});
  });
  report("swiglu_bwd", 10.0 * N * H, [&] {
    return cuda::SwiGluBackward(
        ctx, SwiGluBackwardParams{kB, N, H, g, 2 * H, g + 2 * H, 2 * H, dout.get(), dg, dg + 2 * H});
  });
}

// RoPE on (16, 1024, 16, 128).
void BenchRope(const Context& ctx, const Report& report) {
  const int64_t B = 16, T = 1024, NH = 16, HS = 128, n = B * T * NH * HS;
  DeviceBuffer x = Random(n, kB, 7);
  RopeParams p = ContiguousRopeParams(B, T, NH, HS, 10000.0f, x.get(), x.get());
  p.dtype = kB;
  report("rope_fwd", 4.0 * n, [&] { return cuda::RopeForward(ctx, p); });
}

void BenchRopeOfQkv(const Context& ctx, const Report& report) {
  // GPT-2 small's call: the q and k heads (12 + 12, HS 64) of the fused (B*T, 3*768) qkv buffer, in place.
  const int64_t B = 16, T = 1024, heads = 24, HS = 64, width = 3 * 768;
  DeviceBuffer qkv = Random(B * T * width, kB, 12);
  RopeParams p = ContiguousRopeParams(B, T, heads, HS, 10000.0f, qkv.get(), qkv.get());
  p.dtype = kB;
  p.in_stride_b = p.out_stride_b = T * width, p.in_stride_t = p.out_stride_t = width;
  report("rope_qk_of_qkv", 4.0 * B * T * heads * HS, [&] { return cuda::RopeForward(ctx, p); });
}

void BenchEmbedding(const Context& ctx, const Report& report) {
  // GPT-2 small's token embedding: 16K ids into (50304, 768), ids_checked as the model calls it (no
  // device-side id check); the backward's bytes are dout once plus each distinct id's dtable row read and
  // written (fp32), the sort not counted.
  const int64_t NE = 16384, VE = 50304, CE = 768;
  std::vector<int32_t> id(NE);
  std::vector<bool> seen(VE, false);
  int64_t distinct = 0;
  for (int64_t i = 0; i < NE; ++i) {
    id[i] = static_cast<int32_t>((i * 7919 + (i * i) % 977) % VE);
    distinct += !seen[id[i]];
    seen[id[i]] = true;
  }
  DeviceBuffer ids = DeviceBuffer::Ints(id), table = Random(VE * CE, kB, 13), out(NE * CE, kB),
               dout = Random(NE * CE, kB, 14), dtable(VE * CE, DType::kF32);
  dtable.Fill(0.0f);
  report("embedding_fwd", 4.0 * NE * CE, [&] {
    return cuda::EmbeddingForward(
        ctx, EmbeddingForwardParams{kB, NE, VE, CE, ids.as<int32_t>(), table.get(), out.get(), true});
  });
  report("embedding_bwd", 2.0 * NE * CE + 8.0 * distinct * CE, [&] {
    return cuda::EmbeddingBackward(
        ctx, EmbeddingBackwardParams{kB, NE, VE, CE, ids.as<int32_t>(), dout.get(), dtable.get(), true});
  });
}

void BenchBiasGrad(const Context& ctx, const Report& report) {
  // The bias gradient of GPT-2 small's widest linear layer (fc: 16384 x 3072 bf16 rows -> 3072 fp32, +=).
  const int64_t R = 16384, F = 3072;
  DeviceBuffer dy = Random(R * F, kB, 15), db(F, DType::kF32);
  db.Fill(0.0f);
  ColumnSumParams cs;
  cs.dtype = kB, cs.rows = R, cs.cols = F, cs.ld = F, cs.in = dy.get(), cs.out = db.as<float>();
  report("bias_grad_column_sum", 2.0 * R * F, [&] { return cuda::ColumnSum(ctx, cs); });
}

// Fused cross-entropy on NCE x V, in place.
void BenchCrossEntropy(const Context& ctx, const Report& report) {
  const int64_t NCE = kNce, V = kV;
  DeviceBuffer logits = Random(NCE * V, kB, 8), losses(NCE, DType::kF32), lse(NCE, DType::kF32);
  std::vector<int32_t> t(NCE);
  for (int64_t i = 0; i < NCE; ++i) t[i] = static_cast<int32_t>((i * 7919) % 50257);
  DeviceBuffer targets = DeviceBuffer::Ints(t);
  CrossEntropyParams p;
  p.dtype = kB, p.N = NCE, p.V = 50257, p.row_stride = V, p.logits = logits.get(),
  p.targets = targets.as<int32_t>();
  p.losses = losses.as<float>(), p.lse = lse.as<float>(), p.dloss = 1.0f / NCE, p.dlogits = logits.get();
  report("cross_entropy_fused", 4.0 * NCE * V, [&] { return cuda::CrossEntropyForward(ctx, p); });
}

// AdamW (bf16 grads with the bf16 copy; fp32 grads without) and the grad norm over P parameters.
void BenchOptimizer(const Context& ctx, const Report& report) {
  const int64_t P = kP;
  DeviceBuffer param = Random(P, DType::kF32, 9), grad = Random(P, kB, 10), m(P, DType::kF32),
               v(P, DType::kF32);
  DeviceBuffer copy_out(P, kB);
  m.Fill(0.0f), v.Fill(0.0f);
  AdamWTensor t{P, param.as<float>(), grad.get(), m.as<float>(), v.as<float>(), copy_out.get()};
  MultiTensorAdamWParams ap;
  ap.grad_dtype = kB, ap.tensors = &t, ap.num_tensors = 1, ap.weight_decay = 0.1f, ap.step = 1;
  report("adamw", 28.0 * P, [&] { return cuda::MultiTensorAdamW(ctx, ap); });
  DeviceBuffer gf = Random(P, DType::kF32, 11), norm(1, DType::kF32);
  GradSpan span{gf.get(), P};
  report("grad_norm", 4.0 * P, [&] {
    return cuda::GlobalGradNormToDevice(ctx, GradNormParams{DType::kF32, &span, 1}, norm.as<float>());
  });
  GradSpan half_span{grad.get(), P};
  report("grad_norm_bf16", 2.0 * P, [&] {
    return cuda::GlobalGradNormToDevice(ctx, GradNormParams{kB, &half_span, 1}, norm.as<float>());
  });
  AdamWTensor tf{P, param.as<float>(), gf.get(), m.as<float>(), v.as<float>(), nullptr};
  MultiTensorAdamWParams af = ap;
  af.grad_dtype = DType::kF32, af.tensors = &tf;
  report("adamw_f32_grads", 28.0 * P, [&] { return cuda::MultiTensorAdamW(ctx, af); });
}

int Main() {
  int exit_code = 0;
  const std::unique_ptr<CudaContext> cc = bench::OpenDevice("memory_bound_benchmark", &exit_code);
  if (cc == nullptr) return exit_code;
  const Context ctx = cc->context();
  auto peer = bench::RunPeer("memory_bound_peer.py", "");
  if (!peer.ok())
    std::printf("peer (torch eager): unavailable: %s\n", std::string(peer.status().message()).c_str());
  const std::map<std::string, double>* pm = peer.ok() ? &*peer : nullptr;
  const double copy = bench::CopyBandwidthGBs(ctx.stream, size_t{1} << 30);
  std::printf("device-to-device copy: %.0f GB/s (bytes read + written)\n", copy);
  std::printf("%-22s %10s %10s %9s %10s\n", "op", "ms", "GB/s", "of copy", "vs torch");
  const Report report = [&](const char* name, double bytes, const std::function<absl::Status()>& fn) {
    bool ok = true;
    const double ms = bench::MedianMs(ctx.stream, [&] { ok = ok && fn().ok(); });
    if (!ok) {
      std::printf("%-22s failed: %s\n", name, fn().ToString().c_str());
      return;
    }
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    std::printf("%-22s %10.3f %10.0f %8.0f%% %10s\n", name, ms, gbs, 100.0 * gbs / copy,
                bench::Ratio(pm, name, ms).c_str());
  };
  for (void (*run)(const Context&, const Report&) :
       {BenchNorms, BenchSwiGlu, BenchRope, BenchRopeOfQkv, BenchEmbedding, BenchBiasGrad, BenchCrossEntropy,
        BenchOptimizer}) {
    run(ctx, report);
  }
  return 0;
}

}  // namespace
}  // namespace lmf::kernels::cuda

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Memory-bound kernels (bf16): GB/s against the copy bandwidth and time against PyTorch eager; takes no "
      "flags.");
  lmf::ParseFlags(argc, argv);
  return lmf::kernels::cuda::Main();
}
