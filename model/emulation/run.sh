#!/usr/bin/env bash
# Runs the whole model's CUDA path on the CPU: model/language_model's GPU tests (language_model_cuda_test.cc
# and language_model_decode_cuda_test.cc, unchanged) compiled with g++ against the CUDA emulation -- every
# kernel of kernels/ rewritten for the fiber emulator (kernels/cuda/emulation/cuemu.h, its fake headers and
# the fake tensor-core instructions), cuBLASLt and the CUDA runtime replaced by the fakes of
# kernels/cuda/emulation/cublaslt/fake (host memory; work happens at once on the calling thread). So the
# model's device code paths -- bf16 compute copies and fp32 master weights, device buffers, dispatch, the
# caching allocator, the KV cache -- run end to end and meet the tests' comparisons with the fp32 CPU model,
# which until a GPU runs them nothing else executes. What it cannot see: the GPU's arithmetic (the fakes
# compute in the host's float/double), stream ordering (everything is synchronous here) and intra-warp
# races. CI runs it as //model/emulation:model_emulation_test; where g++ is missing it says so and passes.
#
#   model/emulation/run.sh                       # compiles ~45 files, then the two test binaries
#   GTEST_FILTER='*Bf16*' model/emulation/run.sh  # a subset (gtest's own variable)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
emu="$root/kernels/cuda/emulation"
source "$emu/common.sh"
emulation_start model/emulation/run.sh lmf_model_emulation

# The CUDA sources of every op the model runs, rewritten for the emulator.
cuda_sources=(kernels/matmul/column_sum_cuda.cu)
for f in "$root"/kernels/attention/*_cuda.cu; do cuda_sources+=("kernels/attention/$(basename "$f")"); done
for op in activations cast cross_entropy embedding layernorm residual rmsnorm rope swiglu; do
  cuda_sources+=("kernels/$op/${op}_cuda.cu")
done
for f in "${cuda_sources[@]}"; do emulation_rewrite "$root/$f" "$work/src/$(basename "$f" .cu).cc"; done
emulation_rewrite "$root/kernels/cuda/norm_kernels.cuh" "$work/inc/kernels/cuda/norm_kernels.cuh"

# Everything sees the CUDA backend (LMF_WITH_CUDA) through the fakes: the cuBLASLt emulation's runtime and
# cuBLASLt first, then the kernel emulation's bf16, cub and tensor-core fakes.
emulated=(-DLMF_WITH_CUDA=1 -I"$work/inc" -I"$emu/cublaslt/fake" -I"$emu/fake" -I"$root")
host_sources=(
  base/check.cc base/thread_pool.cc kernels/core/core.cc kernels/core/dispatch.cc
  kernels/cuda/caching_allocator.cc kernels/cuda/cuda_context.cc kernels/cuda/gpu_test_util.cc
  kernels/matmul/matmul_cuda.cc kernels/memory/memory_cuda.cc
  model/accounting/accounting.cc model/config/config.cc model/language_model/language_model.cc
  model/language_model/language_model_decode.cc
  model/layers/attention.cc model/layers/block.cc model/layers/embedding.cc model/layers/feed_forward.cc
  model/layers/linear.cc model/layers/norm.cc model/layers/parameter.cc)
for op in activations attention cast cross_entropy embedding layernorm matmul memory residual rmsnorm rope \
  swiglu; do
  host_sources+=("kernels/$op/${op}_cpu.cc")
done
for f in "${cuda_sources[@]}"; do
  compile "$work/obj/$(basename "$f" .cu).o" "${emulated[@]}" "$work/src/$(basename "$f" .cu).cc"
done
for f in "${host_sources[@]}"; do
  compile "$work/obj/$(echo "$f" | tr / _ | sed 's/\.cc$//').o" "${emulated[@]}" -fopenmp "$root/$f"
done
compile "$work/obj/fake_cublaslt.o" "${emulated[@]}" "$emu/cublaslt/fake_cublaslt.cc"
compile "$work/obj/cuemu.o" -I"$root" "$emu/cuemu.cc"
mkdir -p "$work/tests"
tests=(language_model_cuda_test language_model_decode_cuda_test)
for t in "${tests[@]}"; do
  compile "$work/tests/$t.o" "${emulated[@]}" "$root/model/language_model/$t.cc"
done
compiles_done
status=0
for t in "${tests[@]}"; do
  echo "=== $t (emulated CUDA)"
  emulation_link "$work/$t" "$work/tests/$t.o" -fopenmp -ldnnl -lgtest_main -lgtest
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}" LMF_NUM_THREADS="${LMF_NUM_THREADS:-2}" "$work/$t" || status=1
done
exit "$status"
