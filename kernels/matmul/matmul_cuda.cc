// cuBLASLt GEMMs for the MatmulParams layout; see matmul.h. Row-major C (M, N) is column-major C^T (N, M),
// so each call computes C^T = op(B)^T op(A)^T: cuBLASLt's A is our b, its B is our a, m = N, n = M.
// Descriptors and the chosen algorithm are cached per geometry, types, epilogue and pointer alignment: the
// heuristic's first algorithm, or with CudaContext::set_gemm_autotune the fastest of its first candidates,
// timed once on the first call's operands.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/activations/activations.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/scratch.h"
#include "kernels/matmul/column_sum_cuda.h"
#include "kernels/matmul/matmul.h"

namespace lmf::kernels::cuda {
namespace {

cudaDataType_t CudaType(DType t) { return t == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF; }

// One row-major GEMM: c (M, N) = alpha op(a) op(b) + beta c (+ bias), with per-operand types.
struct Gemm {
  int64_t M = 0, N = 0, K = 0, batch = 1;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  bool trans_a = false;
  DType a_type = DType::kF32;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  bool trans_b = false;
  DType b_type = DType::kF32;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  DType c_type = DType::kF32;
  float alpha = 1.0f, beta = 0.0f;
  const void* bias = nullptr;  // (N), c_type
  MatmulEpilogue epilogue = MatmulEpilogue::kNone;
  void* aux = nullptr;  // pre-activation for the GELU epilogue
};

// Owns cuBLASLt descriptors for one call.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

absl::Status Layout(cublasLtMatrixLayout_t* layout, DType t, int64_t rows, int64_t cols, int64_t ld,
                    int64_t batch, int64_t stride) {
  LMF_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(layout, CudaType(t), rows, cols, ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    LMF_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    LMF_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(
        *layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return absl::OkStatus();
}

// Largest power of two (up to 256) dividing the address: cuBLASLt picks algorithms for a stated alignment.
uint32_t Alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align >>= 1;
  return align;
}

// A GEMM's descriptors and chosen algorithm, built once per geometry (the heuristic query costs tens of
// microseconds of host time) and reused; bias and aux pointers are set on the descriptor at each call.
struct Plan {
  Descriptors d;
  cublasLtMatmulAlgo_t algo{};
};

using PlanKey =
    std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
               int, int, int, int, int, int, uint32_t, uint32_t, uint32_t, uint32_t, bool>;

absl::Mutex plans_mu;
std::map<PlanKey, std::unique_ptr<Plan>>& Plans() {
  static auto* plans = new std::map<PlanKey, std::unique_ptr<Plan>>();  // lives to process exit
  return *plans;
}

// The autotuner times at most this many of the heuristic's candidates (returned best-predicted first), and
// replaces the first only by one faster by kAutotuneMinGain, so that timing noise between near-equal
// algorithms does not change the choice (and the rounding) from run to run.
constexpr int kAutotuneCandidates = 8;
constexpr double kAutotuneMinGain = 0.03;
constexpr int kAutotuneTimedRuns = 3;  // after one warm-up run per candidate

// Elements from g.c to one past the last element of C (batched, strided, leading dimension ldc).
int64_t CExtent(const Gemm& g) { return (g.batch - 1) * g.stride_c + (g.M - 1) * g.ldc + g.N; }

// Two timing events, destroyed with the scope.
struct TimingEvents {
  cudaEvent_t start = nullptr, stop = nullptr;
  ~TimingEvents() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  }
};

// Times one candidate: a warm-up run, then kAutotuneTimedRuns runs between two events; the mean in ms, or
// an error where cuBLASLt refuses to run it.
absl::StatusOr<float> TimeCandidate(const Context& ctx, const CudaContext& cc, const Gemm& g, const Plan& plan,
                                    const cublasLtMatmulAlgo_t& algo, void* c) {
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.stream);
  TimingEvents ev;
  LMF_CUDA_RETURN_IF_ERROR(cudaEventCreate(&ev.start));
  LMF_CUDA_RETURN_IF_ERROR(cudaEventCreate(&ev.stop));
  for (int run = 0; run <= kAutotuneTimedRuns; ++run) {
    if (run == 1) LMF_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev.start, stream));
    LMF_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(cc.cublas_lt(), plan.d.op, &g.alpha, g.b, plan.d.a, g.a, plan.d.b,
                                              &g.beta, c, plan.d.c, c, plan.d.c, &algo, cc.cublas_workspace(),
                                              CudaContext::kCublasWorkspaceBytes, stream));
  }
  LMF_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev.stop, stream));
  LMF_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(ev.stop));
  float ms = 0.0f;
  LMF_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, ev.start, ev.stop));
  return ms / kAutotuneTimedRuns;
}

