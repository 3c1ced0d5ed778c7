// Runs the CUDA attention kernels (attention_cuda.cu: bf16 FlashAttention-2 on mma.sync, emulated from the
// PTX ISA tables by fake/kernels/cuda/mma.cuh; attention_wgmma_cuda.cu: the Hopper forward and the dk/dv
// and dq backward kernels on wgmma, fake/kernels/attention/wgmma.cuh, after that fake's self-test in
// wgmma_check.cc (kWgmmaDkDv's dq is checked bitwise against the FA2 backward's, kWgmma's dk and dv bitwise
// against kWgmmaDkDv's and, in this emulation's summation order, its dq against the FA2 backward's);
// attention_f32_cuda.cu: f32
// on CUDA cores) forward and backward against the CPU attention kernel, and the column sums
// (column_sum_cuda.cu, the bias gradient) against a plain sum, through the CPU emulation of cuemu.h (built
// and run by emulated_test.sh with emulation_check.cc, whose main calls these).
//
// Attention shapes: T != S both ways, T and S not multiples of the 64/32-row tiles, MHA, GQA and MQA,
// causal and not, tiles that need no masking (inside T and S, below the causal diagonal) and tiles that do,
// q/k/v/out/dq/dk/dv in padded rows (the pads poisoned with NaN and checked untouched, every
// buffer exactly sized so that SANITIZE=1 catches accesses past its end, except the wgmma forward's out and
// lse: 127 poisoned rows after their end, checked untouched; the inputs checked unchanged), a
// mask per batch and head, per head, or broadcast, with a query that sees no key (out 0, lse -inf, dq 0)
// and a key no query sees (dk = dv = 0).
//
// Tolerances, as a fraction of the largest |reference| of the tensor: f32 2e-5 (the same fp32 math in
// another summation order); bf16 1e-2 for out and 2e-2 for the gradients: the kernels round P (and dS) to
// bf16 before the second products, a relative error of 2^-9 per term, and round the outputs to bf16 (2^-9
// of the value), while the CPU reference keeps fp32; lse is accumulated in fp32 from the same
// (bf16-valued) products on both sides: 1e-4 (1 + |lse|) absolute for both dtypes.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/cuda/emulation/check_util.h"
#include "kernels/matmul/column_sum_cuda.h"

namespace cuemu {
void SetComputeCapability(int major, int minor);  // cuemu.h (not included: its CUDA macros stay out of here)
}  // namespace cuemu

namespace lmf::kernels {

int CheckWgmmaEmulation();  // wgmma_check.cc: the fake wgmma's self-test; returns its failures

namespace {

struct AttentionCase {
  int64_t B, T, S, NH, NKV, HS;
  bool causal;
  int mask;         // 0: none; 1: per head (broadcast over batch); 2: broadcast; 3: per batch and head
  bool bf16;        // also run in bf16 (head sizes 64 and 128 only)
  bool f32 = true;  // also run in f32 (false: a shape for the bf16 kernels only; f32 is the slowest here)
  int64_t window = 0;  // sliding window (0: none)
  float softcap = 0;   // logit soft-cap (0: none)
};

// A (rows, heads, HS) tensor stored in rows of heads * HS + pad elements, per batch rows * that.
struct Layout {
  int64_t B, rows, heads, HS, pad;
  int64_t row() const { return heads * HS + pad; }
  int64_t size() const { return B * rows * row(); }
  int64_t logical() const { return B * rows * heads * HS; }
  int64_t at(int64_t i) const {  // padded index of logical (contiguous) element i
    const int64_t d = i % HS, h = (i / HS) % heads, r = (i / (HS * heads)) % rows,
                  b = i / (HS * heads * rows);
    return (b * rows + r) * row() + h * HS + d;
  }
};

// Logical values into a NaN-poisoned padded buffer.
Buf Scatter(const std::vector<float>& logical, const Layout& l, DType dt) {
  Buf buf(l.size(), dt);
  for (int64_t i = 0; i < l.logical(); ++i) {
    if (dt == DType::kF32) {
      buf.as<float>()[l.at(i)] = logical[i];
    } else {
      buf.as<uint16_t>()[l.at(i)] = FloatToBF16(logical[i]);
    }
  }
  return buf;
}

// The logical values of a padded buffer; counts the pad elements that are no longer the NaN poison.
std::vector<float> Gather(const Buf& buf, const Layout& l, DType dt, int64_t* pads_written) {
  const std::vector<float> all = buf.floats();
  std::vector<float> out(l.logical());
  std::vector<char> logical(l.size(), 0);
  for (int64_t i = 0; i < l.logical(); ++i) out[i] = all[l.at(i)], logical[l.at(i)] = 1;
  for (int64_t i = 0; i < l.size(); ++i) {
    if (logical[i]) continue;
    const bool poison = dt == DType::kF32 ? std::memcmp(&buf.as<float>()[i], "\xff\xff\xff\xff", 4) == 0
                                          : buf.as<uint16_t>()[i] == 0xffff;
    if (!poison) ++*pads_written;
  }
  return out;
}

// max |got - want| <= tol * max |want| (NaN fails; infinities must match exactly).
void CheckScaled(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                 double tol) {
  double scale = 0, worst = 0;
  int64_t worst_i = -1, mismatched_inf = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::isfinite(want[i])) scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(want[i]) || !std::isfinite(got[i])) {
      if (!(got[i] == want[i])) ++mismatched_inf, worst_i = static_cast<int64_t>(i);
      continue;
    }
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (d > worst) worst = d, worst_i = static_cast<int64_t>(i);
  }
  const bool ok = mismatched_inf == 0 && worst <= tol * scale && got.size() == want.size();
  if (!ok) ++failures;
  std::printf("%s %s: max error %.3g of scale %.3g (tol %.3g)%s\n", ok ? "ok  " : "FAIL", what.c_str(), worst,
              scale, tol, mismatched_inf ? ", non-finite mismatch" : "");
  if (!ok && worst_i >= 0)
    std::printf("     worst [%ld] %g vs %g\n", static_cast<long>(worst_i), got[worst_i], want[worst_i]);
}

