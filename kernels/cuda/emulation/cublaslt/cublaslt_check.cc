// Runs kernels::cuda::Matmul / MatmulBackward (the real matmul_cuda.cc, cuda_context.cc, column_sum_cuda.cu
// and activations_cuda.cu, built by emulated_test.sh against the fake cuBLASLt and CUDA runtime of this
// folder) against kernels::cpu::Matmul / MatmulBackward, so that a mistake in mapping the row-major
// MatmulParams onto cuBLASLt's column-major API (operand swap, transposes, leading dimensions, batch strides,
// bias, GELU epilogue and its saved pre-activation, the fallback when the heuristic finds nothing, the
// backward's dA/dB/dbias) shows on the CPU. Every matrix has padded leading dimensions and batch strides
// whose padding holds NaN: a read of padding turns the result into NaN, and a write to it is caught bit for
// bit. Prints one line per check, exits non-zero on any failure.
//
// Tolerances, relative to the output's scale (max |reference|, at least 1):
// - f32 1e-5: the fake computes in double and rounds once, the CPU is oneDNN's fp32 sgemm; with K <= 23 and
//   unit-normal data they differ by a few fp32 ulps times sqrt(K) (measured: 2e-7 of the scale). A mapping
//   error moves elements by the order of the scale.
// - bf16 2^-6: the reference runs in fp32 on the same bf16-rounded inputs, so the difference is bf16
//   roundings of the output (unit roundoff 2^-8 each): one on the fused paths, two on the unfused GELU path
//   (pre-activation, then the GELU, whose slope is below 1.13), and one per batch for a dA summed over a
//   broadcast A (matmul_cuda.cc accumulates it in bf16, batch after batch: 3 here). 2^-6 = 4 roundings
//   (measured: 4.6e-3 of the scale).
#include <cublasLt.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_context.h"
#include "kernels/matmul/matmul.h"

namespace lmf::kernels {
namespace {

int failures = 0;
double largest_relative_error[2] = {0.0, 0.0};  // over every compared element, f32 then bf16
int checks = 0;

void Report(bool ok, const std::string& what, const std::string& detail) {
  ++checks;
  if (!ok) ++failures;
  std::printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what.c_str(), detail.empty() ? "" : ": ", detail.c_str());
}

// A batch of (rows, cols) matrices, row r of batch i at i * stride + r * ld (stride 0: one matrix shared by
// the batch), in its own device allocation (the fake runtime's cudaMalloc), `offset` elements in. Everything
// outside the matrices (row padding, gaps between batches) holds NaN. The check reads and writes it on the
// host inside cuemu::DeviceWork scopes (the runtime fences device memory off from the host otherwise).
class Mat {
 public:
  Mat(DType dt, int64_t batch, int64_t rows, int64_t cols, int64_t ld, int64_t stride, int offset = 0)
      : dt_(dt),
        batch_(stride == 0 ? 1 : batch),
        rows_(rows),
        cols_(cols),
        ld_(ld),
        stride_(stride),
        offset_(offset) {
    n_ = rows == 0 || cols == 0 ? 0 : (batch_ - 1) * stride + (rows - 1) * ld + cols;
    const size_t bytes = (offset + std::max<int64_t>(n_, 1)) * DTypeSize(dt);
    if (cudaMalloc(&base_, bytes) != cudaSuccess) std::abort();
    ::cuemu::DeviceWork work;
    std::memset(base_, 0xff, bytes);
    valid_.assign(n_, 0);
    for (int64_t i = 0; i < batch_; ++i)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) valid_[i * stride + r * ld + c] = 1;
  }
  Mat(const Mat&) = delete;
  Mat& operator=(const Mat&) = delete;
  ~Mat() { cudaFree(base_); }

  void* get() const { return static_cast<char*>(base_) + offset_ * DTypeSize(dt_); }
  int64_t ld() const { return ld_; }
  int64_t stride() const { return stride_; }

  void FillRandom(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    ::cuemu::DeviceWork work;
    for (int64_t j = 0; j < n_; ++j)
      if (valid_[j]) Set(j, dist(rng));
  }
  // Every element as float (padding NaN), bf16 widened: the CPU reference's input.
  std::vector<float> Floats() const {
    std::vector<float> out(n_);
    ::cuemu::DeviceWork work;
    for (int64_t j = 0; j < n_; ++j) out[j] = Get(j);
    return out;
  }
  // Bitwise: is the padding still the 0xff poison?
  bool PaddingIntact() const {
    const unsigned char* bytes = static_cast<const unsigned char*>(get());
    const size_t es = DTypeSize(dt_);
    ::cuemu::DeviceWork work;
    for (int64_t j = 0; j < n_; ++j)
      if (!valid_[j])
        for (size_t k = 0; k < es; ++k)
          if (bytes[j * es + k] != 0xff) return false;
    return true;
  }
  const std::vector<char>& valid() const { return valid_; }