// Index of the fastest of the heuristic's `found` candidates, timed on g's inputs with C (and the GELU
// epilogue's pre-activation) redirected to zeroed scratch, so the caller's outputs are untouched.
absl::StatusOr<int> FastestCandidate(const Context& ctx, const CudaContext& cc, const Gemm& g, const Plan& plan,
                                     const cublasLtMatmulHeuristicResult_t* candidates, int found) {
  const size_t es = DTypeSize(g.c_type);
  const size_t c_bytes = static_cast<size_t>(CExtent(g)) * es;
  const size_t aux_offset = (c_bytes + 255) / 256 * 256;
  const size_t aux_bytes = g.aux != nullptr ? static_cast<size_t>((g.M - 1) * g.ldc + g.N) * es : 0;
  Scratch scratch;
  LMF_RETURN_IF_ERROR_STATUS(scratch.Allocate(ctx, aux_offset + aux_bytes));
  char* c = scratch.get<char>();
  LMF_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(c, 0, aux_offset + aux_bytes, static_cast<cudaStream_t>(ctx.stream)));
  if (g.aux != nullptr) {
    void* aux = c + aux_offset;
    LMF_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  }
  int best = -1;
  float best_ms = 0.0f, first_ms = 0.0f;
  absl::Status first_error;
  for (int i = 0; i < found; ++i) {
    if (candidates[i].state != CUBLAS_STATUS_SUCCESS) continue;
    absl::StatusOr<float> ms = TimeCandidate(ctx, cc, g, plan, candidates[i].algo, c);
    if (!ms.ok()) {
      if (first_error.ok()) first_error = ms.status();
      continue;
    }
    if (best < 0) {
      best = i, best_ms = first_ms = *ms;
    } else if (*ms < best_ms && *ms < first_ms * (1.0 - kAutotuneMinGain)) {
      best = i, best_ms = *ms;
    }
  }
  if (best < 0) return first_error.ok() ? absl::InternalError("matmul autotune: no candidate ran") : first_error;
  return best;
}