void Expect(bool ok, const std::string& what) {
  if (!ok) ++failures;
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
}

// ATTENTION_ONLY=wgmma (with EMULATION_ONLY=attention): only the bf16 cases (the wgmma forward, the three
// backwards) and the fake wgmma's self-test.
bool WgmmaOnly() {
  const char* only = std::getenv("ATTENTION_ONLY");
  return only != nullptr && std::strcmp(only, "wgmma") == 0;
}

// The name a case's lines start with: "attention B=1 T=50 ... [bf16]".
std::string CaseName(const AttentionCase& c, DType dt) {
  char tag[200];
  char cap[32] = "";
  if (c.softcap > 0) std::snprintf(cap, sizeof(cap), " softcap %g", c.softcap);
  const std::string extras = (c.window > 0 ? " window " + std::to_string(c.window) : "") + cap;
  std::snprintf(tag, sizeof(tag), "attention B=%ld T=%ld S=%ld NH=%ld NKV=%ld HS=%ld%s%s%s [%s]",
                static_cast<long>(c.B), static_cast<long>(c.T), static_cast<long>(c.S),
                static_cast<long>(c.NH), static_cast<long>(c.NKV), static_cast<long>(c.HS),
                c.causal ? " causal" : "",
                c.mask == 1   ? " mask per head"
                : c.mask == 2 ? " mask"
                : c.mask == 3 ? " mask per batch, head"
                              : "",
                extras.c_str(), DTypeName(dt));
  return tag;
}

// One case in one dtype, its steps run in order by Run(): the inputs (rounded to the dtype) and the mask,
// the CPU reference, the default forward and its variants, the backward and its variants, and the masked
// query's and key's outputs.
class AttentionCaseRun {
 public:
  AttentionCaseRun(const Context& gpu, const AttentionCase& c, DType dt)
      : gpu_(gpu), c_(c), dt_(dt), pad_(dt == DType::kF32 ? 5 : 8),  // bf16 needs strides multiples of 8
        lq_{c.B, c.T, c.NH, c.HS, pad_}, lk_{c.B, c.S, c.NKV, c.HS, pad_ + 8}, lo_{c.B, c.T, c.NH, c.HS, pad_},
        q_(Rounded(RandomNormal(lq_.logical(), 100 + c.T))), k_(Rounded(RandomNormal(lk_.logical(), 200 + c.S))),
        v_(Rounded(RandomNormal(lk_.logical(), 300 + c.S))),
        dout_(Rounded(RandomNormal(lo_.logical(), 400 + c.T))), name_(CaseName(c, dt)),
        out_tol_(dt == DType::kF32 ? 2e-5 : 1e-2), grad_tol_(dt == DType::kF32 ? 2e-5 : 2e-2) {
    MakeMask();
  }

