#!/usr/bin/env bash
# Runs the cuBLASLt GEMM path of kernels/matmul (matmul_cuda.cc, with cuda_context.cc and the kernels it
# launches: column_sum_cuda.cu for dbias, activations_cuda.cu for the unfused GELU) on the CPU against the CPU
# GEMM (matmul_cpu.cc on oneDNN): compiles them with g++ against this folder's fake cuBLASLt and CUDA runtime
# (fake/; fake_cublaslt.cc follows the cublasLt.h documentation), the kernels' launches rewritten for the
# fiber emulation as ../run.sh does (../common.sh, ../cuemu.h), and runs cublaslt_check.cc. It checks the mapping of row-major MatmulParams onto cuBLASLt's column-major API, not
# cuBLASLt's arithmetic. CI runs it as //kernels/cuda/emulation/cublaslt:cublaslt_emulation_test from the
# test's runfiles; the fakes reach only the g++ command lines below, never the Bazel build. Where g++ is
# missing it says so and passes (skipped).
#
#   kernels/cuda/emulation/cublaslt/run.sh              # ~30 s on 2 cores
#   SANITIZE=1 kernels/cuda/emulation/cublaslt/run.sh   # with AddressSanitizer and UBSan
#
# Output: one "ok"/"FAIL" line per check, then "N checks, M failures"; the exit status is non-zero on any
# failure.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
source "$here/../common.sh"
emulation_start cublaslt/run.sh lmf_cublaslt_emulation

emulation_rewrite "$root/kernels/matmul/column_sum_cuda.cu" "$work/src/column_sum_cuda.cc"
emulation_rewrite "$root/kernels/activations/activations_cuda.cu" "$work/src/activations_cuda.cc"

# This folder's runtime and cuBLASLt fakes first; bf16 from ../fake.
emulated=(-I"$here/fake" -I"$here/../fake" -I"$root")
host=(-I"$root")
# Emulated: the CUDA backend's host code and kernels, the fake cuBLASLt, the check.
compile "$work/obj/matmul_cuda.o" "${emulated[@]}" "$root/kernels/matmul/matmul_cuda.cc"
compile "$work/obj/cuda_context.o" "${emulated[@]}" "$root/kernels/cuda/cuda_context.cc"
compile "$work/obj/column_sum_cuda.o" "${emulated[@]}" "$work/src/column_sum_cuda.cc"
compile "$work/obj/activations_cuda.o" "${emulated[@]}" "$work/src/activations_cuda.cc"
compile "$work/obj/fake_cublaslt.o" "${emulated[@]}" "$here/fake_cublaslt.cc"
compile "$work/obj/cublaslt_check.o" "${emulated[@]}" "$here/cublaslt_check.cc"
compile "$work/obj/cuemu.o" "${host[@]}" "$here/../cuemu.cc"
# Host: the CPU reference and what both sides link.
compile "$work/obj/matmul_cpu.o" "${host[@]}" -fopenmp "$root/kernels/matmul/matmul_cpu.cc"
compile "$work/obj/activations_cpu.o" "${host[@]}" "$root/kernels/activations/activations_cpu.cc"
compile_host_support
compiles_done
emulation_link "$work/cublaslt_check" -fopenmp -ldnnl
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}" LMF_NUM_THREADS="${LMF_NUM_THREADS:-2}" "$work/cublaslt_check"