absl::StatusOr<std::unique_ptr<Plan>> MakePlan(const Context& ctx, const CudaContext& cc, const Gemm& g,
                                               cublasLtEpilogue_t epi, uint32_t align_a, uint32_t align_b,
                                               uint32_t align_c) {
  auto plan = std::make_unique<Plan>();
  Descriptors& d = plan->d;
  LMF_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // cuBLASLt A = our b, B = our a.
  const cublasOperation_t ta = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  LMF_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LMF_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  LMF_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (g.bias != nullptr) {
    const cudaDataType_t bt = CudaType(g.c_type);
    LMF_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    LMF_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
  }
  if (g.aux != nullptr) {
    const int64_t ld = g.ldc;
    LMF_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    LMF_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                              &g.aux, sizeof(g.aux)));
  }
  LMF_RETURN_IF_ERROR_STATUS(
      Layout(&d.a, g.b_type, g.trans_b ? g.K : g.N, g.trans_b ? g.N : g.K, g.ldb, g.batch, g.stride_b));
  LMF_RETURN_IF_ERROR_STATUS(
      Layout(&d.b, g.a_type, g.trans_a ? g.M : g.K, g.trans_a ? g.K : g.M, g.lda, g.batch, g.stride_a));
  LMF_RETURN_IF_ERROR_STATUS(Layout(&d.c, g.c_type, g.N, g.M, g.ldc, g.batch, g.stride_c));
  LMF_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&d.pref));
  const size_t ws = CudaContext::kCublasWorkspaceBytes;
  LMF_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // cuBLASLt's A is our b and its B our a.
  LMF_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_b, sizeof(align_b)));
  LMF_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_a, sizeof(align_a)));
  LMF_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
  LMF_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));
  cublasLtMatmulHeuristicResult_t heuristic[kAutotuneCandidates] = {};
  const int requested = cc.gemm_autotune() ? kAutotuneCandidates : 1;
  int found = 0;
  // No algorithm for the configuration comes back as CUBLAS_STATUS_NOT_SUPPORTED (cublasLt.h,
  // cublasLtMatmulAlgoGetHeuristic), or as success with no result.
  const cublasStatus_t searched = cublasLtMatmulAlgoGetHeuristic(cc.cublas_lt(), d.op, d.a, d.b, d.c, d.c,
                                                                 d.pref, requested, heuristic, &found);
  if (searched != CUBLAS_STATUS_SUCCESS && searched != CUBLAS_STATUS_NOT_SUPPORTED)
    return CublasErrorStatus(searched, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  if (searched == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) {
    return absl::UnimplementedError(absl::StrCat("matmul: cuBLASLt has no algorithm for M=", g.M, " N=", g.N,
                                                 " K=", g.K,
                                                 " (check alignment of lda/ldb/ldc and pointers)"));
  }
  int chosen = 0;
  if (found > 1) {
    absl::StatusOr<int> fastest = FastestCandidate(ctx, cc, g, *plan, heuristic, found);
    if (!fastest.ok()) return fastest.status();
    chosen = *fastest;
  }
  plan->algo = heuristic[chosen].algo;
  return plan;
}

absl::Status RunGemm(const Context& ctx, const Gemm& g) {
  if (g.M == 0 || g.N == 0 || g.batch == 0) return absl::OkStatus();
  const CudaContext* cc = CudaContextForDevice(ctx.device.index);
  if (cc == nullptr)
    return absl::FailedPreconditionError(
        absl::StrCat("matmul: no CudaContext for CUDA device ", ctx.device.index));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (g.epilogue == MatmulEpilogue::kGeluTanh) {
    if (g.aux != nullptr) {
      epi = g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    } else {
      epi = g.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    }
  } else if (g.bias != nullptr) {
    epi = CUBLASLT_EPILOGUE_BIAS;
  }
  const uint32_t align_a = Alignment(g.a), align_b = Alignment(g.b);
  const uint32_t align_c = std::min(Alignment(g.c), g.aux ? Alignment(g.aux) : 256u);
  // The heuristic reads the bias pointer's alignment off the descriptor (cublasLt.h,
  // CUBLASLT_MATMUL_DESC_BIAS_POINTER), so a plan found for an aligned bias must not serve a misaligned one.
  const uint32_t align_bias = g.bias ? Alignment(g.bias) : 256u;
  const PlanKey key{ctx.device.index,
                    g.M,
                    g.N,
                    g.K,
                    g.batch,
                    g.lda,
                    g.ldb,
                    g.ldc,
                    g.stride_a,
                    g.stride_b,
                    g.stride_c,
                    g.trans_a,
                    g.trans_b,
                    static_cast<int>(g.a_type),
                    static_cast<int>(g.b_type),
                    static_cast<int>(g.c_type),
                    static_cast<int>(epi),
                    align_a,
                    align_b,
                    align_c,
                    align_bias,
                    cc->gemm_autotune()};
  absl::MutexLock lock(&plans_mu);  // held while the cached descriptor's pointers are set and the GEMM queued
  std::unique_ptr<Plan>& plan = Plans()[key];
  if (plan == nullptr) {
    absl::StatusOr<std::unique_ptr<Plan>> made = MakePlan(ctx, *cc, g, epi, align_a, align_b, align_c);
    if (!made.ok()) {
      Plans().erase(key);
      return made.status();
    }
    plan = std::move(*made);
  }
  cublasLtMatmulDesc_t op = plan->d.op;
  if (g.bias != nullptr)
    LMF_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
  if (g.aux != nullptr)
    LMF_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof(g.aux)));
  LMF_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(cc->cublas_lt(), op, &g.alpha, g.b, plan->d.a, g.a, plan->d.b,
                                            &g.beta, g.c, plan->d.c, g.c, plan->d.c, &plan->algo,
                                            cc->cublas_workspace(), CudaContext::kCublasWorkspaceBytes,
                                            static_cast<cudaStream_t>(ctx.stream)));
  return absl::OkStatus();
}