  void Run() {
    ComputeReference();
    CheckForward();
    if (dt_ == DType::kBF16) CheckWgmmaForward();
    if (dt_ == DType::kBF16 && !WgmmaOnly()) CheckLdmatrixForward();
    CheckBackward();
    if (dt_ == DType::kBF16) CheckWgmmaBackwards();
    if (c_.mask != 0) CheckMaskedQueryAndKey();
  }

 private:
  std::vector<float> Rounded(std::vector<float> v) const { return RoundTo(std::move(v), dt_); }

  // Mask (row stride S + 3): ~20% hidden at random, query 1 of head 0 sees no key, key S - 1 is seen by no
  // query of head 0 (of any head where the mask is broadcast).
  void MakeMask() {
    const AttentionCase& c = c_;
    mask_t_ = c.S + 3;
    mask_h_ = c.mask == 1 || c.mask == 3 ? c.T * mask_t_ : 0;
    mask_b_ = c.mask == 3 ? c.NH * c.T * mask_t_ : 0;
    mask_.resize(c.mask == 0 ? 0
                             : (c.mask == 3   ? c.B * c.NH
                                : c.mask == 1 ? c.NH
                                              : 1) *
                                   c.T * mask_t_);
    std::mt19937 rng(static_cast<uint32_t>(c.T * 31 + c.S));
    for (uint8_t& m : mask_) m = rng() % 5 == 0 ? 0 : 1;
    if (c.mask != 0) {
      for (int64_t u = 0; u < c.S; ++u) mask_[1 * mask_t_ + u] = 0;
      for (int64_t t = 0; t < c.T; ++t) mask_[t * mask_t_ + c.S - 1] = 0;
    }
  }

