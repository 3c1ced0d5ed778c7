// Runs the CUDA kernels of kernels/ (their real .cu code, through the CPU emulation of cuemu.h; built and
// run by run.sh) against the CPU kernels, in f32 and bf16, on the shapes where CUDA indexing goes wrong: row
// lengths that are and are not multiples of the 16-byte vector width, pointers off 16-byte alignment, tails,
// partial blocks, padded row strides, aliasing (in place) and null optional outputs (attention and the
// column sums: attention_check.cc). Prints one line per check and exits non-zero on any failure. Tolerances
// are loose (f32 2e-5 relative, bf16 1.6e-2): this looks for indexing and logic errors, not for the last
// bits (the GPU tests' tolerance rule does that).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/activations/activations.h"
#include "kernels/adamw/adamw.h"
#include "kernels/cast/cast.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/emulation/check_util.h"
#include "kernels/embedding/embedding.h"
#include "kernels/grad_norm/grad_norm.h"
#include "kernels/layernorm/layernorm.h"
#include "kernels/residual/residual.h"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/rope/rope.h"
#include "kernels/swiglu/swiglu.h"

namespace lmf::kernels {
namespace {

struct Env {
  Context gpu;  // the emulated device
  Context cpu = Context::Cpu();
  DType dt;
  std::vector<float> R(const std::vector<float>& v) const { return RoundTo(v, dt); }
  std::string Tag(const char* fmt, long a = 0, long b = 0, long c = 0) const {
    char buf[128];
    std::snprintf(buf, sizeof(buf), fmt, a, b, c);
    return buf;
  }
};

void CheckActivations(const Env& e) {
  for (int64_t n : {1, 7, 8, 9, 10007})
    for (int off : {0, 1})
      for (Activation k : {Activation::kSilu, Activation::kGeluTanh, Activation::kRelu}) {
        const auto x = e.R(RandomNormal(n, 1, 3.0f)), d = e.R(RandomNormal(n, 2));
        std::vector<float> y(n), dx(n);
        cpu::ActivationForward(e.cpu, {DType::kF32, k, n, x.data(), y.data()});
        cpu::ActivationBackward(e.cpu, {DType::kF32, k, n, x.data(), d.data(), dx.data()});
        Buf gx(x, e.dt, off), gd(d, e.dt, off), gy(n, e.dt, off), gdx(n, e.dt, off);
        const std::string w =
            std::string("activation ") + ActivationName(k) + e.Tag(" n=%ld off=%ld", n, off);
        ExpectOk(w, kc::ActivationForward(e.gpu, {e.dt, k, n, gx.get(), gy.get()}));
        ExpectOk(w, kc::ActivationBackward(e.gpu, {e.dt, k, n, gx.get(), gd.get(), gdx.get()}));
        Check(w + " out", e.dt, gy.floats(), y);
        Check(w + " dx", e.dt, gdx.floats(), dx);
      }
  ExpectOk("activation n=0", kc::ActivationForward(e.gpu, {e.dt, Activation::kSilu, 0, nullptr, nullptr}));
}

void CheckResidual(const Env& e) {
  for (int off : {0, 1}) {
    const int64_t n = 5003;
    const auto a = e.R(RandomNormal(n, 3)), b = e.R(RandomNormal(n, 4)), d = e.R(RandomNormal(n, 5));
    std::vector<float> out(n), da = a;
    cpu::ResidualForward(e.cpu, {DType::kF32, n, a.data(), b.data(), out.data()});
    cpu::ResidualBackward(e.cpu, {DType::kF32, n, d.data(), da.data(), nullptr});
    Buf ga(a, e.dt, off), gb(b, e.dt, off), gd(d, e.dt, off), go(n, e.dt, off);
    const std::string w = e.Tag("residual off=%ld", off);
    ExpectOk(w, kc::ResidualForward(e.gpu, {e.dt, n, ga.get(), gb.get(), go.get()}));
    ExpectOk(w, kc::ResidualBackward(e.gpu, {e.dt, n, gd.get(), ga.get(), nullptr}));
    Check(w + " out", e.dt, go.floats(), out);
    Check(w + " da (+=, db null)", e.dt, ga.floats(), da);
    Check(w + " b untouched", e.dt, gb.floats(), b, 0, 0);
  }
}

void CheckNorms(const Env& e) {
  for (int64_t C : {768, 1001, 8, 24, 40, 1})
    for (int64_t N : {1, 67, 1000}) {
      if (C == 1 && N != 67) continue;
      auto x = RandomNormal(N * C, 6);
      for (float& v : x) v += 0.5f;
      x = e.R(x);
      const auto w = e.R(RandomNormal(C, 7)), bias = e.R(RandomNormal(C, 8)), d = e.R(RandomNormal(N * C, 9));
      const auto dw0 = RandomNormal(C, 10), db0 = RandomNormal(C, 11);
      const std::string tag = e.Tag(" N=%ld C=%ld", N, C);
      {
        std::vector<float> out(N * C), rstd(N), dx(N * C), dw = dw0;
        cpu::RmsNormForward(e.cpu, {DType::kF32, N, C, 1e-5f, x.data(), w.data(), out.data(), rstd.data()});
        cpu::RmsNormBackward(
            e.cpu, {DType::kF32, N, C, x.data(), w.data(), rstd.data(), d.data(), dx.data(), dw.data()});
        Buf gx(x, e.dt), gw(w, e.dt), gd(d, e.dt), go(N * C, e.dt), gr(N, DType::kF32), gdx(N * C, e.dt),
            gdw(dw0, DType::kF32);
        const std::string s = "rmsnorm" + tag;
        ExpectOk(
            s, kc::RmsNormForward(e.gpu, {e.dt, N, C, 1e-5f, gx.get(), gw.get(), go.get(), gr.as<float>()}));
        ExpectOk(s, kc::RmsNormBackward(e.gpu, {e.dt, N, C, gx.get(), gw.get(), gr.as<float>(), gd.get(),
                                                gdx.get(), gdw.get()}));
        Check(s + " out", e.dt, go.floats(), out);
        Check(s + " rstd", e.dt, gr.floats(), rstd, 2e-5, 1e-6);
        Check(s + " dx", e.dt, gdx.floats(), dx);
        Check(s + " dweight (+=)", e.dt, gdw.floats(), dw, 2e-5, 1e-4);
      }
      for (bool has_bias : {true, false}) {
        std::vector<float> out(N * C), mean(N), rstd(N), dx(N * C), dw = dw0, db = db0;
        const float* bp = has_bias ? bias.data() : nullptr;
        cpu::LayerNormForward(
            e.cpu, {DType::kF32, N, C, 1e-5f, x.data(), w.data(), bp, out.data(), mean.data(), rstd.data()});
        cpu::LayerNormBackward(e.cpu, {DType::kF32, N, C, x.data(), w.data(), mean.data(), rstd.data(),
                                       d.data(), dx.data(), dw.data(), has_bias ? db.data() : nullptr});
        Buf gx(x, e.dt), gw(w, e.dt), gb(bias, e.dt), gd(d, e.dt), go(N * C, e.dt), gm(N, DType::kF32),
            gr(N, DType::kF32), gdx(N * C, e.dt), gdw(dw0, DType::kF32), gdb(db0, DType::kF32);
        const std::string s = "layernorm" + tag + (has_bias ? " bias" : " no bias");
        ExpectOk(s, kc::LayerNormForward(
                        e.gpu, {e.dt, N, C, 1e-5f, gx.get(), gw.get(), has_bias ? gb.get() : nullptr,
                                go.get(), gm.as<float>(), gr.as<float>()}));
        ExpectOk(s, kc::LayerNormBackward(
                        e.gpu, {e.dt, N, C, gx.get(), gw.get(), gm.as<float>(), gr.as<float>(), gd.get(),
                                gdx.get(), gdw.get(), has_bias ? gdb.get() : nullptr}));
        Check(s + " out", e.dt, go.floats(), out);
        Check(s + " mean", e.dt, gm.floats(), mean, 2e-5, 1e-6);
        Check(s + " rstd", e.dt, gr.floats(), rstd, 2e-5, 1e-6);
        Check(s + " dx", e.dt, gdx.floats(), dx);
        Check(s + " dweight (+=)", e.dt, gdw.floats(), dw, 2e-5, 1e-4);
        Check(s + " dbias (+=)", e.dt, gdb.floats(), has_bias ? db : db0, 2e-5, 1e-4);
      }
      {  // The fused residual add + norm; the LayerNorm one with residual_out aliasing residual.
        const auto r = e.R(RandomNormal(N * C, 12));
        std::vector<float> sum(N * C), rms(N * C), ln(N * C), rms_rstd(N), ln_mean(N), ln_rstd(N);
        cpu::ResidualForward(e.cpu, {DType::kF32, N * C, r.data(), x.data(), sum.data()});
        sum = e.R(sum);  // the kernels store the sum in dtype and normalise what they stored
        cpu::RmsNormForward(e.cpu,
                            {DType::kF32, N, C, 1e-5f, sum.data(), w.data(), rms.data(), rms_rstd.data()});
        cpu::LayerNormForward(e.cpu, {DType::kF32, N, C, 1e-5f, sum.data(), w.data(), bias.data(), ln.data(),
                                      ln_mean.data(), ln_rstd.data()});
        Buf gr(r, e.dt), gx(x, e.dt), gw(w, e.dt), gb(bias, e.dt), gs(N * C, e.dt), go(N * C, e.dt),
            grs(N, DType::kF32);
        const std::string s = "residual+norm" + tag;
        ExpectOk(s, kc::ResidualRmsNormForward(e.gpu, {e.dt, N, C, 1e-5f, gr.get(), gx.get(), gs.get(),
                                                       gw.get(), go.get(), grs.as<float>()}));
        Check(s + " rms residual_out", e.dt, gs.floats(), sum);
        Check(s + " rms out", e.dt, go.floats(), rms);
        Check(s + " rms rstd", e.dt, grs.floats(), rms_rstd, 2e-5, 1e-6);
        ExpectOk(s, kc::ResidualLayerNormForward(e.gpu, {e.dt, N, C, 1e-5f, gr.get(), gx.get(), gr.get(),
                                                         gw.get(), gb.get(), go.get(), nullptr, nullptr}));
        Check(s + " ln residual_out in place", e.dt, gr.floats(), sum);
        Check(s + " ln out", e.dt, go.floats(), ln);
      }
    }
}

void CheckSwiGlu(const Env& e) {
  for (int64_t H : {304, 300, 3}) {
    const int64_t N = 37;
    const auto gu = e.R(RandomNormal(N * 2 * H, 13, 2.0f)), d = e.R(RandomNormal(N * H, 14));
    std::vector<float> y(N * H), dgu(N * 2 * H, 0.0f);
    cpu::SwiGluForward(e.cpu, {DType::kF32, N, H, gu.data(), 2 * H, gu.data() + H, 2 * H, y.data()});
    cpu::SwiGluBackward(e.cpu, {DType::kF32, N, H, gu.data(), 2 * H, gu.data() + H, 2 * H, d.data(),
                                dgu.data(), dgu.data() + H});
    Buf ggu(gu, e.dt), gd(d, e.dt), gy(N * H, e.dt), gdgu(N * 2 * H, e.dt);
    char* g = ggu.as<char>();
    char* dg = gdgu.as<char>();
    const size_t es = DTypeSize(e.dt);
    const std::string s = e.Tag("swiglu H=%ld (halves of one buffer)", H);
    ExpectOk(s, kc::SwiGluForward(e.gpu, {e.dt, N, H, g, 2 * H, g + H * es, 2 * H, gy.get()}));
    ExpectOk(s,
             kc::SwiGluBackward(e.gpu, {e.dt, N, H, g, 2 * H, g + H * es, 2 * H, gd.get(), dg, dg + H * es}));
    Check(s + " out", e.dt, gy.floats(), y);
    Check(s + " dgate|dup", e.dt, gdgu.floats(), dgu);
  }
}

void CheckRope(const Env& e) {
  const int64_t B = 2, T = 19, NH = 3, HS = 64, C3 = 3 * NH * HS, n = B * T * NH * HS;
  const auto qkv = e.R(RandomNormal(B * T * C3, 15));
  std::vector<int32_t> pos(B * T);
  for (int64_t i = 0; i < B * T; ++i) pos[i] = static_cast<int32_t>((i * 7919) % 100000);
  auto params = [&](const void* in, void* out) {
    RopeParams p;
    p.B = B, p.T = T, p.NH = NH, p.HS = HS;
    p.in = in, p.in_stride_b = T * C3, p.in_stride_t = C3, p.in_stride_h = HS;
    p.out = out, p.out_stride_b = T * NH * HS, p.out_stride_t = NH * HS, p.out_stride_h = HS;
    p.positions = pos.data(), p.positions_stride_b = T;
    return p;
  };
  std::vector<float> y(n), back(n);
  cpu::RopeForward(e.cpu, params(qkv.data(), y.data()));
  cpu::RopeBackward(e.cpu, params(qkv.data(), back.data()));
  Buf gin(qkv, e.dt), gy(n, e.dt), gback(n, e.dt);
  RopeParams p = params(gin.get(), gy.get());
  p.dtype = e.dt;
  ExpectOk("rope", kc::RopeForward(e.gpu, p));
  p.out = gback.get();
  ExpectOk("rope", kc::RopeBackward(e.gpu, p));
  Check("rope strided q, per-batch positions, out", e.dt, gy.floats(), y);
  Check("rope strided q, per-batch positions, backward", e.dt, gback.floats(), back);
  for (int64_t hs : {64, 2}) {
    const int64_t m = B * T * NH * hs;
    const auto x = e.R(RandomNormal(m, 16));
    std::vector<float> yc = x;
    cpu::RopeForward(e.cpu, ContiguousRopeParams(B, T, NH, hs, 10000.0f, yc.data(), yc.data()));
    Buf gx(x, e.dt);
    RopeParams q = ContiguousRopeParams(B, T, NH, hs, 10000.0f, gx.get(), gx.get());
    q.dtype = e.dt;
    ExpectOk("rope in place", kc::RopeForward(e.gpu, q));
    Check(e.Tag("rope in place, positions null, HS=%ld", hs), e.dt, gx.floats(), yc);
  }
}

void CheckCrossEntropy(const Env& e) {
  // 0: padded row stride (vector path); 1: z-loss, odd stride (one-element path); 2: the first 4096 columns
  // -inf; 3: V below the vector width, scalar dloss; 4: V = 1.
  for (int cfg = 0; cfg < 5; ++cfg) {
    const int64_t N = 6, V = cfg == 3 ? 7 : cfg == 4 ? 1 : 5003, stride = cfg == 0 ? 5056 : cfg == 3 ? 8 : V;
    const float z = cfg == 1 ? 1e-4f : 0.0f;
    auto logits = e.R(RandomNormal(N * stride, 17, 3.0f));
    std::vector<int32_t> t(N);
    for (int64_t n = 0; n < N; ++n) t[n] = static_cast<int32_t>((n * 977) % V);
    if (cfg == 2) {
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t v = 0; v < 4096; ++v) logits[n * stride + v] = -INFINITY;
        t[n] = static_cast<int32_t>(4096 + n * 131);
      }
    }
    if (N > 3 && V > 1) t[3] = -100;  // ignored row
    const auto dl = RandomNormal(N, 18);
    std::vector<float> loss(N), lse(N), grad = logits;
    CrossEntropyParams cp;
    cp.N = N, cp.V = V, cp.row_stride = stride, cp.z_loss = z, cp.logits = grad.data(), cp.targets = t.data();
    cp.losses = loss.data(), cp.lse = lse.data(), cp.dlosses = cfg >= 3 ? nullptr : dl.data(),
    cp.dloss = 0.25f;
    cp.dlogits = grad.data();
    cpu::CrossEntropyForward(e.cpu, cp);
    Buf gl(logits, e.dt), gloss(N, DType::kF32), glse(N, DType::kF32);
    CrossEntropyParams p = cp;
    p.dtype = e.dt, p.logits = gl.get(), p.dlogits = gl.get(), p.losses = gloss.as<float>(),
    p.lse = glse.as<float>();
    const std::string s = e.Tag("cross-entropy config %ld", cfg);
    ExpectOk(s, kc::CrossEntropyForward(e.gpu, p));
    const double grad_rtol = e.dt == DType::kF32 ? 2e-5 : 1.6e-2;
    Check(s + " loss", e.dt, gloss.floats(), loss, 2e-5, 1e-5);
    Check(s + " lse", e.dt, glse.floats(), lse, 2e-5, 1e-5);
    Check(s + " fused dlogits in place", e.dt, gl.floats(), grad, grad_rtol, 1e-6);
    Buf gl2(logits, e.dt), gg(N * stride, e.dt);
    p.logits = gl2.get(), p.dlogits = gg.get();
    ExpectOk(s, kc::CrossEntropyBackward(e.gpu, p));
    Check(s + " backward", e.dt, gg.floats(), grad, grad_rtol, 1e-6);
  }
}