// C = GELU(C), saving C into e.pre_activation first when asked: the unfused epilogue (the CPU backend's
// order), for when cuBLASLt has no fused algorithm.
absl::Status GeluAfterGemm(const Context& ctx, const MatmulParams& p, const MatmulEpilogueParams& e) {
  const size_t es = DTypeSize(p.dtype);
  if (e.pre_activation != nullptr) {
    LMF_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(e.pre_activation, p.ldc * es, p.c, p.ldc * es, p.N * es, p.M,
                                               cudaMemcpyDeviceToDevice,
                                               static_cast<cudaStream_t>(ctx.stream)));
  }
  const bool contiguous = p.ldc == p.N;  // one launch over all of C, else one per row
  const int64_t rows = contiguous ? 1 : p.M, n = contiguous ? p.M * p.N : p.N;
  for (int64_t m = 0; m < rows; ++m) {
    void* row = static_cast<char*>(p.c) + m * p.ldc * es;
    LMF_RETURN_IF_ERROR_STATUS(
        cuda::ActivationForward(ctx, ActivationForwardParams{p.dtype, Activation::kGeluTanh, n, row, row}));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Matmul(const Context& ctx, const MatmulParams& p, const MatmulEpilogueParams& e) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "matmul"));
  if (p.batch != 1 && (e.epilogue == MatmulEpilogue::kGeluTanh || e.pre_activation != nullptr))
    return absl::InvalidArgumentError("matmul: the GELU epilogue and its pre-activation output need batch 1");
  Gemm g;
  g.M = p.M, g.N = p.N, g.K = p.K, g.batch = p.batch;
  g.a = p.a, g.lda = p.lda, g.stride_a = p.batch_stride_a, g.trans_a = p.trans_a, g.a_type = p.dtype;
  g.b = p.b, g.ldb = p.ldb, g.stride_b = p.batch_stride_b, g.trans_b = p.trans_b, g.b_type = p.dtype;
  g.c = p.c, g.ldc = p.ldc, g.stride_c = p.batch_stride_c, g.c_type = p.dtype;
  g.alpha = p.alpha, g.beta = p.beta, g.bias = p.bias;
  if (e.epilogue != MatmulEpilogue::kGeluTanh) return RunGemm(ctx, g);
  // The fused epilogue where cuBLASLt has one: it saves the pre-activation only with ldc a multiple of 8
  // (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD), and its heuristic may find no algorithm for a
  // geometry (Unimplemented). Otherwise the same result unfused: the GEMM with its bias, then the GELU
  // kernel.
  if (e.pre_activation == nullptr || p.ldc % 8 == 0) {
    Gemm fused = g;
    fused.epilogue = e.epilogue, fused.aux = e.pre_activation;
    absl::Status status = RunGemm(ctx, fused);
    if (!absl::IsUnimplemented(status)) return status;
  }
  LMF_RETURN_IF_ERROR_STATUS(RunGemm(ctx, g));
  return GeluAfterGemm(ctx, p, e);
}