  AttentionParams Params(const void* qp, const void* kp, const void* vp, void* op, float* lse, const Layout& lq,
                         const Layout& lk, const Layout& lo) const {
    const AttentionCase& c = c_;
    AttentionParams p;
    p.B = c.B, p.T = c.T, p.S = c.S, p.NH = c.NH, p.NKV = c.NKV, p.HS = c.HS, p.causal = c.causal;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.HS));
    p.q = qp, p.q_stride_b = lq.rows * lq.row(), p.q_stride_t = lq.row(), p.q_stride_h = c.HS;
    p.k = kp, p.k_stride_b = lk.rows * lk.row(), p.k_stride_t = lk.row(), p.k_stride_h = c.HS;
    p.v = vp, p.v_stride_b = lk.rows * lk.row(), p.v_stride_t = lk.row(), p.v_stride_h = c.HS;
    p.out = op, p.out_stride_b = lo.rows * lo.row(), p.out_stride_t = lo.row(), p.out_stride_h = c.HS;
    p.lse = lse;
    p.window = c.window;
    p.softcap = c.softcap;
    if (c.mask != 0)
      p.mask = mask_.data(), p.mask_stride_b = mask_b_, p.mask_stride_h = mask_h_, p.mask_stride_t = mask_t_;
    return p;
  }

  // Reference: the CPU kernel in f32 on the same (dtype-rounded) values, contiguous.
  void ComputeReference() {
    const AttentionCase& c = c_;
    const Layout cq{c.B, c.T, c.NH, c.HS, 0}, ck{c.B, c.S, c.NKV, c.HS, 0};
    out_.resize(lo_.logical()), lse_.resize(c.B * c.NH * c.T), dq_.resize(lq_.logical()),
        dk_.resize(lk_.logical()), dv_.resize(lk_.logical());
    AttentionParams cp = Params(q_.data(), k_.data(), v_.data(), out_.data(), lse_.data(), cq, ck, cq);
    cpu::AttentionForward(Context::Cpu(), cp);
    AttentionBackwardParams cbp;
    cbp.forward = cp, cbp.dout = dout_.data(), cbp.dq = dq_.data(), cbp.dk = dk_.data(), cbp.dv = dv_.data();
    cpu::AttentionBackward(Context::Cpu(), cbp);
  }

  // lse within 1e-4 (1 + |lse|) of the reference's.
  void CheckLse(const std::string& what, const Buf& got_buf) const {
    const std::vector<float> got = got_buf.floats();
    int64_t bad = 0;
    for (size_t i = 0; i < lse_.size(); ++i)
      if (!(got[i] == lse_[i] || std::fabs(got[i] - lse_[i]) <= 1e-4 * (1 + std::fabs(lse_[i])))) ++bad;
    Expect(bad == 0, what + " (" + std::to_string(bad) + " of " + std::to_string(lse_.size()) + " differ)");
  }

  void CheckForward() {
    p_ = Params(gq_.get(), gk_.get(), gv_.get(), go_.get(), glse_.as<float>(), lq_, lk_, lo_);
    p_.dtype = dt_;
    ExpectOk(name_ + " forward", kc::AttentionForward(gpu_, p_));
    got_out_ = Gather(go_, lo_, dt_, &pads_);
    CheckScaled(name_ + " out", got_out_, out_, out_tol_);
    CheckLse(name_ + " lse", glse_);
  }

  // The wgmma (Hopper) forward: not bitwise the mma.sync kernel's (another summation order), so the same
  // tolerance against the reference; nothing in the pads, a fully masked query gives 0 and -inf. Its blocks
  // of 128 queries reach up to 127 rows past T: out and lse get that many poisoned rows after their end,
  // which must stay untouched (the last batch's and head's rows past T land there).
  void CheckWgmmaForward() {
    const AttentionCase& c = c_;
    const int64_t past_t = 127, out_guard = past_t * lo_.row(), lse_n = c.B * c.NH * c.T;
    Buf go3(lo_.size() + out_guard, dt_), glse3(lse_n + past_t, DType::kF32);
    AttentionParams p3 = p_;
    p3.out = go3.get(), p3.lse = glse3.as<float>();
    ExpectOk(name_ + " forward (wgmma)",
             kc::AttentionForwardWithVariant(gpu_, p3, kc::AttentionForwardVariant::kWgmma));
    int64_t pads3 = 0;
    const std::vector<float> got3 = Gather(go3, lo_, dt_, &pads3);
    CheckScaled(name_ + " out (wgmma)", got3, out_, out_tol_);
    CheckLse(name_ + " lse (wgmma)", glse3);
    Expect(pads3 == 0, name_ + " wgmma: nothing written in the row pads of out");
    bool guards_ok = true;
    for (int64_t i = 0; i < out_guard; ++i)
      guards_ok = guards_ok && go3.as<uint16_t>()[lo_.size() + i] == 0xffff;
    for (int64_t i = 0; i < past_t; ++i)
      guards_ok = guards_ok && std::memcmp(&glse3.as<float>()[lse_n + i], "\xff\xff\xff\xff", 4) == 0;
    Expect(guards_ok, name_ + " wgmma: nothing written past the end of out and lse (rows past T)");
    if (c.mask != 0) {
      bool row_ok = glse3.floats()[1] == -INFINITY;
      for (int64_t d = 0; d < c.HS; ++d) row_ok = row_ok && got3[1 * c.NH * c.HS + d] == 0.0f;
      Expect(row_ok, name_ + " wgmma: fully masked query: out 0, lse -inf");
    }
  }

  // The ldmatrix variant of the forward: bitwise the same out and lse.
  void CheckLdmatrixForward() {
    Buf go2(lo_.size(), dt_), glse2(c_.B * c_.NH * c_.T, DType::kF32);
    AttentionParams p2 = p_;
    p2.out = go2.get(), p2.lse = glse2.as<float>();
    ExpectOk(name_ + " forward (ldmatrix)",
             kc::AttentionForwardWithVariant(gpu_, p2, kc::AttentionForwardVariant::kLdmatrixV));
    Expect(std::memcmp(go_.get(), go2.get(), lo_.size() * 2) == 0 &&
               std::memcmp(glse_.get(), glse2.get(), lse_.size() * 4) == 0,
           name_ + " ldmatrix.trans variant bitwise equal to the packed one");
  }

  void CheckBackward() {
    bp_.forward = p_, bp_.dout = gd_.get(), bp_.dq = gdq_.get(), bp_.dk = gdk_.get(), bp_.dv = gdv_.get();
    ExpectOk(name_ + " backward", kc::AttentionBackward(gpu_, bp_));
    got_dq_ = Gather(gdq_, lq_, dt_, &pads_);
    got_dk_ = Gather(gdk_, lk_, dt_, &pads_);
    got_dv_ = Gather(gdv_, lk_, dt_, &pads_);
    CheckScaled(name_ + " dq", got_dq_, dq_, grad_tol_);
    CheckScaled(name_ + " dk", got_dk_, dk_, grad_tol_);
    CheckScaled(name_ + " dv", got_dv_, dv_, grad_tol_);
    DumpBits();
    Expect(pads_ == 0,
           name_ + " nothing written in the row pads of out, dq, dk, dv (" + std::to_string(pads_) + ")");
    auto same = [&](const Buf& got, const std::vector<float>& values, const Layout& l) {
      const Buf want = Scatter(values, l, dt_);
      return std::memcmp(got.get(), want.get(), l.size() * DTypeSize(dt_)) == 0;
    };
    Expect(same(gq_, q_, lq_) && same(gk_, k_, lk_) && same(gv_, v_, lk_) && same(gd_, dout_, lo_),
           name_ + " q, k, v, dout (and their pads) untouched");
  }

  // ATTN_DUMP=file appends the raw bits of the bf16 out, lse, dq, dk, dv (padded buffers) of every case: two
  // runs' files compare equal (cmp) when a kernel change claims to leave the arithmetic as it was.
  void DumpBits() const {
    const char* dump = std::getenv("ATTN_DUMP");
    if (dump == nullptr || dt_ != DType::kBF16) return;
    FILE* f = std::fopen(dump, "ab");
    std::fwrite(go_.get(), 1, lo_.size() * 2, f);
    std::fwrite(glse_.get(), 1, lse_.size() * 4, f);
    std::fwrite(gdq_.get(), 1, lq_.size() * 2, f);
    std::fwrite(gdk_.get(), 1, lk_.size() * 2, f);
    std::fwrite(gdv_.get(), 1, lk_.size() * 2, f);
    std::fclose(f);
  }

  // Key S - 1, which no query of head 0 sees: dk = dv = 0 where every query head of kv head 0 misses it.
  void ExpectUnseenKeyGetsNoGradient(const std::vector<float>& dk, const std::vector<float>& dv,
                                     const std::string& what) const {
    const AttentionCase& c = c_;
    if (!(c.mask == 2 || c.NH == c.NKV)) return;
    bool key_ok = true;
    for (int64_t d = 0; d < c.HS; ++d) {
      const int64_t i = (c.S - 1) * c.NKV * c.HS + d;
      key_ok = key_ok && dk[i] == 0.0f && dv[i] == 0.0f;
    }
    Expect(key_ok, what);
  }

  void CheckWgmmaBackwards() {
    const AttentionCase& c = c_;
    // The backward with the wgmma dk/dv kernel (on the same forward out and lse): dq is the FA2 kernel's, so
    // bitwise the same; dk, dv against the reference with the FA2 backward's tolerance; no pad written.
    Buf wdq(lq_.size(), dt_), wdk(lk_.size(), dt_), wdv(lk_.size(), dt_);
    AttentionBackwardParams wbp = bp_;
    wbp.dq = wdq.get(), wbp.dk = wdk.get(), wbp.dv = wdv.get();
    ExpectOk(name_ + " backward (wgmma dk/dv)",
             kc::AttentionBackwardWithVariant(gpu_, wbp, kc::AttentionBackwardVariant::kWgmmaDkDv));
    int64_t wpads = 0;
    const std::vector<float> wgot_dk = Gather(wdk, lk_, dt_, &wpads), wgot_dv = Gather(wdv, lk_, dt_, &wpads);
    Expect(std::memcmp(wdq.get(), gdq_.get(), lq_.size() * 2) == 0,
           name_ + " wgmma dk/dv backward: dq bitwise the FA2 backward's");
    CheckScaled(name_ + " dk (wgmma)", wgot_dk, dk_, grad_tol_);
    CheckScaled(name_ + " dv (wgmma)", wgot_dv, dv_, grad_tol_);
    Expect(wpads == 0, name_ + " wgmma dk/dv: nothing written in the row pads of dk, dv");
    if (c.mask != 0) {
      ExpectUnseenKeyGetsNoGradient(wgot_dk, wgot_dv, name_ + " wgmma: key seen by no query: dk = dv = 0");
    }

    // The whole backward on wgmma (kWgmma): its dq kernel against the reference with the same tolerance,
    // dk and dv bitwise kWgmmaDkDv's (the same dk/dv kernel on the same inputs); no pad written.
    Buf xdq(lq_.size(), dt_), xdk(lk_.size(), dt_), xdv(lk_.size(), dt_);
    AttentionBackwardParams xbp = bp_;
    xbp.dq = xdq.get(), xbp.dk = xdk.get(), xbp.dv = xdv.get();
    ExpectOk(name_ + " backward (wgmma)",
             kc::AttentionBackwardWithVariant(gpu_, xbp, kc::AttentionBackwardVariant::kWgmma));
    int64_t xpads = 0;
    const std::vector<float> xgot_dq = Gather(xdq, lq_, dt_, &xpads);
    CheckScaled(name_ + " dq (wgmma)", xgot_dq, dq_, grad_tol_);
    // In the emulation only (not a device property): both fakes sum each k16 product's terms in k order in
    // fp32 and then add it to the accumulator, and both dq kernels add the 16-key products in key order, so
    // the same per-element arithmetic (exp2 argument, masking, fp32 P, dS rounded to nearest bf16, scale)
    // gives the FA2 dq kernel's bits; a difference there (e.g. dS truncated to bf16, which the tolerance
    // above misses) shows here. Not with a soft-cap: the FA2 kernel takes the cap's derivative from the
    // recomputed score, the wgmma one from P and the lse (other roundings).
    Expect(c.softcap > 0 || std::memcmp(xdq.get(), gdq_.get(), lq_.size() * 2) == 0,
           name_ + " wgmma backward: dq bitwise the FA2 backward's (emulation's summation order)");
    Expect(std::memcmp(xdk.get(), wdk.get(), lk_.size() * 2) == 0 &&
               std::memcmp(xdv.get(), wdv.get(), lk_.size() * 2) == 0,
           name_ + " wgmma backward: dk, dv bitwise the wgmma dk/dv backward's");
    Expect(xpads == 0, name_ + " wgmma backward: nothing written in the row pads of dq");
    if (c.mask != 0) {
      bool row_ok = true;
      for (int64_t d = 0; d < c.HS; ++d) row_ok = row_ok && xgot_dq[1 * c.NH * c.HS + d] == 0.0f;
      Expect(row_ok, name_ + " wgmma backward: fully masked query: dq 0");
    }
  }

  // Batch 0, head 0: query 1 sees no key; key S - 1 is seen by no query.
  void CheckMaskedQueryAndKey() {
    const AttentionCase& c = c_;
    bool row_ok = got_out_.size() > 0 && glse_.floats()[1] == -INFINITY;
    for (int64_t d = 0; d < c.HS; ++d)
      row_ok = row_ok && got_out_[1 * c.NH * c.HS + d] == 0.0f && got_dq_[1 * c.NH * c.HS + d] == 0.0f;
    Expect(row_ok, name_ + " fully masked query: out 0, lse -inf, dq 0");
    // kv head 0 sums over its group's query heads: all of them miss the key where the mask is broadcast.
    ExpectUnseenKeyGetsNoGradient(got_dk_, got_dv_, name_ + " key seen by no query: dk = dv = 0");
  }

  const Context& gpu_;
  const AttentionCase& c_;
  const DType dt_;
  const int64_t pad_;
  const Layout lq_, lk_, lo_;
  const std::vector<float> q_, k_, v_, dout_;  // the inputs, rounded to dt_
  const std::string name_;
  const double out_tol_, grad_tol_;
  int64_t mask_t_ = 0, mask_h_ = 0, mask_b_ = 0;
  std::vector<uint8_t> mask_;
  std::vector<float> out_, lse_, dq_, dk_, dv_;  // the reference
  // The device buffers of the default kernels (padded layouts, pads poisoned).
  Buf gq_ = Scatter(q_, lq_, dt_), gk_ = Scatter(k_, lk_, dt_), gv_ = Scatter(v_, lk_, dt_),
      gd_ = Scatter(dout_, lo_, dt_);
  Buf go_{lo_.size(), dt_}, glse_{c_.B * c_.NH * c_.T, DType::kF32}, gdq_{lq_.size(), dt_},
      gdk_{lk_.size(), dt_}, gdv_{lk_.size(), dt_};
  AttentionParams p_;
  AttentionBackwardParams bp_;
  int64_t pads_ = 0;  // pad elements the default forward and backward wrote
  std::vector<float> got_out_, got_dq_, got_dk_, got_dv_;
};

