// The cuBLAS status type that kernels/cuda/cuda_check.h names, for the CPU emulation (cuemu.h).
#ifndef LMFORGE_KERNELS_CUDA_EMULATION_FAKE_CUBLASLT_H_
#define LMFORGE_KERNELS_CUDA_EMULATION_FAKE_CUBLASLT_H_

enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0 };

#endif  // LMFORGE_KERNELS_CUDA_EMULATION_FAKE_CUBLASLT_H_