 private:
  float Get(int64_t j) const {
    return dt_ == DType::kF32 ? static_cast<const float*>(get())[j]
                              : BF16ToFloat(static_cast<const uint16_t*>(get())[j]);
  }
  void Set(int64_t j, float v) {
    if (dt_ == DType::kF32) {
      static_cast<float*>(get())[j] = v;
    } else {
      static_cast<uint16_t*>(get())[j] = FloatToBF16(v);
    }
  }

  void* base_ = nullptr;
  DType dt_;
  int64_t batch_, rows_, cols_, ld_, stride_, n_;
  int offset_;
  std::vector<char> valid_;
};

// Compares the valid elements of `got` with `want` (same layout) within tol * max(1, max |want|), and
// checks got's padding is untouched.
void Compare(const std::string& what, DType dt, const Mat& got, const std::vector<float>& want) {
  const std::vector<float> g = got.Floats();
  double scale = 1.0;
  for (size_t j = 0; j < want.size(); ++j)
    if (got.valid()[j]) scale = std::max(scale, std::fabs(static_cast<double>(want[j])));
  const double tol = (dt == DType::kF32 ? 1e-5 : 1.0 / 64) * scale;
  double worst = 0.0;
  int64_t worst_at = -1, bad = 0;
  for (size_t j = 0; j < want.size(); ++j) {
    if (!got.valid()[j]) continue;
    const double err = std::fabs(static_cast<double>(g[j]) - want[j]);
    double& largest = largest_relative_error[dt == DType::kF32 ? 0 : 1];
    if (std::isfinite(err)) largest = std::max(largest, err / scale);
    if (!(err <= tol)) {
      ++bad;
      if (worst_at < 0 || !(err <= worst)) worst = err, worst_at = static_cast<int64_t>(j);
    }
  }
  char detail[256] = "";
  if (bad > 0)
    std::snprintf(detail, sizeof(detail), "%lld elements off (worst at %lld: got %g want %g, tol %g)",
                  static_cast<long long>(bad), static_cast<long long>(worst_at), g[worst_at], want[worst_at],
                  tol);
  const bool padding = got.PaddingIntact();
  if (!padding) std::strncat(detail, " padding written", sizeof(detail) - std::strlen(detail) - 1);
  Report(bad == 0 && padding, what + " [" + DTypeName(dt) + "]", detail);
}

struct Case {
  std::string name;
  int64_t M = 13, N = 11, K = 7, batch = 1;
  bool trans_a = false, trans_b = false;
  bool broadcast_a = false, broadcast_b = false;  // batch stride 0
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false;
  MatmulEpilogue epilogue = MatmulEpilogue::kNone;
  bool save_pre = false;
  int64_t pad_a = 3, pad_b = 5, pad_c = 2;  // leading dimension beyond the row length
  int offset = 0;                           // elements past 256-byte alignment, for a, b and c
  int bias_offset = 0, pre_offset = 0;      // elements past 256-byte alignment, for bias, pre-activation
  // Backward: which outputs, and whether da and db are accumulated (dbias always is).
  bool da = true, db = true, dbias = true, accumulate_da = false, accumulate_db = true;
};

struct Operands {
  std::unique_ptr<Mat> a, b, c, bias, pre;
  MatmulParams p;
};