void RunAttentionCase(const Context& gpu, const AttentionCase& c, DType dt) {
  AttentionCaseRun(gpu, c, dt).Run();
}

}  // namespace

void CheckAttention(const Context& gpu) {
  const AttentionCase cases[] = {
      {2, 77, 77, 4, 1, 64, true, 3, true},     // MQA, causal, T = S not a tile multiple, mask per batch
      {1, 50, 130, 4, 2, 64, false, 1, true},   // GQA, more keys than queries, per-head mask
      {1, 130, 50, 2, 2, 128, true, 2, true},   // MHA, fewer keys than queries, causal + mask
      {1, 70, 150, 4, 1, 64, true, 0, true},    // MQA, causal with S > T (keys past T seen by none)
      {1, 160, 200, 2, 1, 128, true, 0, true},  // tiles inside T, S and below the diagonal: no mask work
      {1, 200, 200, 4, 2, 64, true, 0, true, false},  // GQA causal T = S, bf16 only; wgmma: the tail block's
                                                      // upper warpgroup partly valid, 4 key steps, 3 for the
                                                      // lower one
      {1, 40, 300, 2, 1, 128, false, 0, true},  // HS 128 not causal, 5 key steps (the wgmma double buffers)
      {1, 45, 37, 2, 1, 32, false, 2, false},   // f32's HS 32
      // Sliding windows: causal GQA with a window of 2 (tiles crossing its lower edge, tiles wholly before
      // it, skipped by the FA2 kernels, the diagonal; the last query seeing key block 0, 64, opens query
      // block 64 of the dk/dv kernel); HS 128 with a window of 17 and a broadcast mask; not
      // causal with a window of 25 over 200 queries and 130 keys (key tiles and query blocks skipped, and
      // queries from 155 on past every key: out 0, lse -inf).
      {1, 150, 150, 4, 2, 64, true, 0, true, true, 2},
      {1, 100, 100, 2, 1, 128, true, 2, true, false, 17},
      {1, 200, 130, 2, 2, 64, false, 0, true, false, 25},
      // Causal over 300 with a window of 40: the wgmma forward's second block starts at key tile 1 and its
      // upper warpgroup joins at tile 2 (the lower one's first tile is before its window), the dq kernel
      // starts late, the dk/dv kernel's first key block ends after query block 1.
      {1, 300, 300, 2, 1, 64, true, 0, true, false, 40},
      // ... and not causal over 320 keys: there the block's K buffers are refilled (step 4's keys at step 2)
      // after the upper warpgroup's first S (step 2) has been read.
      {1, 300, 320, 2, 1, 64, false, 0, true, false, 40},
      // Logit soft-capping at 1.5 (scores of a few units: the tanh bends all of them): causal GQA; HS 128
      // not causal with a per-head mask and a window.
      {1, 100, 100, 4, 2, 64, true, 0, true, true, 0, 1.5f},
      {1, 70, 90, 2, 1, 128, false, 1, true, false, 30, 1.5f},
  };
  failures += CheckWgmmaEmulation();
  for (const AttentionCase& c : cases) {
    if (c.f32 && !WgmmaOnly()) RunAttentionCase(gpu, c, DType::kF32);
    if (c.bf16) RunAttentionCase(gpu, c, DType::kBF16);
  }
  AttentionParams p =
      ContiguousAttentionParams(1, 8, 8, 2, 1, 32, false, nullptr, nullptr, nullptr, nullptr, nullptr);
  p.dtype = DType::kBF16;
  const absl::Status st = kc::AttentionForward(gpu, p);
  Expect(st.code() == absl::StatusCode::kUnimplemented, "attention bf16 HS=32 refused: " + st.ToString());
  // The wgmma forward: refused in f32, and on a device other than sm_90 (checked before any launch).
  std::vector<float> x(8 * 2 * 64, 0.5f), lse(2 * 8);
  AttentionParams w =
      ContiguousAttentionParams(1, 8, 8, 2, 1, 64, false, x.data(), x.data(), x.data(), x.data(), lse.data());
  const absl::Status f32 = kc::AttentionForwardWithVariant(gpu, w, kc::AttentionForwardVariant::kWgmma);
  Expect(f32.code() == absl::StatusCode::kUnimplemented, "attention wgmma f32 refused: " + f32.ToString());
  w.dtype = DType::kBF16;
  ::cuemu::SetComputeCapability(8, 0);
  const absl::Status sm80 = kc::AttentionForwardWithVariant(gpu, w, kc::AttentionForwardVariant::kWgmma);
  ::cuemu::SetComputeCapability(9, 0);
  Expect(sm80.code() == absl::StatusCode::kUnimplemented,
         "attention wgmma on sm_80 refused: " + sm80.ToString());
  // The wgmma backwards (dk/dv only, and whole): the same two refusals, before any launch (dq, dk, dv stay
  // untouched).
  std::vector<float> grads(8 * 2 * 64, 7.0f);
  AttentionBackwardParams wb;
  wb.forward = w, wb.dout = x.data(), wb.dq = grads.data(), wb.dk = grads.data(), wb.dv = grads.data();
  for (const auto& [variant, what] :
       {std::pair{kc::AttentionBackwardVariant::kWgmmaDkDv, "wgmma dk/dv backward"},
        std::pair{kc::AttentionBackwardVariant::kWgmma, "wgmma backward"}}) {
    wb.forward.dtype = DType::kF32;
    const absl::Status bf32 = kc::AttentionBackwardWithVariant(gpu, wb, variant);
    Expect(bf32.code() == absl::StatusCode::kUnimplemented,
           std::string("attention ") + what + " f32 refused: " + bf32.ToString());
    wb.forward.dtype = DType::kBF16;
    ::cuemu::SetComputeCapability(8, 0);
    const absl::Status b80 = kc::AttentionBackwardWithVariant(gpu, wb, variant);
    ::cuemu::SetComputeCapability(9, 0);
    Expect(b80.code() == absl::StatusCode::kUnimplemented && grads[0] == 7.0f,
           std::string("attention ") + what + " on sm_80 refused: " + b80.ToString());
  }
}

