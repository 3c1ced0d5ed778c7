// The fake cuBLASLt of fake/cublasLt.h: descriptors, the heuristic and the GEMM on host memory. Each rule
// below cites the cublasLt.h documentation it follows. The GEMM is a plain loop in double (an exact fp32
// compute up to the final rounding), so a result differs from a correct fp32 GEMM only by that GEMM's own
// rounding; the emulation looks for mapping errors, not for cuBLASLt's last bits.
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

struct cublasLtContext {
  int unused = 0;
};

// Defaults as documented per attribute.
struct cublasLtMatmulDescOpaque_t {
  int32_t compute = 0, scale = 0;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;  // "default: CUBLAS_OP_N"
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;       // "default: CUBLASLT_EPILOGUE_DEFAULT"
  const void* bias = nullptr;
  int32_t bias_type = -1;  // "default: -1": the type of D
  int64_t bias_batch_stride = 0;
  void* aux = nullptr;
  int64_t aux_ld = 0, aux_batch_stride = 0;
};
struct cublasLtMatrixLayoutOpaque_t {
  int32_t type = 0;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;   // CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, "default: 1"
  int64_t stride = 0;  // CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, in elements, "default: 0"
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace = 0;                // "default: 0"
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: "default: 256"
};

namespace fake_cublaslt {
namespace {

std::mutex mu;
std::set<const void*> live;  // handles and descriptors created and not yet destroyed
Heuristic gelu_heuristic = Heuristic::kOneAlgorithm, other_heuristic = Heuristic::kOneAlgorithm;
std::vector<double> algorithm_ms = {1.0};
Counters counters;
std::string last_error;

cublasStatus_t Fail(cublasStatus_t status, const std::string& why) {
  last_error = why;
  ++counters.failed_calls;
  std::fprintf(stderr, "fake cuBLASLt: %s\n", why.c_str());
  return status;
}

bool Live(const void* p) { return p != nullptr && live.count(p) > 0; }

// Attribute buffers must be exactly the documented type's size ("sizeInBytes" of the SetAttribute calls).
template <typename T>
cublasStatus_t Put(const char* name, const void* buf, size_t size, T* field) {
  if (buf == nullptr) return Fail(CUBLAS_STATUS_INVALID_VALUE, std::string(name) + ": null buffer");
  if (size != sizeof(T))
    return Fail(CUBLAS_STATUS_INVALID_VALUE, std::string(name) + ": " + std::to_string(size) +
                                                 " bytes, the attribute is " + std::to_string(sizeof(T)));
  std::memcpy(field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

size_t ElementSize(int32_t t) { return t == CUDA_R_32F ? 4 : 2; }

uint32_t AlignmentOf(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align >>= 1;
  return align;
}

bool HasGelu(uint32_t e) { return (e & CUBLASLT_EPILOGUE_GELU) != 0; }
bool HasBias(uint32_t e) { return (e & CUBLASLT_EPILOGUE_BIAS) != 0; }
bool HasAux(uint32_t e) { return (e & 128) != 0; }

// The problem a (descriptor, layouts) set describes, validated as cublasLtMatmul documents it.
struct Problem {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int32_t bias_type = 0;
};

cublasStatus_t Validate(const cublasLtMatmulDescOpaque_t* op, const cublasLtMatrixLayoutOpaque_t* a,
                        const cublasLtMatrixLayoutOpaque_t* b, const cublasLtMatrixLayoutOpaque_t* c,
                        const cublasLtMatrixLayoutOpaque_t* d, Problem* p) {
  if (!Live(op) || !Live(a) || !Live(b) || !Live(c) || !Live(d))
    return Fail(CUBLAS_STATUS_INVALID_VALUE, "a descriptor is null or was destroyed");
  if (op->compute != CUBLAS_COMPUTE_32F || op->scale != CUDA_R_32F)
    return Fail(CUBLAS_STATUS_NOT_SUPPORTED,
                "compute/scale type: the emulation runs COMPUTE_32F, scale R_32F");
  for (int32_t t : {op->transa, op->transb})
    if (t != CUBLAS_OP_N && t != CUBLAS_OP_T) return Fail(CUBLAS_STATUS_INVALID_VALUE, "TRANSA/TRANSB value");
  // D = alpha op(A) op(B) + beta C: op(A) is m x k, op(B) k x n, C and D m x n ("cublasLtMatmul").
  p->m = static_cast<int64_t>(d->rows), p->n = static_cast<int64_t>(d->cols);
  const int64_t a_rows = op->transa == CUBLAS_OP_N ? a->rows : a->cols;
  const int64_t a_cols = op->transa == CUBLAS_OP_N ? a->cols : a->rows;
  const int64_t b_rows = op->transb == CUBLAS_OP_N ? b->rows : b->cols;
  const int64_t b_cols = op->transb == CUBLAS_OP_N ? b->cols : b->rows;
  p->k = a_cols;
  if (a_rows != p->m || b_cols != p->n || b_rows != p->k)
    return Fail(CUBLAS_STATUS_INVALID_VALUE, "shapes: op(A) " + std::to_string(a_rows) + "x" +
                                                 std::to_string(a_cols) + ", op(B) " +
                                                 std::to_string(b_rows) + "x" + std::to_string(b_cols) +
                                                 ", D " + std::to_string(p->m) + "x" + std::to_string(p->n));
  // "Currently only CUBLAS_OP_N is supported" for C: C is laid out as D.
  if (c->rows != d->rows || c->cols != d->cols || c->ld != d->ld || c->type != d->type ||
      c->batch != d->batch || c->stride != d->stride)
    return Fail(CUBLAS_STATUS_NOT_SUPPORTED, "C and D layouts differ");
  // Column-major (the default CUBLASLT_ORDER_COL): the leading dimension is at least the rows.
  for (const auto* l : {a, b, c})
    if (l->ld < std::max<int64_t>(1, static_cast<int64_t>(l->rows)))
      return Fail(CUBLAS_STATUS_INVALID_VALUE,
                  "leading dimension " + std::to_string(l->ld) + " < rows " + std::to_string(l->rows));
  if (a->batch != d->batch || b->batch != d->batch)
    return Fail(CUBLAS_STATUS_INVALID_VALUE, "BATCH_COUNT differs between A, B and D");
  p->batch = d->batch;
  // Types: A and B alike; f32 x f32 -> f32, bf16 x bf16 -> bf16 or f32 (the COMPUTE_32F rows of the
  // cublasLtMatmul type table).
  const bool types_ok =
      a->type == b->type && ((a->type == CUDA_R_32F && d->type == CUDA_R_32F) ||
                             (a->type == CUDA_R_16BF && (d->type == CUDA_R_16BF || d->type == CUDA_R_32F)));
  if (!types_ok) return Fail(CUBLAS_STATUS_NOT_SUPPORTED, "type combination of A, B, D");
  const uint32_t e = op->epilogue;
  if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS && e != CUBLASLT_EPILOGUE_GELU &&
      e != CUBLASLT_EPILOGUE_GELU_BIAS && e != CUBLASLT_EPILOGUE_GELU_AUX &&
      e != CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
    return Fail(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue " + std::to_string(e) + " is not emulated");
  // BIAS_DATA_TYPE: "Bias vector elements are the same type as the elements of output matrix (Dtype)" (the
  // exceptions are IMMA and fp8 kernels); -1 means that type.
  p->bias_type = op->bias_type == -1 ? d->type : op->bias_type;
  if (HasBias(e) && p->bias_type != d->type)
    return Fail(CUBLAS_STATUS_NOT_SUPPORTED, "BIAS_DATA_TYPE differs from D's type");
  if (HasBias(e) && op->bias == nullptr)
    return Fail(CUBLAS_STATUS_INVALID_VALUE, "bias epilogue, no BIAS_POINTER");
  // EPILOGUE_AUX_LD (GELU input matrix): "Must be divisible by 8 and be no less than the number of rows in
  // the output matrix"; the batch stride "Must be divisible by 8"; the pointer "Requires setting ..._AUX_LD".
  if (HasAux(e)) {
    if (op->aux == nullptr) return Fail(CUBLAS_STATUS_INVALID_VALUE, "AUX epilogue, no EPILOGUE_AUX_POINTER");
    if (op->aux_ld % 8 != 0 || op->aux_ld < p->m)
      return Fail(CUBLAS_STATUS_INVALID_VALUE, "EPILOGUE_AUX_LD " + std::to_string(op->aux_ld) +
                                                   ": must be a multiple of 8 and >= rows of D " +
                                                   std::to_string(p->m));
    if (p->batch > 1 && op->aux_batch_stride % 8 != 0)
      return Fail(CUBLAS_STATUS_INVALID_VALUE, "EPILOGUE_AUX_BATCH_STRIDE not a multiple of 8");
  }
  return CUBLAS_STATUS_SUCCESS;
}

// What an algorithm returned by the heuristic remembers: the configuration it was found for (a fingerprint
// of every non-pointer field) and the alignments it may assume: the preference's for A, B, C, D and the
// bias and aux pointers' as set on the descriptor when the heuristic ran (BIAS_POINTER, AUX_POINTER:
// "Routines that don't dereference this pointer, like cublasLtMatmulAlgoGetHeuristic() depend on its value
// to determine expected pointer alignment").
uint64_t Fingerprint(const cublasLtMatmulDescOpaque_t* op, const cublasLtMatrixLayoutOpaque_t* const* l) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](int64_t v) {
    h ^= static_cast<uint64_t>(v);
    h *= 1099511628211ull;
  };
  for (int64_t v : {int64_t{op->compute}, int64_t{op->scale}, int64_t{op->transa}, int64_t{op->transb},
                    int64_t{op->epilogue}, int64_t{op->bias_type}, op->bias_batch_stride, op->aux_ld,
                    op->aux_batch_stride})
    mix(v);
  for (int i = 0; i < 4; ++i)
    for (int64_t v : {int64_t{l[i]->type}, static_cast<int64_t>(l[i]->rows), static_cast<int64_t>(l[i]->cols),
                      l[i]->ld, int64_t{l[i]->batch}, l[i]->stride})
      mix(v);
  return h;
}
// data[0]: bits 0-31 this magic, 32-55 the workspace bytes, 56-63 the algorithm's index (SetAlgorithmTimes).
constexpr uint64_t kAlgoMagic = 0x6c6d6661ull;
constexpr size_t kAlgoWorkspace = size_t{1} << 20;  // what the emulated algorithm says it needs, at most

float Load(const void* base, int32_t type, int64_t index) {
  if (type == CUDA_R_32F) return static_cast<const float*>(base)[index];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
}
void Store(void* base, int32_t type, int64_t index, double v) {
  if (type == CUDA_R_32F) {
    static_cast<float*>(base)[index] = static_cast<float>(v);
  } else {
    static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(static_cast<float>(v));
  }
}

// GELU, tanh form (CUBLASLT_EPILOGUE_GELU: "x:=GELU(x)"; cuBLASLt's GELU is the tanh approximation).
double GeluTanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

}  // namespace

void SetHeuristic(Heuristic for_gelu_epilogues, Heuristic for_other_epilogues) {
  std::lock_guard<std::mutex> lock(mu);
  gelu_heuristic = for_gelu_epilogues, other_heuristic = for_other_epilogues;
}
void SetAlgorithmTimes(const std::vector<double>& ms) {
  std::lock_guard<std::mutex> lock(mu);
  algorithm_ms = ms;
  if (algorithm_ms.size() > kMaxAlgorithms) algorithm_ms.resize(kMaxAlgorithms);
}
Counters GetCounters() {
  std::lock_guard<std::mutex> lock(mu);
  return counters;
}
const std::string& LastError() { return last_error; }

}  // namespace fake_cublaslt

using namespace fake_cublaslt;  // NOLINT: this file implements that namespace's C API

namespace {
template <typename T>
cublasStatus_t Create(T** out) {
  if (out == nullptr) return Fail(CUBLAS_STATUS_INVALID_VALUE, "create: null output");
  std::lock_guard<std::mutex> lock(mu);
  *out = new T();
  live.insert(*out);
  return CUBLAS_STATUS_SUCCESS;
}
template <typename T>
cublasStatus_t Destroy(T* p, const char* what) {
  std::lock_guard<std::mutex> lock(mu);
  if (p == nullptr) return CUBLAS_STATUS_SUCCESS;
  if (live.erase(p) == 0)
    return Fail(CUBLAS_STATUS_INVALID_VALUE, std::string(what) + ": destroyed twice or never created");
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) { return Create(handle); }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) { return Destroy(handle, "cublasLtDestroy"); }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  const cublasStatus_t s = Create(desc);
  if (s == CUBLAS_STATUS_SUCCESS) (*desc)->compute = compute, (*desc)->scale = scale;
  return s;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return Destroy(desc, "MatmulDescDestroy");
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  std::lock_guard<std::mutex> lock(mu);
  if (!Live(d)) return Fail(CUBLAS_STATUS_INVALID_VALUE, "MatmulDescSetAttribute: descriptor not live");
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return Put("COMPUTE_TYPE", buf, size, &d->compute);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return Put("SCALE_TYPE", buf, size, &d->scale);
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return Put("TRANSA", buf, size, &d->transa);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return Put("TRANSB", buf, size, &d->transb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return Put("EPILOGUE", buf, size, &d->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return Put("BIAS_POINTER", buf, size, &d->bias);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      return Put("BIAS_BATCH_STRIDE", buf, size, &d->bias_batch_stride);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return Put("EPILOGUE_AUX_POINTER", buf, size, &d->aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return Put("EPILOGUE_AUX_LD", buf, size, &d->aux_ld);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
      return Put("EPILOGUE_AUX_BATCH_STRIDE", buf, size, &d->aux_batch_stride);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return Put("BIAS_DATA_TYPE", buf, size, &d->bias_type);
    default:
      return Fail(CUBLAS_STATUS_INVALID_VALUE,
                  "MatmulDesc attribute " + std::to_string(attr) + " not emulated");
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (type != CUDA_R_32F && type != CUDA_R_16BF) return Fail(CUBLAS_STATUS_NOT_SUPPORTED, "layout type");
  const cublasStatus_t s = Create(layout);
  if (s == CUBLAS_STATUS_SUCCESS)
    (*layout)->type = type, (*layout)->rows = rows, (*layout)->cols = cols, (*layout)->ld = ld;
  return s;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  return Destroy(l, "MatrixLayoutDestroy");
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                                size_t size) {
  std::lock_guard<std::mutex> lock(mu);
  if (!Live(l)) return Fail(CUBLAS_STATUS_INVALID_VALUE, "MatrixLayoutSetAttribute: layout not live");
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return Put("BATCH_COUNT", buf, size, &l->batch);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return Put("STRIDED_BATCH_OFFSET", buf, size, &l->stride);
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return Put("ROWS", buf, size, &l->rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return Put("COLS", buf, size, &l->cols);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return Put("LD", buf, size, &l->ld);
    default:
      return Fail(CUBLAS_STATUS_INVALID_VALUE,
                  "MatrixLayout attribute " + std::to_string(attr) + " not emulated");
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) { return Create(pref); }
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  return Destroy(p, "PreferenceDestroy");
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  std::lock_guard<std::mutex> lock(mu);
  if (!Live(p)) return Fail(CUBLAS_STATUS_INVALID_VALUE, "PreferenceSetAttribute: preference not live");
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return Put("MAX_WORKSPACE_BYTES", buf, size, &p->max_workspace);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return Put("MIN_ALIGNMENT_A_BYTES", buf, size, &p->align[0]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return Put("MIN_ALIGNMENT_B_BYTES", buf, size, &p->align[1]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return Put("MIN_ALIGNMENT_C_BYTES", buf, size, &p->align[2]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return Put("MIN_ALIGNMENT_D_BYTES", buf, size, &p->align[3]);
    default:
      return Fail(CUBLAS_STATUS_INVALID_VALUE,
                  "Preference attribute " + std::to_string(attr) + " not emulated");
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* returned) {
  std::lock_guard<std::mutex> lock(mu);
  ++counters.heuristic_queries;
  if (!Live(handle)) return Fail(CUBLAS_STATUS_NOT_INITIALIZED, "heuristic: handle not initialized");
  // "CUBLAS_STATUS_INVALID_VALUE if requestedAlgoCount is less or equal to zero"
  if (requested <= 0 || results == nullptr || returned == nullptr)
    return Fail(CUBLAS_STATUS_INVALID_VALUE, "heuristic: requestedAlgoCount <= 0 or null output");
  if (!Live(pref)) return Fail(CUBLAS_STATUS_INVALID_VALUE, "heuristic: preference not live");
  *returned = 0;
  Problem p;
  const cublasStatus_t valid = Validate(op, a, b, c, d, &p);
  if (valid != CUBLAS_STATUS_SUCCESS) return valid;
  const Heuristic h = HasGelu(op->epilogue) ? gelu_heuristic : other_heuristic;
  if (h == Heuristic::kNotSupported) return CUBLAS_STATUS_NOT_SUPPORTED;  // "no heuristic function available"
  if (h == Heuristic::kNoResults) return CUBLAS_STATUS_SUCCESS;
  const cublasLtMatrixLayoutOpaque_t* layouts[4] = {a, b, c, d};
  const int count = std::min<int>(requested, static_cast<int>(algorithm_ms.size()));
  for (int i = 0; i < count; ++i) {
    cublasLtMatmulHeuristicResult_t& r = results[i];
    std::memset(&r, 0, sizeof(r));
    r.algo.data[1] = Fingerprint(op, layouts);
    r.algo.data[2] = pref->align[0], r.algo.data[3] = pref->align[1];
    r.algo.data[4] = pref->align[2], r.algo.data[5] = pref->align[3];
    r.algo.data[6] = HasBias(op->epilogue) ? AlignmentOf(op->bias) : 256;
    r.algo.data[7] = HasAux(op->epilogue) ? AlignmentOf(op->aux) : 256;
    r.workspaceSize = std::min<uint64_t>(pref->max_workspace, kAlgoWorkspace);
    r.algo.data[0] =
        kAlgoMagic | (static_cast<uint64_t>(r.workspaceSize) << 32) | (static_cast<uint64_t>(i) << 56);
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
  }
  *returned = count;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha_ptr,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta_ptr, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t) {
  std::lock_guard<std::mutex> lock(mu);
  ++counters.matmuls;
  if (!Live(handle)) return Fail(CUBLAS_STATUS_NOT_INITIALIZED, "matmul: handle not initialized");
  Problem p;
  const cublasStatus_t valid = Validate(op, a, b, c, d, &p);
  if (valid != CUBLAS_STATUS_SUCCESS) return valid;
  if (alpha_ptr == nullptr || beta_ptr == nullptr)
    return Fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: null alpha/beta");
  // The scale type is R_32F and the pointer mode the default CUBLASLT_POINTER_MODE_HOST: host floats.
  const double alpha = *static_cast<const float*>(alpha_ptr), beta = *static_cast<const float*>(beta_ptr);
  if (algo == nullptr || (algo->data[0] & 0xffffffffull) != kAlgoMagic)
    return Fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: algo was not returned by the heuristic");
  const cublasLtMatrixLayoutOpaque_t* layouts[4] = {a, b, c, d};
  if (algo->data[1] != Fingerprint(op, layouts))
    return Fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: algo was found for another configuration");
  const void* pointers[6] = {
      A, B, C, D, HasBias(op->epilogue) ? op->bias : nullptr, HasAux(op->epilogue) ? op->aux : nullptr};
  const char* names[6] = {"A", "B", "C", "D", "bias", "aux"};
  for (int i = 0; i < 6; ++i) {
    if (pointers[i] == nullptr) continue;
    if (AlignmentOf(pointers[i]) < algo->data[2 + i])
      return Fail(CUBLAS_STATUS_NOT_SUPPORTED, std::string("matmul: ") + names[i] + " aligned to " +
                                                   std::to_string(AlignmentOf(pointers[i])) +
                                                   " bytes, the algo was chosen for " +
                                                   std::to_string(algo->data[2 + i]));
  }
  // "CUBLAS_STATUS_INVALID_VALUE ... when workspaceSizeInBytes is less than workspace required by configured
  // algo"; the algorithm then uses (here: clobbers) that much of the workspace.
  const size_t ws_needed = (algo->data[0] >> 32) & 0xffffffull;
  if (workspace_bytes < ws_needed)
    return Fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: workspace of " + std::to_string(workspace_bytes) +
                                                 " bytes, the algo needs " + std::to_string(ws_needed));
  if (ws_needed > 0 && workspace == nullptr)
    return Fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: null workspace");
  const size_t index = algo->data[0] >> 56;
  if (index >= algorithm_ms.size())
    return Fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: algo index beyond the heuristic's algorithms");
  if (algorithm_ms[index] < 0) return CUBLAS_STATUS_NOT_SUPPORTED;  // this algorithm refuses to run
  ++counters.matmuls_by_algorithm[index];
  {
    std::lock_guard<std::mutex> clock_lock(fake_cuda::mu);
    fake_cuda::clock_ms += algorithm_ms[index];
  }
  ::cuemu::DeviceWork device_work;  // the device's reads and writes (the runtime's fence opens)
  if (ws_needed > 0) std::memset(workspace, 0xa5, ws_needed);  // the algorithm's scratch is clobbered
  if (A == nullptr || B == nullptr || D == nullptr || (beta != 0.0 && C == nullptr))
    return Fail(CUBLAS_STATUS_INVALID_VALUE, "matmul: null matrix pointer");
  const uint32_t e = op->epilogue;
  if (HasGelu(e)) ++counters.gelu_matmuls;
  // Column-major: element (r, col) of a layout at r + col * ld, batch i at i * STRIDED_BATCH_OFFSET.
  // op(A) row by row and op(B) column by column, widened once per batch, so each element's k-term sum (in
  // order, in double) runs over contiguous values.
  std::vector<double> rows_a(static_cast<size_t>(p.m * p.k)), cols_b(static_cast<size_t>(p.n * p.k));
  for (int64_t i = 0; i < p.batch; ++i) {
    for (int64_t r = 0; r < p.m; ++r)
      for (int64_t l = 0; l < p.k; ++l) {
        const int64_t ia = op->transa == CUBLAS_OP_N ? r + l * a->ld : l + r * a->ld;
        rows_a[r * p.k + l] = Load(A, a->type, i * a->stride + ia);
      }
    for (int64_t col = 0; col < p.n; ++col)
      for (int64_t l = 0; l < p.k; ++l) {
        const int64_t ib = op->transb == CUBLAS_OP_N ? l + col * b->ld : col + l * b->ld;
        cols_b[col * p.k + l] = Load(B, b->type, i * b->stride + ib);
      }
    for (int64_t col = 0; col < p.n; ++col) {
      for (int64_t r = 0; r < p.m; ++r) {
        double acc = 0.0;
        const double* ra = rows_a.data() + r * p.k;
        const double* cb = cols_b.data() + col * p.k;
        for (int64_t l = 0; l < p.k; ++l) acc += ra[l] * cb[l];
        double x = alpha * acc;
        // beta == 0: C is not read (cuBLAS: "if beta == 0 ... C does not have to be a valid input").
        if (beta != 0.0) x += beta * static_cast<double>(Load(C, c->type, i * c->stride + r + col * c->ld));
        // CUBLASLT_EPILOGUE_BIAS: "Bias vector length must match matrix D rows ... broadcasted to all columns
        // and added before applying final postprocessing"; batch i reads bias + i * BIAS_BATCH_STRIDE.
        if (HasBias(e)) x += Load(op->bias, p.bias_type, i * op->bias_batch_stride + r);
        // GELU_AUX: "outputs GELU input as a separate matrix", of D's type, leading dimension AUX_LD.
        if (HasAux(e)) Store(op->aux, d->type, i * op->aux_batch_stride + r + col * op->aux_ld, x);
        if (HasGelu(e)) x = GeluTanh(x);
        Store(D, d->type, i * d->stride + r + col * d->ld, x);
      }
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}