void CheckEmbedding(const Env& e) {
  for (int64_t C : {96, 5}) {
    const int64_t N = 1000, V = 300;
    const auto table = e.R(RandomNormal(V * C, 60)), d = e.R(RandomNormal(N * C, 61));
    const auto dt0 = RandomNormal(V * C, 62);
    std::vector<int32_t> ids(N);
    std::mt19937 rng(63);
    for (int32_t& i : ids) i = static_cast<int32_t>(rng() % 40);  // many repeats
    ids[5] = V - 1, ids[7] = 256;
    std::vector<float> out(N * C), dtab = dt0;
    cpu::EmbeddingForward(e.cpu, {DType::kF32, N, V, C, ids.data(), table.data(), out.data()});
    cpu::EmbeddingBackward(e.cpu, {DType::kF32, N, V, C, ids.data(), d.data(), dtab.data()});
    Buf gt(table, e.dt), gd(d, e.dt), go(N * C, e.dt), gdt(dt0, DType::kF32);
    const std::string s = e.Tag("embedding C=%ld", C);
    ExpectOk(s, kc::EmbeddingForward(e.gpu, {e.dt, N, V, C, ids.data(), gt.get(), go.get()}));
    ExpectOk(s, kc::EmbeddingBackward(e.gpu, {e.dt, N, V, C, ids.data(), gd.get(), gdt.get()}));
    Check(s + " out", e.dt, go.floats(), out, 0, 0);
    Check(s + " dtable (+=)", e.dt, gdt.floats(), dtab, 2e-5, 1e-4);
    const std::vector<int32_t> bad = {0, 1, 2, 3, 300, 5, -1, 7};
    const absl::Status st = kc::EmbeddingForward(e.gpu, {e.dt, 8, V, C, bad.data(), gt.get(), go.get()});
    if (st.ok() || st.message().find("id 300 at row 4") == std::string::npos) {
      ++failures;
      std::printf("FAIL %s: out-of-range id: %s\n", s.c_str(), st.ToString().c_str());
    } else {
      std::printf("ok   %s out-of-range id refused\n", s.c_str());
    }
  }
}

