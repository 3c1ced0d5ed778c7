// A fake cuBLASLt for the CPU emulation (emulation.bzl): the API subset that
// kernels/matmul/matmul_cuda.cc and kernels/cuda/cuda_context.cc call, implemented in fake_cublaslt.cc on
// host memory from the documented semantics of cublasLt.h (the CUDA 13 header's comments), not from
// matmul_cuda.cc: column-major matrices, D = epilogue(alpha op(A) op(B) + beta C), strided batches, f32 and
// bf16 storage with fp32 compute. Every call validates its arguments as the documentation states them
// (attribute sizes, shapes, leading dimensions, types, epilogue requirements, pointer alignment against what
// the heuristic was told) and a failing call returns the documented status and records why
// (fake_cublaslt::LastError()). Enumerator values are the real header's. Not part of the Bazel build.
#ifndef LMFORGE_KERNELS_CUDA_EMULATION_CUBLASLT_FAKE_CUBLASLT_H_
#define LMFORGE_KERNELS_CUDA_EMULATION_CUBLASLT_FAKE_CUBLASLT_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

// library_types.h
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 };

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 };

enum cublasLtEpilogue_t {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_RELU = 2,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_GELU = 32,
  CUBLASLT_EPILOGUE_GELU_AUX = CUBLASLT_EPILOGUE_GELU | 128,
  CUBLASLT_EPILOGUE_GELU_BIAS = CUBLASLT_EPILOGUE_GELU | CUBLASLT_EPILOGUE_BIAS,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = CUBLASLT_EPILOGUE_GELU_AUX | CUBLASLT_EPILOGUE_BIAS,
};

enum cublasLtMatmulDescAttributes_t {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,                // int32_t
  CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,                  // int32_t
  CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,                // int32_t
  CUBLASLT_MATMUL_DESC_TRANSA = 3,                      // int32_t
  CUBLASLT_MATMUL_DESC_TRANSB = 4,                      // int32_t
  CUBLASLT_MATMUL_DESC_TRANSC = 5,                      // int32_t
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,                    // uint32_t
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,                // const void*
  CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10,          // int64_t
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,       // void*
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,            // int64_t
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13,  // int64_t
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,             // int32_t
};
enum cublasLtMatrixLayoutAttribute_t {
  CUBLASLT_MATRIX_LAYOUT_TYPE = 0,                  // uint32_t
  CUBLASLT_MATRIX_LAYOUT_ORDER = 1,                 // int32_t
  CUBLASLT_MATRIX_LAYOUT_ROWS = 2,                  // uint64_t
  CUBLASLT_MATRIX_LAYOUT_COLS = 3,                  // uint64_t
  CUBLASLT_MATRIX_LAYOUT_LD = 4,                    // int64_t
  CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,           // int32_t
  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6,  // int64_t
};
enum cublasLtMatmulPreferenceAttributes_t {
  CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,            // uint32_t
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,    // uint64_t
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,  // uint32_t
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,  // uint32_t
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,  // uint32_t
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,  // uint32_t
};

struct cublasLtContext;
typedef cublasLtContext* cublasLtHandle_t;
struct cublasLtMatmulDescOpaque_t;
typedef cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
struct cublasLtMatrixLayoutOpaque_t;
typedef cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
struct cublasLtMatmulPreferenceOpaque_t;
typedef cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;

struct cublasLtMatmulAlgo_t {
  uint64_t data[8];
};
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                                size_t size);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* returned);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a_desc, const void* B,
                              cublasLtMatrixLayout_t b_desc, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c_desc, void* D, cublasLtMatrixLayout_t d_desc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream);

// The check program's controls and counters (not cuBLASLt API).
namespace fake_cublaslt {
// What cublasLtMatmulAlgoGetHeuristic answers: one algorithm, or none in either documented way (the status
// CUBLAS_STATUS_NOT_SUPPORTED, or success with *returned = 0).
enum class Heuristic { kOneAlgorithm, kNotSupported, kNoResults };
void SetHeuristic(Heuristic for_gelu_epilogues, Heuristic for_other_epilogues);
// The algorithms the heuristic offers where it offers any (at most 8; the default: one): the first
// min(requestedAlgoCount, size) of them, in this order; algorithm i's cublasLtMatmul advances the emulated
// clock that CUDA events record (fake_cuda::clock_ms) by ms[i], or, where ms[i] < 0, refuses to run
// (CUBLAS_STATUS_NOT_SUPPORTED, not counted as a rejected call).
void SetAlgorithmTimes(const std::vector<double>& ms);
constexpr int kMaxAlgorithms = 8;
struct Counters {
  int64_t heuristic_queries = 0;
  int64_t matmuls = 0;
  int64_t matmuls_by_algorithm[kMaxAlgorithms] = {};  // the runs of each algorithm index
  int64_t gelu_matmuls = 0;  // cublasLtMatmul calls with a GELU epilogue
  int64_t failed_calls = 0;  // calls that returned an error status
};
Counters GetCounters();
const std::string& LastError();  // why the last failing call failed ("" if none failed)
}  // namespace fake_cublaslt

#endif  // LMFORGE_KERNELS_CUDA_EMULATION_CUBLASLT_FAKE_CUBLASLT_H_