absl::Status MatmulBackward(const Context& ctx, const MatmulBackwardParams& bp) {
  const MatmulParams& p = bp.forward;
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "matmul"));
  const DType grad_param_type = DType::kF32;  // db, dbias
  if (bp.da != nullptr) {
    // With A broadcast over the batch (stride 0), dA sums over batches: one GEMM per batch, accumulating in
    // batch order (deterministic), as the CPU kernel.
    const bool broadcast = p.batch_stride_a == 0 && p.batch > 1;
    for (int64_t first = 0; first < (broadcast ? p.batch : 1); ++first) {
      Gemm g;
      g.batch = broadcast ? 1 : p.batch, g.alpha = p.alpha;
      g.beta = (bp.accumulate_da || first > 0) ? 1.0f : 0.0f;
      g.c = bp.da, g.ldc = p.lda, g.stride_c = p.batch_stride_a, g.c_type = p.dtype;
      g.a_type = g.b_type = p.dtype;
      const size_t es = DTypeSize(p.dtype);
      const void* b = static_cast<const char*>(p.b) + first * p.batch_stride_b * es;
      const void* dc = static_cast<const char*>(bp.dc) + first * p.batch_stride_c * es;
      if (!p.trans_a) {  // dA (M, K) = dC (M, N) op(B)^T
        g.M = p.M, g.N = p.K, g.K = p.N;
        g.a = dc, g.lda = p.ldc, g.stride_a = p.batch_stride_c, g.trans_a = false;
        g.b = b, g.ldb = p.ldb, g.stride_b = p.batch_stride_b, g.trans_b = !p.trans_b;
      } else {  // A stored (K, M): dA = op(B) dC^T
        g.M = p.K, g.N = p.M, g.K = p.N;
        g.a = b, g.lda = p.ldb, g.stride_a = p.batch_stride_b, g.trans_a = p.trans_b;
        g.b = dc, g.ldb = p.ldc, g.stride_b = p.batch_stride_c, g.trans_b = true;
      }
      LMF_RETURN_IF_ERROR_STATUS(RunGemm(ctx, g));
    }
  }
  if (bp.db != nullptr) {
    // With B broadcast over the batch (stride 0), dB sums over batches: one GEMM per batch, accumulating in
    // batch order (deterministic).
    const bool broadcast = p.batch_stride_b == 0 && p.batch > 1;
    for (int64_t first = 0; first < (broadcast ? p.batch : 1); ++first) {
      Gemm g;
      g.batch = broadcast ? 1 : p.batch, g.alpha = p.alpha;
      g.beta = (bp.accumulate_db || first > 0) ? 1.0f : 0.0f;
      g.c = bp.db, g.ldc = p.ldb, g.stride_c = p.batch_stride_b, g.c_type = grad_param_type;
      g.a_type = g.b_type = p.dtype;
      const size_t es = DTypeSize(p.dtype);
      const void* a = static_cast<const char*>(p.a) + first * p.batch_stride_a * es;
      const void* dc = static_cast<const char*>(bp.dc) + first * p.batch_stride_c * es;
      if (!p.trans_b) {  // B (K, N): dB = op(A)^T dC
        g.M = p.K, g.N = p.N, g.K = p.M;
        g.a = a, g.lda = p.lda, g.stride_a = p.batch_stride_a, g.trans_a = !p.trans_a;
        g.b = dc, g.ldb = p.ldc, g.stride_b = p.batch_stride_c, g.trans_b = false;
      } else {  // B stored (N, K): dB = dC^T op(A)
        g.M = p.N, g.N = p.K, g.K = p.M;
        g.a = dc, g.lda = p.ldc, g.stride_a = p.batch_stride_c, g.trans_a = true;
        g.b = a, g.ldb = p.lda, g.stride_b = p.batch_stride_a, g.trans_b = p.trans_a;
      }
      LMF_RETURN_IF_ERROR_STATUS(RunGemm(ctx, g));
    }
  }
  if (bp.dbias != nullptr) {
    ColumnSumParams cs;
    cs.dtype = p.dtype, cs.rows = p.M, cs.cols = p.N, cs.ld = p.ldc, cs.batch = p.batch,
    cs.batch_stride = p.batch_stride_c;
    cs.scale = 1.0f /* bias is not scaled by alpha */, cs.in = bp.dc, cs.out = static_cast<float*>(bp.dbias),
    cs.accumulate = bp.accumulate_dbias;
    LMF_RETURN_IF_ERROR_STATUS(ColumnSum(ctx, cs));
  }
  return absl::OkStatus();
}

}  // namespace lmf::kernels::cuda