void CheckGradNorm(const Env& e) {
  const std::vector<int64_t> sizes = {7, 100000, 16384, 33};
  std::vector<std::vector<float>> grads;
  std::vector<Buf> bufs;
  std::vector<GradSpan> cpu_spans, gpu_spans;
  for (size_t i = 0; i < sizes.size(); ++i) {
    grads.push_back(e.R(RandomNormal(sizes[i], 20 + i)));
    bufs.emplace_back(grads.back(), e.dt);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    cpu_spans.push_back({grads[i].data(), sizes[i]});
    gpu_spans.push_back({bufs[i].get(), sizes[i]});
  }
  const float ref = cpu::GlobalGradNorm(e.cpu, {DType::kF32, cpu_spans.data(), 4});
  auto value = [](const absl::StatusOr<float>& s) { return s.ok() ? *s : NAN; };
  Check("grad norm", e.dt, {value(kc::GlobalGradNorm(e.gpu, {e.dt, gpu_spans.data(), 4}))}, {ref}, 1e-5, 0);
  Check("clip returns the norm", e.dt, {value(kc::ClipGradNorm(e.gpu, {e.dt, gpu_spans.data(), 4}, 1.0f))},
        {ref}, 1e-5, 0);
  Check("norm after clipping to 1", e.dt, {value(kc::GlobalGradNorm(e.gpu, {e.dt, gpu_spans.data(), 4}))},
        {1.0f}, 0, e.dt == DType::kF32 ? 1e-5 : 4e-3);
}

