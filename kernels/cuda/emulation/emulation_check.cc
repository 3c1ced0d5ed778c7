// Runs the CUDA kernels of kernels/ (their real .cu code, through the CPU emulation of cuemu.h; built and run
// by emulated_test.sh) against the CPU kernels, in f32 and bf16, on the shapes where CUDA indexing goes
// wrong: row lengths that are and are not multiples of the 16-byte vector width, pointers off 16-byte
// alignment, tails, partial blocks, padded row strides, aliasing (in place) and null optional outputs
// (attention and the column sums: attention_check.cc), and poisoned elements past the end that must stay
// untouched. Prints one line per check and exits non-zero on any failure. Tolerances are loose (f32 2e-5
// relative, bf16 1.6e-2): this looks for indexing and logic errors, not for the last bits (the GPU tests'
// tolerance rule does that); where the CUDA kernel does exactly the CPU kernel's float operations (RoPE,
// AdamW, the embedding gather, clipping) or a fixed order written out here (the embedding backward), the
// check is bit for bit.
// EMULATION_ONLY=<group> (adamw, rope, embedding, grad_norm, attention, ...) runs one group, by hand.
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

// Whether the `guard` elements past the first n of a buffer are still the 0xff poison (NaN) after a kernel
// that should write only the first n.
void CheckUntouched(const std::string& what, DType dt, const Buf& buf, int64_t n) {
  const std::vector<float> all = buf.floats();
  int64_t written = 0;
  for (size_t i = n; i < all.size(); ++i) written += !std::isnan(all[i]);
  if (written != 0) ++failures;
  std::printf("%s %s: %ld elements past the end untouched [%s]\n", written ? "FAIL" : "ok  ", what.c_str(),
              static_cast<long>(all.size() - n), DTypeName(dt));
}

// got == want element for element, NaN matching NaN (poisoned elements that must stay poisoned).
void CheckSame(const std::string& what, DType dt, const std::vector<float>& got,
               const std::vector<float>& want) {
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))) continue;
    if (bad++ == 0) first = static_cast<int64_t>(i);
  }
  const bool ok = bad == 0 && got.size() == want.size();
  if (!ok) ++failures;
  std::printf("%s %s bitwise [%s]", ok ? "ok  " : "FAIL", what.c_str(), DTypeName(dt));
  if (bad != 0)
    std::printf(": %ld of %zu differ, first [%ld] %g vs %g", static_cast<long>(bad), want.size(),
                static_cast<long>(first), got[first], want[first]);
  std::printf("\n");
}

// The first n values of v.
std::vector<float> Head(std::vector<float> v, int64_t n) {
  v.resize(n);
  return v;
}

// v followed by kNormGuard NaNs: a buffer whose elements past the first v.size() must stay poisoned.
constexpr int64_t kNormGuard = 8;
std::vector<float> Guarded(std::vector<float> v) {
  v.resize(v.size() + kNormGuard, std::nanf(""));
  return v;
}