// The operands of a case in dtype dt, random (c random where beta != 0, else NaN: C must not be read).
Operands MakeOperands(const Case& k, DType dt, uint64_t seed) {
  Operands o;
  const int64_t a_rows = k.trans_a ? k.K : k.M, a_cols = k.trans_a ? k.M : k.K;
  const int64_t b_rows = k.trans_b ? k.N : k.K, b_cols = k.trans_b ? k.K : k.N;
  const int64_t lda = a_cols + k.pad_a, ldb = b_cols + k.pad_b, ldc = k.N + k.pad_c;
  // Batch strides beyond one matrix's extent (a gap of NaN between batches), or 0 to broadcast.
  const int64_t sa = k.broadcast_a ? 0 : a_rows * lda + 5, sb = k.broadcast_b ? 0 : b_rows * ldb + 3;
  const int64_t sc = k.M * ldc + 1;
  o.a = std::make_unique<Mat>(dt, k.batch, a_rows, a_cols, lda, sa, k.offset);
  o.b = std::make_unique<Mat>(dt, k.batch, b_rows, b_cols, ldb, sb, k.offset);
  o.c = std::make_unique<Mat>(dt, k.batch, k.M, k.N, ldc, k.batch > 1 ? sc : k.M * ldc, k.offset);
  o.a->FillRandom(seed);
  o.b->FillRandom(seed + 1);
  if (k.beta != 0.0f) o.c->FillRandom(seed + 2);
  MatmulParams& p = o.p;
  p.dtype = dt, p.M = k.M, p.N = k.N, p.K = k.K, p.batch = k.batch;
  p.a = o.a->get(), p.lda = lda, p.trans_a = k.trans_a, p.batch_stride_a = sa;
  p.b = o.b->get(), p.ldb = ldb, p.trans_b = k.trans_b, p.batch_stride_b = sb;
  p.c = o.c->get(), p.ldc = ldc, p.batch_stride_c = o.c->stride();
  p.alpha = k.alpha, p.beta = k.beta;
  if (k.bias) {
    o.bias = std::make_unique<Mat>(dt, 1, 1, k.N, k.N, k.N, k.bias_offset);
    o.bias->FillRandom(seed + 3);
    p.bias = o.bias->get();
  }
  if (k.save_pre) o.pre = std::make_unique<Mat>(dt, 1, k.M, k.N, ldc, k.M * ldc, k.pre_offset);
  return o;
}

void RunForward(const Context& gpu, const Context& cpu, const Case& k, DType dt, uint64_t seed,
                bool expect_fused) {
  Operands o = MakeOperands(k, dt, seed);
  // The CPU reference on f32 copies (bf16 widened exactly).
  std::vector<float> a = o.a->Floats(), b = o.b->Floats(), c = o.c->Floats(), pre;
  std::vector<float> bias = o.bias ? o.bias->Floats() : std::vector<float>();
  MatmulParams rp = o.p;
  rp.dtype = DType::kF32, rp.a = a.data(), rp.b = b.data(), rp.c = c.data();
  rp.bias = o.bias ? bias.data() : nullptr;
  MatmulEpilogueParams re, ge;
  re.epilogue = ge.epilogue = k.epilogue;
  if (o.pre) {
    pre = o.pre->Floats();
    re.pre_activation = pre.data();
    ge.pre_activation = o.pre->get();
  }
  cpu::Matmul(cpu, rp, re);

  const int64_t gelu_before = fake_cublaslt::GetCounters().gelu_matmuls;
  const absl::Status s = cuda::Matmul(gpu, o.p, ge);
  const std::string what = "forward " + k.name;
  if (!s.ok()) {
    Report(false, what + " [" + DTypeName(dt) + "]", s.ToString());
    return;
  }
  Compare(what + " C", dt, *o.c, c);
  if (o.pre) Compare(what + " pre-activation", dt, *o.pre, pre);
  if (k.epilogue == MatmulEpilogue::kGeluTanh) {
    const bool fused = fake_cublaslt::GetCounters().gelu_matmuls > gelu_before;
    Report(fused == expect_fused,
           what + " [" + DTypeName(dt) + "] took the " + (expect_fused ? "fused" : "unfused") + " GELU path",
           fused == expect_fused ? "" : "it did not");
  }
}