void CheckAdamW(const Env& e) {
  const std::vector<int64_t> sizes = {1, 1000, 40000};
  std::vector<std::vector<float>> param, grad, m, v;
  std::vector<std::vector<uint16_t>> copies;
  std::vector<Buf> gp, gg, gm, gv, gc;
  std::vector<AdamWTensor> gpu_tensors, cpu_tensors;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    param.push_back(RandomNormal(n, 30 + i)), grad.push_back(e.R(RandomNormal(n, 40 + i)));
    m.emplace_back(n, 0.0f), v.emplace_back(n, 0.0f), copies.emplace_back(n);
    gp.emplace_back(param.back(), DType::kF32), gg.emplace_back(grad.back(), e.dt);
    gm.emplace_back(m.back(), DType::kF32), gv.emplace_back(v.back(), DType::kF32),
        gc.emplace_back(n, DType::kBF16);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    gpu_tensors.push_back(
        {sizes[i], gp[i].as<float>(), gg[i].get(), gm[i].as<float>(), gv[i].as<float>(), gc[i].get()});
    cpu_tensors.push_back(
        {sizes[i], param[i].data(), grad[i].data(), m[i].data(), v[i].data(), copies[i].data()});
  }
  const float norm = 3.0f;
  Buf gnorm(std::vector<float>{norm}, DType::kF32);
  for (int64_t step = 1; step <= 3; ++step) {
    MultiTensorAdamWParams p;
    p.num_tensors = 3, p.lr = 1e-2f, p.weight_decay = 0.1f, p.step = step, p.grad_scale = 0.5f,
    p.max_norm = 1.0f;
    p.tensors = cpu_tensors.data(), p.norm = &norm;
    cpu::MultiTensorAdamW(e.cpu, p);
    p.grad_dtype = e.dt, p.tensors = gpu_tensors.data(), p.norm = gnorm.as<float>();
    ExpectOk("adamw", kc::MultiTensorAdamW(e.gpu, p));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string s = e.Tag("adamw n=%ld (clipped, 3 steps)", sizes[i]);
    Check(s + " param", e.dt, gp[i].floats(), param[i], 1e-5, 1e-6);
    Check(s + " m", e.dt, gm[i].floats(), m[i], 1e-5, 1e-7);
    Check(s + " v", e.dt, gv[i].floats(), v[i], 1e-5, 1e-9);
    std::vector<float> copy(sizes[i]);
    for (int64_t j = 0; j < sizes[i]; ++j) copy[j] = BF16ToFloat(copies[i][j]);
    Check(s + " bf16 copy", e.dt, gc[i].floats(), copy, 1e-2, 0);
  }
}