// One norm backward case: RMSNorm (layer false) or LayerNorm with or without dbias, from the CPU forward's
// statistics, against the CPU backward: dx (written), dweight and dbias (+=, onto nonzero values), every
// output with poisoned elements past its end that must stay untouched. `off` puts every tensor one element
// off 16-byte alignment (the scalar path); `alias` writes dx over dout (in place); `twice` runs the backward
// a second time on fresh outputs and wants all of it bitwise the same (fixed-order sums, no atomics).
// dweight and dbias sum over the rows in a different order than the CPU (per block, then over blocks):
// 2e-5 relative plus 1e-4 absolute on sums of up to ~4000 products of O(1) values.
void CheckNormBackward(const Env& e, int64_t N, int64_t C, bool layer, bool has_bias, int off, bool alias,
                       bool twice) {
  auto x = RandomNormal(N * C, 6);
  for (float& v : x) v += 0.5f;
  x = e.R(x);
  const auto w = e.R(RandomNormal(C, 7)), d = e.R(RandomNormal(N * C, 9));
  const auto dw0 = RandomNormal(C, 10), db0 = RandomNormal(C, 11);
  std::vector<float> mean(N), rstd(N), out(N * C), dx(N * C), dw = dw0, db = db0;
  if (layer) {
    cpu::LayerNormForward(
        e.cpu, {DType::kF32, N, C, 1e-5f, x.data(), w.data(), nullptr, out.data(), mean.data(), rstd.data()});
    cpu::LayerNormBackward(e.cpu, {DType::kF32, N, C, x.data(), w.data(), mean.data(), rstd.data(), d.data(),
                                   dx.data(), dw.data(), has_bias ? db.data() : nullptr});
  } else {
    cpu::RmsNormForward(e.cpu, {DType::kF32, N, C, 1e-5f, x.data(), w.data(), out.data(), rstd.data()});
    cpu::RmsNormBackward(
        e.cpu, {DType::kF32, N, C, x.data(), w.data(), rstd.data(), d.data(), dx.data(), dw.data()});
  }
  const std::string s = std::string(layer ? (has_bias ? "layernorm bias" : "layernorm no bias") : "rmsnorm") +
                        e.Tag(" backward N=%ld C=%ld", N, C) + (off ? " off=1" : "") +
                        (alias ? " dx=dout" : "");
  struct Outputs {
    Buf dout, dx, dw, db;
  };
  Buf gx(x, e.dt, off), gw(w, e.dt, off), gm(mean, DType::kF32, off), gr(rstd, DType::kF32, off);
  auto run = [&]() {
    Outputs o{Buf(Guarded(d), e.dt, off), Buf(alias ? 1 : N * C + kNormGuard, e.dt, off),
              Buf(Guarded(dw0), DType::kF32, off), Buf(Guarded(db0), DType::kF32, off)};
    void* gdx = alias ? o.dout.get() : o.dx.get();
    if (layer) {
      ExpectOk(
          s, kc::LayerNormBackward(e.gpu, {e.dt, N, C, gx.get(), gw.get(), gm.as<float>(), gr.as<float>(),
                                           o.dout.get(), gdx, o.dw.get(), has_bias ? o.db.get() : nullptr}));
    } else {
      ExpectOk(s, kc::RmsNormBackward(e.gpu, {e.dt, N, C, gx.get(), gw.get(), gr.as<float>(), o.dout.get(),
                                              gdx, o.dw.get()}));
    }
    return o;
  };
  const Outputs o = run();
  const Buf& gdx = alias ? o.dout : o.dx;
  Check(s + " dx", e.dt, Head(gdx.floats(), N * C), dx);
  CheckUntouched(s + " dx", e.dt, gdx, N * C);
  Check(s + " dweight (+=)", e.dt, Head(o.dw.floats(), C), dw, 2e-5, 1e-4);
  CheckUntouched(s + " dweight", DType::kF32, o.dw, C);
  Check(s + " dbias (+=)", e.dt, Head(o.db.floats(), C), has_bias ? db : db0, 2e-5, 1e-4);
  CheckUntouched(s + " dbias", DType::kF32, o.db, C);
  if (!alias) CheckSame(s + " dout unchanged", e.dt, o.dout.floats(), Guarded(d));
  if (twice) {
    const Outputs o2 = run();
    CheckSame(s + " second run dx", e.dt, (alias ? o2.dout : o2.dx).floats(), gdx.floats());
    CheckSame(s + " second run dweight", DType::kF32, o2.dw.floats(), o.dw.floats());
    CheckSame(s + " second run dbias", DType::kF32, o2.db.floats(), o.db.floats());
  }
}

