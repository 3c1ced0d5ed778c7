// LMF_HOST_DEVICE marks a small inline function that both the host and CUDA device code call (nvcc's
// __host__ __device__), so that a CPU reference and its CUDA kernel run one copy of the same arithmetic.
// Outside nvcc (g++, and the CUDA emulation, which compiles .cu files with g++) it is empty.
#ifndef LMFORGE_BASE_HOST_DEVICE_H_
#define LMFORGE_BASE_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define LMF_HOST_DEVICE __host__ __device__
#else
#define LMF_HOST_DEVICE
#endif

#endif  // LMFORGE_BASE_HOST_DEVICE_H_