void CheckCast(const Context& gpu, const Context& cpu_ctx) {
  for (int64_t n : {1, 7, 8, 9, 1000, 100001})
    for (int off : {0, 1}) {
      auto x = RandomNormal(n, 50);
      for (int64_t i = 0; i < n; ++i) x[i] = std::ldexp(x[i], static_cast<int>(i % 81) - 40);
      std::vector<uint16_t> want(n);
      cpu::Cast(cpu_ctx, {n, DType::kF32, DType::kBF16, x.data(), want.data()});
      std::vector<float> want_back(n);
      for (int64_t i = 0; i < n; ++i) want_back[i] = BF16ToFloat(want[i]);
      Buf src(x, DType::kF32, off), half(n, DType::kBF16, off), back(n, DType::kF32, off);
      ExpectOk("cast", kc::Cast(gpu, {n, DType::kF32, DType::kBF16, src.get(), half.get()}));
      ExpectOk("cast", kc::Cast(gpu, {n, DType::kBF16, DType::kF32, half.get(), back.get()}));
      const bool same = std::memcmp(half.get(), want.data(), 2 * n) == 0 &&
                        std::memcmp(back.get(), want_back.data(), 4 * n) == 0;
      if (!same) ++failures;
      std::printf("%s cast f32 <-> bf16 bit for bit n=%ld off=%d\n", same ? "ok  " : "FAIL",
                  static_cast<long>(n), off);
    }
}

int Main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // check lines and the emulator's stderr lines in order
  HostBackend backend;
  kc::CachingAllocator allocator(&backend, nullptr);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    Env e;
    e.gpu.device = Device::Cuda(0);
    e.gpu.allocator = &allocator;
    e.dt = dt;
    CheckActivations(e);
    CheckResidual(e);
    CheckNorms(e);
    CheckSwiGlu(e);
    CheckRope(e);
    CheckCrossEntropy(e);
    CheckEmbedding(e);
    CheckGradNorm(e);
    CheckAdamW(e);
    if (dt == DType::kF32) CheckCast(e.gpu, e.cpu);
  }
  Context gpu;
  gpu.device = Device::Cuda(0);
  gpu.allocator = &allocator;
  CheckAttention(gpu);
  CheckColumnSum(gpu);
  std::printf("%d failures\n", failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace lmf::kernels

int main() { return lmf::kernels::Main(); }