void RunBackward(const Context& gpu, const Context& cpu, const Case& k, DType dt, uint64_t seed) {
  Operands o = MakeOperands(k, dt, seed);
  // dc shaped like c; da like a (NaN unless accumulated); db (f32) like b, dbias (f32) (N), both accumulated.
  Mat dc(dt, k.batch, k.M, k.N, o.p.ldc, o.p.batch_stride_c, k.offset);
  dc.FillRandom(seed + 10);
  const int64_t a_rows = k.trans_a ? k.K : k.M, a_cols = k.trans_a ? k.M : k.K;
  const int64_t b_rows = k.trans_b ? k.N : k.K, b_cols = k.trans_b ? k.K : k.N;
  Mat da(dt, k.batch, a_rows, a_cols, o.p.lda, o.p.batch_stride_a, k.offset);
  Mat db(DType::kF32, k.batch, b_rows, b_cols, o.p.ldb, o.p.batch_stride_b);
  Mat dbias(DType::kF32, 1, 1, k.N, k.N, k.N);
  if (k.accumulate_da) da.FillRandom(seed + 11);
  if (k.accumulate_db) db.FillRandom(seed + 12);
  dbias.FillRandom(seed + 13);

  std::vector<float> a = o.a->Floats(), b = o.b->Floats(), dcf = dc.Floats();
  std::vector<float> daf = da.Floats(), dbf = db.Floats(), dbiasf = dbias.Floats();
  MatmulBackwardParams rp;
  rp.forward = o.p;
  rp.forward.dtype = DType::kF32, rp.forward.a = a.data(), rp.forward.b = b.data(), rp.forward.c = nullptr;
  rp.dc = dcf.data();
  rp.da = k.da ? daf.data() : nullptr;
  rp.db = k.db ? dbf.data() : nullptr;
  rp.dbias = k.dbias ? dbiasf.data() : nullptr;
  rp.accumulate_da = k.accumulate_da, rp.accumulate_db = k.accumulate_db;
  cpu::MatmulBackward(cpu, rp);

  MatmulBackwardParams gp = rp;
  gp.forward = o.p;
  gp.dc = dc.get();
  gp.da = k.da ? da.get() : nullptr;
  gp.db = k.db ? db.get() : nullptr;
  gp.dbias = k.dbias ? dbias.get() : nullptr;
  const absl::Status s = cuda::MatmulBackward(gpu, gp);
  const std::string what = "backward " + k.name;
  if (!s.ok()) {
    Report(false, what + " [" + DTypeName(dt) + "]", s.ToString());
    return;
  }
  if (k.da) Compare(what + " dA", dt, da, daf);
  // db and dbias are f32 whatever dt is; their tolerance is the one of dt (bf16 inputs, fp32 sums).
  if (k.db) Compare(what + " dB (f32)", dt, db, dbf);
  if (k.dbias) Compare(what + " dbias (f32)", dt, dbias, dbiasf);
}

// Runs `body` in a child process with its stderr captured; returns how the child ended and what it printed.
struct ChildEnd {
  int signal = 0;  // the signal that ended it, 0 if it exited
  std::string stderr_text;
};
template <typename F>
ChildEnd InChild(F body) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDERR_FILENO);
    body();
    _exit(0);
  }
  close(fds[1]);
  ChildEnd end;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;)
    end.stderr_text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  end.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return end;
}

std::string Describe(const ChildEnd& end) {
  return "ended by signal " + std::to_string(end.signal) + ", stderr: " + end.stderr_text.substr(0, 300);
}

__global__ void WriteOne(float* p) { p[threadIdx.x] = 1.0f; }

