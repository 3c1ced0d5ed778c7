#!/usr/bin/env bash
# Runs the CUDA kernels of kernels/ on the CPU (no GPU needed) against the CPU kernels: rewrites every
# `kernel<<<grid, block, smem, stream>>>(args)` of the ops' .cu files (the memory-bound ops, attention, the
# column sums) and of kernels/cuda/norm_kernels.cuh into a call of the fiber emulation in cuemu.h, compiles
# them with g++ against the fake CUDA headers in fake/ (which also replace attention's inline PTX, see
# fake/kernels/attention/mma.cuh and wgmma.cuh), and runs emulation_check.cc and attention_check.cc (with
# wgmma_check.cc, the fake wgmma's self-test). A desk check before
# spending GPU time: it executes the real kernel code (indexing, tails, vector paths, reductions, aliasing,
# scratch layout, tensor-core fragment mapping, cp.async waits), not the GPU's arithmetic, and races only
# between warps across a missing __syncthreads (cuemu.h runs one warp at a time between block barriers).
# CI runs it as //kernels/cuda/emulation:emulation_test (from the test's runfiles, where the BUILD file's data
# put exactly the sources read here); the fake headers reach only this script's g++ command lines, never
# the Bazel build. Where g++ is missing it says so and passes (skipped).
#
#   kernels/cuda/emulation/run.sh                 # 1-2 minutes on 2 cores
#   SANITIZE=1 kernels/cuda/emulation/run.sh      # with AddressSanitizer and UBSan (alignment): ~6 minutes
#   RACECHECK=1 kernels/cuda/emulation/run.sh     # with ThreadSanitizer: races in and between blocks (cuemu.cc)
#
# Output: one "ok"/"FAIL" line per check, then "N failures"; the exit status is non-zero on any failure.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
source "$here/common.sh"
emulation_start run.sh lmf_cuda_emulation

ops=(activations adamw cast cross_entropy embedding grad_norm layernorm residual rmsnorm rope swiglu)
# The CUDA sources (slowest to compile first) and the CPU kernels they are checked against.
cuda_sources=(kernels/attention/attention_cuda.cu kernels/attention/attention_wgmma_cuda.cu
  kernels/attention/attention_f32_cuda.cu kernels/matmul/column_sum_cuda.cu)
cpu_sources=(kernels/attention/attention_cpu.cc)
for op in "${ops[@]}"; do
  cuda_sources+=("kernels/$op/${op}_cuda.cu")
  cpu_sources+=("kernels/$op/${op}_cpu.cc")
done
for f in "${cuda_sources[@]}"; do emulation_rewrite "$root/$f" "$work/src/$(basename "$f" .cu).cc"; done
emulation_rewrite "$root/kernels/cuda/norm_kernels.cuh" "$work/inc/kernels/cuda/norm_kernels.cuh"

emulated=(-I"$work/inc" -I"$here/fake" -I"$root")
host=(-I"$root")
for f in "${cuda_sources[@]}"; do
  compile "$work/obj/$(basename "$f" .cu).o" "${emulated[@]}" "$work/src/$(basename "$f" .cu).cc"
done
for f in "${cpu_sources[@]}"; do compile "$work/obj/$(basename "$f" .cc).o" "${host[@]}" "$root/$f"; done
for f in cuemu emulation_check attention_check; do compile "$work/obj/$f.o" "${host[@]}" "$here/$f.cc"; done
compile "$work/obj/wgmma_check.o" "${emulated[@]}" "$here/wgmma_check.cc"  # the fake wgmma's self-test
compile_host_support
compiles_done
emulation_link "$work/emulation_check"
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:detect_stack_use_after_return=0}" "$work/emulation_check"