// The norms: the forward (and the fused residual-add forward) on the shapes below, then the backward on
// those shapes and on the ones where the fused backward's blocks, row groups and column steps go wrong.
void CheckNorms(const Env& e) {
  for (int64_t C : {768, 1001, 8, 24, 40, 1})
    for (int64_t N : {1, 67, 1000}) {
      if (C == 1 && N != 67) continue;
      auto x = RandomNormal(N * C, 6);
      for (float& v : x) v += 0.5f;
      x = e.R(x);
      const auto w = e.R(RandomNormal(C, 7)), bias = e.R(RandomNormal(C, 8));
      const std::string tag = e.Tag(" N=%ld C=%ld", N, C);
      {
        std::vector<float> out(N * C), rstd(N);
        cpu::RmsNormForward(e.cpu, {DType::kF32, N, C, 1e-5f, x.data(), w.data(), out.data(), rstd.data()});
        Buf gx(x, e.dt), gw(w, e.dt), go(N * C, e.dt), gr(N, DType::kF32);
        const std::string s = "rmsnorm" + tag;
        ExpectOk(
            s, kc::RmsNormForward(e.gpu, {e.dt, N, C, 1e-5f, gx.get(), gw.get(), go.get(), gr.as<float>()}));
        Check(s + " out", e.dt, go.floats(), out);
        Check(s + " rstd", e.dt, gr.floats(), rstd, 2e-5, 1e-6);
      }
      for (bool has_bias : {true, false}) {
        std::vector<float> out(N * C), mean(N), rstd(N);
        const float* bp = has_bias ? bias.data() : nullptr;
        cpu::LayerNormForward(
            e.cpu, {DType::kF32, N, C, 1e-5f, x.data(), w.data(), bp, out.data(), mean.data(), rstd.data()});
        Buf gx(x, e.dt), gw(w, e.dt), gb(bias, e.dt), go(N * C, e.dt), gm(N, DType::kF32), gr(N, DType::kF32);
        const std::string s = "layernorm" + tag + (has_bias ? " bias" : " no bias");
        ExpectOk(s, kc::LayerNormForward(
                        e.gpu, {e.dt, N, C, 1e-5f, gx.get(), gw.get(), has_bias ? gb.get() : nullptr,
                                go.get(), gm.as<float>(), gr.as<float>()}));
        Check(s + " out", e.dt, go.floats(), out);
        Check(s + " mean", e.dt, gm.floats(), mean, 2e-5, 1e-6);
        Check(s + " rstd", e.dt, gr.floats(), rstd, 2e-5, 1e-6);
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
      for (int kind = 0; kind < 3; ++kind) CheckNormBackward(e, N, C, kind > 0, kind == 1, 0, false, false);
    }
  // The backward's own shapes (norm_kernels.cuh: 8 rows per row group, at most 512 blocks): N = 4133 gives
  // blocks of two row groups and a last block of 5 rows (warps 5-7 idle); C = 13 takes the scalar path
  // with a ragged column step; C = 8192 needs more than 48 KiB of shared memory (the opt-in); C = 40000
  // keeps its per-block sums in the block's global partial row instead of shared memory.
  struct Shape {
    int64_t N, C;
    int off;
    bool alias, twice;
  };
  for (const Shape& sh :
       {Shape{4133, 8, 0, false, true}, Shape{4133, 40, 0, true, false}, Shape{4133, 13, 0, false, true},
        Shape{67, 768, 1, false, false}, Shape{67, 768, 0, true, true}, Shape{67, 1001, 1, true, false},
        Shape{20, 8192, 0, false, true}, Shape{3, 40000, 0, false, true}, Shape{3, 40000, 1, true, false}})
    for (int kind = 0; kind < 3; ++kind)
      CheckNormBackward(e, sh.N, sh.C, kind > 0, kind == 1, sh.off, sh.alias, sh.twice);
}

// RoPE on both paths of the CUDA kernel (16-byte accesses: HS, strides and pointers on 16 bytes; else one
// pair per thread): strided heads of a fused qkv buffer, padded output rows whose NaN padding must stay
// untouched, row and head strides off 8 (and off 4), HS not a multiple of 8, a misaligned pointer, in place,
// per-batch, shared and no positions. The kernel does the CPU kernel's float operations (the same
// double-precision table, rounded once), so the f32 results are bitwise the CPU's and the bf16 ones are the
// CPU's f32 results rounded to bf16.
void CheckRope(const Env& e) {
  struct Case {
    const char* what;
    int64_t HS, NH, in_h, in_row, out_h, out_row;
    int out_offset;  // elements off 16-byte alignment
    int positions;   // 0: null, 1: shared by the batch (stride 0), 2: per batch
    bool in_place;
  };
  const Case cases[] = {
      {"q of fused qkv, padded out rows", 64, 3, 64, 9 * 64, 64, 3 * 64 + 8, 0, 2, false},
      {"in row stride +4", 64, 3, 64, 3 * 64 + 4, 64, 3 * 64, 0, 1, false},
      {"in head stride +2", 64, 3, 66, 3 * 66, 64, 3 * 64, 0, 0, false},
      {"HS 12", 12, 5, 12, 60, 12, 68, 0, 2, false},
      {"misaligned out", 64, 3, 64, 192, 64, 192, 1, 2, false},
      {"q|k heads of fused qkv in place", 128, 3, 128, 4 * 128, 128, 4 * 128, 0, 1, true},
      {"HS 2 in place", 2, 3, 2, 6, 2, 6, 0, 0, true},
  };
  const int64_t B = 2, T = 19;
  std::vector<int32_t> pos(B * T);
  for (int64_t i = 0; i < B * T; ++i) pos[i] = static_cast<int32_t>((i * 7919) % 100000);
  for (const Case& c : cases) {
    const auto in = e.R(RandomNormal(B * T * c.in_row, 15 + c.HS));
    for (int backward = 0; backward < 2; ++backward) {
      RopeParams p;
      p.B = B, p.T = T, p.NH = c.NH, p.HS = c.HS;
      p.in_stride_b = T * c.in_row, p.in_stride_t = c.in_row, p.in_stride_h = c.in_h;
      p.out_stride_b = T * c.out_row, p.out_stride_t = c.out_row, p.out_stride_h = c.out_h;
      p.positions = c.positions == 0 ? nullptr : pos.data();
      p.positions_stride_b = c.positions == 2 ? T : 0;
      std::vector<float> want = c.in_place ? in : std::vector<float>(B * T * c.out_row, NAN);
      p.in = in.data(), p.out = want.data();
      backward ? cpu::RopeBackward(e.cpu, p) : cpu::RopeForward(e.cpu, p);
      Buf gin(in, e.dt), gout(B * T * c.out_row, e.dt, c.out_offset);
      p.dtype = e.dt, p.in = gin.get(), p.out = c.in_place ? gin.get() : gout.get();
      const std::string s = std::string("rope ") + c.what + (backward ? " backward" : " forward");
      ExpectOk(s, backward ? kc::RopeBackward(e.gpu, p) : kc::RopeForward(e.gpu, p));
      CheckSame(s, e.dt, (c.in_place ? gin : gout).floats(), e.R(want));
      if (!c.in_place) CheckSame(s + " input unchanged", e.dt, gin.floats(), in);
    }
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

// Both access widths (C a multiple of 16 bytes' elements and aligned rows: 16 bytes; C = 12: fp32 only; C = 5
// or a pointer one element off: one element), 8 poisoned elements past the end of out and dtable that must
// stay untouched, and the backward's fixed order: per id, its rows summed in ascending order in fp32, then
// added once to dtable, bit for bit (and within tolerance of the CPU kernel, which adds row by row).
void CheckEmbedding(const Env& e) {
  struct Case {
    int64_t C;
    int table_offset, out_offset;  // elements off 16-byte alignment (dtable and dout: the same)
  };
  constexpr int64_t kGuard = 8;
  for (const Case& k : {Case{96, 0, 0}, Case{5, 0, 0}, Case{12, 0, 0}, Case{96, 1, 0}, Case{96, 0, 1}}) {
    const int64_t N = 1000, V = 300, C = k.C;
    const auto table = e.R(RandomNormal(V * C, 60)), d = e.R(RandomNormal(N * C, 61));
    const auto dt0 = RandomNormal(V * C, 62);
    std::vector<int32_t> ids(N);
    std::mt19937 rng(63);
    for (int32_t& i : ids) i = static_cast<int32_t>(rng() % 40);  // many repeats
    ids[5] = V - 1, ids[7] = 256;
    std::vector<float> out(N * C), dtab = dt0;
    cpu::EmbeddingForward(e.cpu, {DType::kF32, N, V, C, ids.data(), table.data(), out.data()});
    cpu::EmbeddingBackward(e.cpu, {DType::kF32, N, V, C, ids.data(), d.data(), dtab.data()});
    std::vector<float> ordered = dt0;  // the CUDA kernel's order
    for (int64_t id = 0; id < V; ++id)
      for (int64_t c = 0; c < C; ++c) {
        float sum = 0.0f;
        bool any = false;
        for (int64_t n = 0; n < N; ++n)
          if (ids[n] == id) sum += d[n * C + c], any = true;
        if (any) ordered[id * C + c] += sum;
      }
    std::vector<float> dt_padded = dt0;
    dt_padded.resize(V * C + kGuard, NAN);
    Buf gt(table, e.dt, k.table_offset), gd(d, e.dt, k.out_offset), go(N * C + kGuard, e.dt, k.out_offset),
        gdt(dt_padded, DType::kF32, k.table_offset);
    const std::string s = e.Tag("embedding C=%ld table/dtable off=%ld out/dout off=%ld", C, k.table_offset,
                                k.out_offset);
    ExpectOk(s, kc::EmbeddingForward(e.gpu, {e.dt, N, V, C, ids.data(), gt.get(), go.get()}));
    ExpectOk(s, kc::EmbeddingBackward(e.gpu, {e.dt, N, V, C, ids.data(), gd.get(), gdt.get()}));
    std::vector<float> got_out = go.floats(), got_dt = gdt.floats();
    got_out.resize(N * C), got_dt.resize(V * C);
    Check(s + " out", e.dt, got_out, out, 0, 0);
    CheckUntouched(s + " out", e.dt, go, N * C);
    Check(s + " dtable (+=)", e.dt, got_dt, dtab, 2e-5, 1e-4);
    CheckSame(s + " dtable in row order", e.dt, got_dt, ordered);
    CheckUntouched(s + " dtable", e.dt, gdt, V * C);
    // ids_checked (the model checks on the host) skips only the device-side check: the same results.
    Buf go2(N * C + kGuard, e.dt, k.out_offset), gdt2(dt_padded, DType::kF32, k.table_offset);
    ExpectOk(s, kc::EmbeddingForward(e.gpu, {e.dt, N, V, C, ids.data(), gt.get(), go2.get(), true}));
    ExpectOk(s, kc::EmbeddingBackward(e.gpu, {e.dt, N, V, C, ids.data(), gd.get(), gdt2.get(), true}));
    std::vector<float> out2 = go2.floats(), dt2 = gdt2.floats();
    out2.resize(N * C), dt2.resize(V * C);
    CheckSame(s + " out with ids_checked", e.dt, out2, got_out);
    CheckSame(s + " dtable with ids_checked", e.dt, dt2, got_dt);
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

// Gradients of odd sizes (below, at and across the 16K chunk and the 16-byte vector), every other one a
// pointer one element off 16-byte alignment (the scalar path), each with 8 poisoned elements past its end
// that clipping must leave untouched. The norm is within fp32 rounding of the CPU's (the sum's order within
// a chunk differs); the clipped values are exactly g * min(1, max_norm / (norm + 1e-6)) for the norm the
// kernel returned.
void CheckGradNorm(const Env& e) {
  const std::vector<int64_t> sizes = {7, 100000, 16384, 33, 2 * 16384 + 9, 1, 40000, 24};
  constexpr int64_t kGuard = 8;
  const int64_t num = static_cast<int64_t>(sizes.size());
  std::vector<std::vector<float>> grads;
  std::vector<Buf> bufs;
  std::vector<GradSpan> cpu_spans, gpu_spans;
  for (int64_t i = 0; i < num; ++i) {
    grads.push_back(e.R(RandomNormal(sizes[i], 20 + i)));
    std::vector<float> padded = grads.back();
    padded.resize(sizes[i] + kGuard, NAN);
    bufs.emplace_back(padded, e.dt, static_cast<int>(i % 2));
  }
  for (int64_t i = 0; i < num; ++i) {
    cpu_spans.push_back({grads[i].data(), sizes[i]});
    gpu_spans.push_back({bufs[i].get(), sizes[i]});
  }
  auto value = [](const absl::StatusOr<float>& s) { return s.ok() ? *s : NAN; };
  for (int64_t i = 0; i < num; ++i) {  // each alone: a dropped or doubled element shows in a small one
    const float one = cpu::GlobalGradNorm(e.cpu, {DType::kF32, &cpu_spans[i], 1});
    Check(e.Tag("grad norm of one tensor n=%ld off=%ld", sizes[i], i % 2), e.dt,
          {value(kc::GlobalGradNorm(e.gpu, {e.dt, &gpu_spans[i], 1}))}, {one}, 1e-5, 0);
  }
  const float ref = cpu::GlobalGradNorm(e.cpu, {DType::kF32, cpu_spans.data(), num});
  // fp32 sums over at most 16K terms per chunk in two different orders: ~1e-6 relative.
  Check("grad norm", e.dt, {value(kc::GlobalGradNorm(e.gpu, {e.dt, gpu_spans.data(), num}))}, {ref}, 1e-5, 0);
  const float norm = value(kc::ClipGradNorm(e.gpu, {e.dt, gpu_spans.data(), num}, 1.0f));
  Check("clip returns the norm", e.dt, {norm}, {ref}, 1e-5, 0);
  float scale = 1.0f / (norm + 1e-6f);
  scale = scale < 1.0f ? scale : 1.0f;
  for (int64_t i = 0; i < num; ++i) {
    std::vector<float> want = grads[i], got = bufs[i].floats();
    for (float& x : want) x *= scale;
    got.resize(sizes[i]);
    const std::string s = e.Tag("clipped n=%ld off=%ld", sizes[i], i % 2);
    CheckSame(s, e.dt, got, e.R(want));
    CheckUntouched(s, e.dt, bufs[i], sizes[i]);
  }
  Check("norm after clipping to 1", e.dt, {value(kc::GlobalGradNorm(e.gpu, {e.dt, gpu_spans.data(), num}))},
        {1.0f}, 0, e.dt == DType::kF32 ? 1e-5 : 4e-3);
}

// Many tensors of odd sizes (below, at and across the 16K chunk and the 8-element vector), each with one of
// its pointers (or none) one element off 16-byte alignment, so both the vector path and the scalar fallback
// run in one launch; each buffer has 8 poisoned elements past its end that must stay untouched. The CPU
// kernel does the same float operations, so every update must match bit for bit.
void CheckAdamW(const Env& e) {
  const std::vector<int64_t> sizes = {1, 7, 8, 9, 40000, 1000, 16383, 16395, 33, 2 * 16384 + 5, 24, 100};
  constexpr int64_t kGuard = 8;
  const int64_t num = static_cast<int64_t>(sizes.size());
  std::vector<std::vector<float>> param, grad, m, v;
  std::vector<std::vector<uint16_t>> copies;
  std::vector<Buf> gp, gg, gm, gv, gc;
  std::vector<AdamWTensor> gpu_tensors, cpu_tensors;
  for (int64_t i = 0; i < num; ++i) {
    const int64_t n = sizes[i];
    // Even tensors aligned; odd ones have param, grad, m, v or the copy one element off.
    const int off = i % 2 == 0 ? 0 : static_cast<int>(1 + (i / 2) % 5);
    auto padded = [&](const std::vector<float>& x) {
      std::vector<float> y = x;
      y.resize(n + kGuard, NAN);
      return y;
    };
    param.push_back(RandomNormal(n, 30 + i)), grad.push_back(e.R(RandomNormal(n, 40 + i)));
    m.push_back(RandomNormal(n, 50 + i, 0.1f)), v.push_back(RandomNormal(n, 60 + i, 0.01f)),
        copies.emplace_back(n);
    for (float& x : v.back()) x = x * x;
    gp.emplace_back(padded(param.back()), DType::kF32, off == 1);
    gg.emplace_back(padded(grad.back()), e.dt, off == 2);
    gm.emplace_back(padded(m.back()), DType::kF32, off == 3);
    gv.emplace_back(padded(v.back()), DType::kF32, off == 4);
    gc.emplace_back(n + kGuard, DType::kBF16, off == 5);
  }
  for (int64_t i = 0; i < num; ++i) {
    gpu_tensors.push_back(
        {sizes[i], gp[i].as<float>(), gg[i].get(), gm[i].as<float>(), gv[i].as<float>(), gc[i].get()});
    cpu_tensors.push_back(
        {sizes[i], param[i].data(), grad[i].data(), m[i].data(), v[i].data(), copies[i].data()});
  }
  gpu_tensors[3].param_copy = nullptr, cpu_tensors[3].param_copy = nullptr;  // no copy: must stay NaN
  const float norm = 3.0f;
  Buf gnorm(std::vector<float>{norm}, DType::kF32);
  for (int64_t step = 1; step <= 3; ++step) {
    MultiTensorAdamWParams p;
    p.num_tensors = num, p.lr = 1e-2f, p.weight_decay = 0.1f, p.step = step, p.grad_scale = 0.5f,
    p.max_norm = 1.0f;
    p.tensors = cpu_tensors.data(), p.norm = &norm;
    cpu::MultiTensorAdamW(e.cpu, p);
    p.grad_dtype = e.dt, p.tensors = gpu_tensors.data(), p.norm = gnorm.as<float>();
    ExpectOk("adamw", kc::MultiTensorAdamW(e.gpu, p));
  }
  for (int64_t i = 0; i < num; ++i) {
    const int64_t n = sizes[i];
    const char* const kOff[] = {"none", "param", "grad", "m", "v", "copy"};
    const std::string s =
        e.Tag("adamw n=%ld", n) + " off 16 bytes: " + kOff[i % 2 ? 1 + (i / 2) % 5 : 0] + " (clipped, 3 steps)";
    const auto first = [n](const Buf& b) {
      std::vector<float> f = b.floats();
      f.resize(n);
      return f;
    };
    Check(s + " param bitwise", e.dt, first(gp[i]), param[i], 0, 0);
    Check(s + " m bitwise", e.dt, first(gm[i]), m[i], 0, 0);
    Check(s + " v bitwise", e.dt, first(gv[i]), v[i], 0, 0);
    CheckUntouched(s + " param", e.dt, gp[i], n);
    CheckUntouched(s + " m", e.dt, gm[i], n);
    CheckUntouched(s + " v", e.dt, gv[i], n);
    if (i == 3) {
      CheckUntouched(s + " null bf16 copy", e.dt, gc[i], 0);
      continue;
    }
    std::vector<float> copy(n);
    for (int64_t j = 0; j < n; ++j) copy[j] = BF16ToFloat(copies[i][j]);
    Check(s + " bf16 copy bitwise", e.dt, first(gc[i]), copy, 0, 0);
    CheckUntouched(s + " bf16 copy", e.dt, gc[i], n);
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
  // EMULATION_ONLY=name (e.g. adamw): run only that group of checks, for quick iterations by hand.
  const char* only = std::getenv("EMULATION_ONLY");
  auto wanted = [only](const char* name) { return only == nullptr || std::strcmp(only, name) == 0; };
  for (DType dt : {DType::kF32, DType::kBF16}) {
    Env e;
    e.gpu.device = Device::Cuda(0);
    e.gpu.allocator = &allocator;
    e.dt = dt;
    if (wanted("activations")) CheckActivations(e);
    if (wanted("residual")) CheckResidual(e);
    if (wanted("norms")) CheckNorms(e);
    if (wanted("swiglu")) CheckSwiGlu(e);
    if (wanted("rope")) CheckRope(e);
    if (wanted("cross_entropy")) CheckCrossEntropy(e);
    if (wanted("embedding")) CheckEmbedding(e);
    if (wanted("grad_norm")) CheckGradNorm(e);
    if (wanted("adamw")) CheckAdamW(e);
    if (dt == DType::kF32 && wanted("cast")) CheckCast(e.gpu, e.cpu);
  }
  Context gpu;
  gpu.device = Device::Cuda(0);
  gpu.allocator = &allocator;
  if (wanted("attention")) CheckAttention(gpu);
  if (wanted("column_sum")) CheckColumnSum(gpu);
  std::printf("%d failures\n", failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace lmf::kernels

int main() { return lmf::kernels::Main(); }