// The fake runtime's fence of device memory (cuda_runtime.h in fake/): what would fault on a GPU faults here.
void CheckDeviceFence() {
  float* d = nullptr;
  const bool allocated = cudaMalloc(reinterpret_cast<void**>(&d), 64 * sizeof(float)) == cudaSuccess;
  Report(allocated, "fence: cudaMalloc", "");
  if (!allocated) return;
  const ChildEnd read = InChild([d] { std::printf("%g", static_cast<double>(d[3])); });
  Report(read.signal == SIGSEGV &&
             read.stderr_text.find("the host touched device memory") != std::string::npos &&
             read.stderr_text.find("byte 12 of the " + std::to_string(sysconf(_SC_PAGESIZE)) +
                                   "-byte allocation") != std::string::npos,
         "fence: a host read of device memory faults, naming the allocation", Describe(read));
  {
    ::cuemu::DeviceWork work;
    d[3] = 2.0f;  // the emulated device's own access
  }
  float host[4] = {0.0f, 0.0f, 0.0f, 0.0f}, back = 0.0f;
  Report(cudaMemcpy(&back, d + 3, sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess && back == 2.0f,
         "fence: a device-to-host copy reads what the device wrote", "");
  Report(cudaMemcpy(host, host + 1, sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue &&
             cudaMemcpy(d, host, sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue &&
             cudaMemsetAsync(host, 0, sizeof(host)) == cudaErrorInvalidValue,
         "fence: copies whose direction does not match their pointers, and a memset of host memory, fail",
         "");
  const ChildEnd launch = InChild([&host] { ::cuemu::Launch(WriteOne, dim3(1), dim3(4))(host); });
  Report(launch.signal == SIGABRT && launch.stderr_text.find("passes a host pointer") != std::string::npos,
         "fence: a kernel launch with a host pointer is refused", Describe(launch));
  ::cuemu::Launch(WriteOne, dim3(1), dim3(4))(d);
  Report(cudaMemcpy(host, d, sizeof(host), cudaMemcpyDeviceToHost) == cudaSuccess && host[0] == 1.0f &&
             host[3] == 1.0f,
         "fence: a kernel writes device memory", "");
  Report(cudaFree(d) == cudaSuccess, "fence: cudaFree", "");
  const ChildEnd stale = InChild([d] { d[0] = 1.0f; });
  Report(stale.signal == SIGSEGV && stale.stderr_text.find("freed device memory") != std::string::npos,
         "fence: a host write through a freed device pointer faults", Describe(stale));
}

// Matmul's float types, each checked.
constexpr DType kDtypes[] = {DType::kF32, DType::kBF16};

// Each algorithm's matmuls so far (fake_cublaslt::Counters), for the autotuning checks.
std::vector<int64_t> AlgorithmRuns() {
  std::vector<int64_t> r(fake_cublaslt::kMaxAlgorithms);
  const fake_cublaslt::Counters c = fake_cublaslt::GetCounters();
  for (int i = 0; i < fake_cublaslt::kMaxAlgorithms; ++i) r[i] = c.matmuls_by_algorithm[i];
  return r;
}

// "0,1,0,...": the runs per algorithm between `before` and `after`.
std::string RunsDelta(const std::vector<int64_t>& after, const std::vector<int64_t>& before) {
  std::string d;
  for (size_t i = 0; i < after.size(); ++i) d += (i ? "," : "") + std::to_string(after[i] - before[i]);
  return d;
}

// The named geometries: every transpose pair plain, batched, accumulating and broadcast; bias, alignment,
// K = 0 and 1x1x1 cases; the backward's partial gradients.
void NamedCases(std::vector<Case>& forward, std::vector<Case>& backward) {
  for (int t = 0; t < 4; ++t) {
    Case k;
    k.trans_a = t & 1, k.trans_b = t & 2;
    k.name = std::string("trans_a=") + (k.trans_a ? "1" : "0") + " trans_b=" + (k.trans_b ? "1" : "0");
    forward.push_back(k);
    backward.push_back(k);
    Case batched = k;
    batched.name += " batch 3, alpha 0.5, beta 1";
    batched.batch = 3, batched.alpha = 0.5f, batched.beta = 1.0f, batched.M = 9, batched.N = 6, batched.K = 5;
    forward.push_back(batched);
    Case acc = batched;
    acc.name = k.name + " batch 3, alpha 0.5, dA accumulated";
    acc.accumulate_da = true;
    backward.push_back(acc);
    for (int broadcast = 0; broadcast < 2; ++broadcast) {
      Case bc = batched;
      bc.broadcast_a = broadcast == 0, bc.broadcast_b = broadcast == 1;
      bc.name =
          k.name + (broadcast == 0 ? " A broadcast (stride 0)" : " B broadcast (stride 0)") + " batch 3";
      forward.push_back(bc);
      backward.push_back(bc);
      bc.name += ", dB written";
      bc.accumulate_db = false;
      backward.push_back(bc);
    }
  }
  {
    Case k;
    k.name = "bias, alpha -1.5, beta 0, M N K not multiples of 8";
    k.M = 17, k.N = 19, k.K = 23, k.bias = true, k.alpha = -1.5f;
    forward.push_back(k);
    // The same geometries again with less aligned pointers: a plan found for aligned ones must not serve.
    Case bias_off = k;
    bias_off.name = "the same, bias one element past alignment";
    bias_off.bias_offset = 1;
    forward.push_back(bias_off);
    Case operands_off = k;
    operands_off.name = "the same, a, b, c one element past alignment";
    operands_off.offset = 1;
    forward.push_back(operands_off);
    k.name = "bias, beta 1, trans_b (Linear)";
    k.beta = 1.0f, k.alpha = 1.0f, k.trans_b = true;
    forward.push_back(k);
    k.name = "bias, batch 2";
    k.batch = 2;
    forward.push_back(k);
    k.name = "operands one element past alignment";
    k.batch = 1, k.offset = 1, k.pad_a = 0, k.pad_b = 1, k.pad_c = 0;
    forward.push_back(k);
    // K = 0: C = beta C + bias (cuBLASLt's acceptance of k = 0 is not documented; the fake computes it).
    Case empty_k;
    empty_k.name = "K=0, beta 1, bias";
    empty_k.K = 0, empty_k.beta = 1.0f, empty_k.bias = true;
    forward.push_back(empty_k);
    Case one;
    one.name = "M=1 N=1 K=1";
    one.M = one.N = one.K = 1;
    forward.push_back(one);
    backward.push_back(one);
    Case only_db;
    only_db.name = "dB only (dA, dbias null), trans_a";
    only_db.trans_a = true, only_db.da = false, only_db.dbias = false;
    backward.push_back(only_db);
    Case misaligned = only_db;
    misaligned.name = "operands one element past alignment, dA and dbias";
    misaligned.da = misaligned.dbias = true, misaligned.db = false, misaligned.offset = 1;
    backward.push_back(misaligned);
  }
}

// The named cases in each dtype, forward then backward.
void CheckNamedCases(const Context& gpu, const Context& cpu, uint64_t& seed) {
  std::vector<Case> forward, backward;
  NamedCases(forward, backward);
  for (DType dt : kDtypes) {
    for (const Case& k : forward) RunForward(gpu, cpu, k, dt, seed++, false);
    for (const Case& k : backward) RunBackward(gpu, cpu, k, dt, seed++);
  }
}

void CheckRandomSweep(const Context& gpu, const Context& cpu, uint64_t& seed) {
  // A seeded sweep over random geometries mixing all of the above (each name lists its parameters).
  std::mt19937_64 rng(20261130);
  auto pick = [&rng](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int i = 0; i < 32; ++i) {
    Case k;
    k.M = pick(1, 20), k.N = pick(1, 20), k.K = pick(1, 20), k.batch = pick(1, 3);
    k.trans_a = pick(0, 1), k.trans_b = pick(0, 1);
    k.broadcast_a = k.batch > 1 && pick(0, 2) == 0;
    k.broadcast_b = k.batch > 1 && !k.broadcast_a && pick(0, 2) == 0;
    k.alpha = pick(0, 1) ? 1.0f : -0.75f, k.beta = static_cast<float>(pick(0, 1));
    k.bias = pick(0, 1);
    k.pad_a = pick(0, 4), k.pad_b = pick(0, 4), k.pad_c = pick(0, 4);
    k.offset = pick(0, 1), k.bias_offset = pick(0, 1);
    k.accumulate_da = pick(0, 1), k.accumulate_db = pick(0, 1);
    char name[256];
    std::snprintf(name, sizeof(name),
                  "random M=%lld N=%lld K=%lld batch=%lld trans=%d%d broadcast=%d%d alpha=%g beta=%g bias=%d "
                  "pads=%lld,%lld,%lld offsets=%d,%d accumulate=%d%d",
                  static_cast<long long>(k.M), static_cast<long long>(k.N), static_cast<long long>(k.K),
                  static_cast<long long>(k.batch), k.trans_a, k.trans_b, k.broadcast_a, k.broadcast_b,
                  k.alpha, k.beta, k.bias, static_cast<long long>(k.pad_a), static_cast<long long>(k.pad_b),
                  static_cast<long long>(k.pad_c), k.offset, k.bias_offset, k.accumulate_da, k.accumulate_db);
    k.name = name;
    const DType dt = kDtypes[i % 2];
    RunForward(gpu, cpu, k, dt, seed++, false);
    RunBackward(gpu, cpu, k, dt, seed++);
  }
}

void CheckGeluEpilogue(const Context& gpu, const Context& cpu, uint64_t& seed) {
  // The GELU epilogue: fused where the heuristic has an algorithm (with the saved pre-activation only when
  // ldc is a multiple of 8: EPILOGUE_AUX_LD), else the GEMM then the GELU kernel, row by row when ldc > N.
  for (DType dt : kDtypes) {
    Case g;
    g.epilogue = MatmulEpilogue::kGeluTanh;
    g.M = 21, g.N = 13, g.K = 9;
    g.name = "GELU fused, bias, no pre-activation, ldc 15";
    g.bias = true;
    RunForward(gpu, cpu, g, dt, seed++, true);
    g.name = "GELU fused, no bias, pre-activation, ldc 16";
    g.bias = false, g.save_pre = true, g.pad_c = 3, g.trans_a = true;
    RunForward(gpu, cpu, g, dt, seed++, true);
    g.name = "GELU fused, bias, pre-activation, ldc 16, alpha 2, beta 1";
    g.bias = true, g.alpha = 2.0f, g.beta = 1.0f, g.trans_b = true;
    RunForward(gpu, cpu, g, dt, seed++, true);
    g.name = "the same, pre-activation one element past alignment";
    g.pre_offset = 1;
    RunForward(gpu, cpu, g, dt, seed++, true);
    g.pre_offset = 0;
    g.name = "GELU, pre-activation, ldc 13 (not a multiple of 8): unfused, contiguous";
    g.pad_c = 0, g.alpha = 1.0f, g.beta = 0.0f;
    RunForward(gpu, cpu, g, dt, seed++, false);
    g.name = "GELU, pre-activation, ldc 18 (padded rows): unfused, row by row";
    g.pad_c = 5;
    RunForward(gpu, cpu, g, dt, seed++, false);
  }
}

void CheckWithoutFusedAlgorithm(const Context& gpu, const Context& cpu, uint64_t& seed) {
  // No fused algorithm, in both documented ways; other GEMMs still have one. Shapes (M = 23, 25) that no
  // earlier call planned, so no cached plan hides the heuristic's answer.
  const fake_cublaslt::Heuristic none[] = {fake_cublaslt::Heuristic::kNotSupported,
                                           fake_cublaslt::Heuristic::kNoResults};
  for (int h = 0; h < 2; ++h) {
    fake_cublaslt::SetHeuristic(none[h], fake_cublaslt::Heuristic::kOneAlgorithm);
    for (DType dt : kDtypes) {
      Case g;
      g.epilogue = MatmulEpilogue::kGeluTanh;
      g.M = 23 + 2 * h, g.N = 13, g.K = 9, g.bias = true, g.save_pre = true, g.pad_c = 3;
      g.name = std::string("GELU, heuristic ") + (h == 0 ? "NOT_SUPPORTED" : "returns 0 algorithms") +
               ", bias, pre-activation: unfused";
      RunForward(gpu, cpu, g, dt, seed++, false);
      g.save_pre = false, g.bias = false, g.pad_c = 0;
      g.name = std::string("GELU, heuristic ") + (h == 0 ? "NOT_SUPPORTED" : "returns 0 algorithms") +
               ", no bias, no pre-activation: unfused";
      RunForward(gpu, cpu, g, dt, seed++, false);
    }
  }
}

void CheckWithoutAnyAlgorithm(const Context& gpu, uint64_t& seed) {
  // No algorithm at all: an error status naming the shape, not a crash or a silent result.
  fake_cublaslt::SetHeuristic(fake_cublaslt::Heuristic::kNotSupported,
                              fake_cublaslt::Heuristic::kNotSupported);
  {
    Case k;
    k.M = 31;
    Operands o = MakeOperands(k, DType::kF32, seed++);
    const absl::Status s = cuda::Matmul(gpu, o.p);
    Report(absl::IsUnimplemented(s), "no algorithm at all: Matmul returns Unimplemented", s.ToString());
  }
  fake_cublaslt::SetHeuristic(fake_cublaslt::Heuristic::kOneAlgorithm,
                              fake_cublaslt::Heuristic::kOneAlgorithm);
}

void CheckAutotune(cuda::CudaContext& cc, const Context& gpu, const Context& cpu, uint64_t& seed) {
  // Autotuning (CudaContext::set_gemm_autotune): the first call of a geometry times the heuristic's
  // candidates with its outputs redirected, then every call runs the fastest. Geometries (M = 41..47) no
  // earlier call planned. beta 1, a bias and the saved pre-activation: a timing run that wrote the caller's C
  // or pre-activation would show in the comparison with the CPU.
  cc.set_gemm_autotune(true);
  // Five candidates (all offered: the autotuner asks for up to 8): algorithm 1 is the fastest, 3 refuses
  // to run (skipped).
  fake_cublaslt::SetAlgorithmTimes({3.0, 1.0, 2.0, -1.0, 1.5});
  for (DType dt : kDtypes) {
    Case g;
    g.epilogue = MatmulEpilogue::kGeluTanh;
    g.M = dt == DType::kF32 ? 41 : 43, g.N = 13, g.K = 9, g.bias = true, g.save_pre = true, g.pad_c = 3;
    g.beta = 1.0f;
    g.name = "autotuned: GELU, bias, pre-activation, beta 1 (first call: timing)";
    const std::vector<int64_t> before = AlgorithmRuns();
    RunForward(gpu, cpu, g, dt, seed++, true);
    const std::vector<int64_t> tuned = AlgorithmRuns();
    Report(tuned[0] > before[0] && tuned[2] > before[2] && tuned[4] > before[4] && tuned[3] == before[3],
           "autotuned [" + std::string(DTypeName(dt)) + "]: every runnable candidate was timed",
           "runs per algorithm " + RunsDelta(tuned, before));
    g.name = "autotuned: the same geometry again";
    RunForward(gpu, cpu, g, dt, seed++, true);
    const std::vector<int64_t> again = AlgorithmRuns();
    Report(RunsDelta(again, tuned) == "0,1,0,0,0,0,0,0",
           "autotuned [" + std::string(DTypeName(dt)) + "]: the planned geometry runs the fastest, untimed",
           "runs per algorithm " + RunsDelta(again, tuned));
    Case k;
    k.M = dt == DType::kF32 ? 45 : 47, k.trans_a = true, k.accumulate_da = true;
    k.name = "autotuned backward: dA and dB accumulated";
    RunBackward(gpu, cpu, k, dt, seed++);
  }
  // A candidate faster by less than the autotuner's margin (3%) does not replace the heuristic's first.
  fake_cublaslt::SetAlgorithmTimes({1.0, 0.99});
  {
    Case k;
    k.M = 49;
    k.name = "autotuned, candidates within 3%";
    RunForward(gpu, cpu, k, DType::kF32, seed++, false);
    const std::vector<int64_t> before = AlgorithmRuns();
    RunForward(gpu, cpu, k, DType::kF32, seed++, false);
    Report(RunsDelta(AlgorithmRuns(), before) == "1,0,0,0,0,0,0,0", "autotune keeps the heuristic's first within 3%",
           "runs per algorithm " + RunsDelta(AlgorithmRuns(), before));
  }
  // Off (the default): the heuristic's first, whatever the others would time.
  cc.set_gemm_autotune(false);
  fake_cublaslt::SetAlgorithmTimes({3.0, 1.0});
  {
    Case k;
    k.M = 51;
    k.name = "not autotuned";
    const std::vector<int64_t> before = AlgorithmRuns();
    RunForward(gpu, cpu, k, DType::kF32, seed++, false);
    Report(RunsDelta(AlgorithmRuns(), before) == "1,0,0,0,0,0,0,0",
           "without autotune, one run of the heuristic's first",
           "runs per algorithm " + RunsDelta(AlgorithmRuns(), before));
  }
  fake_cublaslt::SetAlgorithmTimes({1.0});
}

// The fake's counters and the largest errors seen; Main's exit status.
int Summary() {
  const fake_cublaslt::Counters n = fake_cublaslt::GetCounters();
  // The one expected failing call is the heuristic of the no-algorithm check (NOT_SUPPORTED is not counted
  // as a failure); any other failed call is an argument the fake rejected.
  Report(n.failed_calls == 0, "no cuBLASLt call was rejected",
         n.failed_calls == 0
             ? ""
             : std::to_string(n.failed_calls) + " rejected, last: " + fake_cublaslt::LastError());
  std::printf("%lld cuBLASLt matmuls (%lld with a GELU epilogue), %lld heuristic queries\n",
              static_cast<long long>(n.matmuls), static_cast<long long>(n.gelu_matmuls),
              static_cast<long long>(n.heuristic_queries));
  std::printf("largest |error| / output scale: f32 %.3g (tolerance 1e-5), bf16 %.3g (tolerance %.3g)\n",
              largest_relative_error[0], largest_relative_error[1], 1.0 / 64);
  std::printf("%d checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}

int Main() {
  CheckDeviceFence();  // first: it forks, before the context's threads exist
  absl::StatusOr<std::unique_ptr<cuda::CudaContext>> cc = cuda::CudaContext::Create(0);
  if (!cc.ok()) {
    std::printf("FAIL CudaContext::Create: %s\n", cc.status().ToString().c_str());
    return 1;
  }
  const Context gpu = (*cc)->context();
  const Context cpu = Context::Cpu();
  uint64_t seed = 1;  // each case's inputs: the next seed, in this order
  CheckNamedCases(gpu, cpu, seed);
  CheckRandomSweep(gpu, cpu, seed);
  CheckGeluEpilogue(gpu, cpu, seed);
  CheckWithoutFusedAlgorithm(gpu, cpu, seed);
  CheckWithoutAnyAlgorithm(gpu, seed);
  CheckAutotune(**cc, gpu, cpu, seed);
  return Summary();
}

}  // namespace
}  // namespace lmf::kernels

int main() { return lmf::kernels::Main(); }