void CheckColumnSum(const Context& gpu) {
  struct Shape {
    int64_t batch, rows, cols, ld, batch_stride;
    int offset;  // elements the input starts past a 16-byte boundary (not 0: the one-column path)
  };
  // 300 columns: a partial 128-column block (one column per thread); 1032 and 264 columns (multiples of 8
  // and 4, with ld and batch_stride too): 16-byte loads of 8 bf16 / 4 f32 columns per thread; 3 x 401 rows:
  // 3 rows per chunk, so chunks cross the batch boundaries (the batch advance inside a chunk), and the last
  // chunk is short; the same geometry with ld = 266 and with the input one element off 16 bytes: one column
  // per thread.
  for (const Shape& s :
       {Shape{3, 37, 300, 301, 37 * 301 + 5, 0}, Shape{2, 200, 130, 136, 200 * 136, 0},
        Shape{1, 1, 1, 1, 1, 0}, Shape{3, 401, 264, 272, 401 * 272 + 8, 0},
        Shape{3, 401, 264, 266, 401 * 266 + 3, 0}, Shape{3, 50, 1032, 1040, 50 * 1040 + 16, 0},
        Shape{3, 50, 1032, 1040, 50 * 1040 + 16, 1}})
    for (DType dt : {DType::kF32, DType::kBF16})
      for (bool accumulate : {true, false}) {
        const int64_t n = (s.batch - 1) * s.batch_stride + (s.rows - 1) * s.ld + s.cols;
        const auto in = RoundTo(RandomNormal(n, 500 + s.cols), dt), out0 = RandomNormal(s.cols, 501);
        std::vector<float> want(s.cols);
        for (int64_t c = 0; c < s.cols; ++c) {
          double sum = 0;
          for (int64_t b = 0; b < s.batch; ++b)
            for (int64_t r = 0; r < s.rows; ++r) sum += in[b * s.batch_stride + r * s.ld + c];
          want[c] = static_cast<float>((accumulate ? out0[c] : 0.0) + 0.5 * sum);
        }
        Buf gin(in, dt, s.offset), gout(out0, DType::kF32);
        kc::ColumnSumParams p;
        p.dtype = dt, p.rows = s.rows, p.cols = s.cols, p.ld = s.ld, p.batch = s.batch,
        p.batch_stride = s.batch_stride, p.scale = 0.5f, p.in = gin.get(), p.out = gout.as<float>(),
        p.accumulate = accumulate;
        char tag[128];
        std::snprintf(tag, sizeof(tag), "column sum batch=%ld rows=%ld cols=%ld ld=%ld off=%d%s",
                      static_cast<long>(s.batch), static_cast<long>(s.rows), static_cast<long>(s.cols),
                      static_cast<long>(s.ld), s.offset, accumulate ? " (+=)" : " (=)");
        ExpectOk(tag, kc::ColumnSum(gpu, p));
        // fp32 sums of at most 1200 terms of |x| ~ 1 in another order than the double reference.
        Check(tag, dt, gout.floats(), want, 1e-5, 2e-4);
      }
}

}  // namespace lmf::kernels
