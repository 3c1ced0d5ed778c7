#!/usr/bin/env bash
# Runs the CUDA kernels of kernels/ on the CPU (no GPU needed) against the CPU kernels: rewrites every
# `kernel<<<grid, block, smem, stream>>>(args)` of the ops' .cu files (the memory-bound ops, attention, the
# column sums) and of kernels/cuda/norm_kernels.cuh into a call of the fiber emulation in cuemu.h, compiles
# them with g++ against the fake CUDA headers in fake/ (which also replace attention's inline PTX, see
# fake/kernels/attention/mma.cuh), and runs emulation_check.cc and attention_check.cc. A desk check before
# spending GPU time: it executes the real kernel code (indexing, tails, vector paths, reductions, aliasing,
# scratch layout, tensor-core fragment mapping), not the GPU's arithmetic, and not races: threads interleave
# only at barriers, so a missing __syncthreads goes unseen.
# CI runs it as //kernels/cuda/emulation:emulation_test (from the test's runfiles, where the BUILD file's data
# put exactly the sources read here); the fake headers reach only this script's g++ command lines, never
# the Bazel build. Where g++ is missing it says so and passes (skipped).
#
#   kernels/cuda/emulation/run.sh                 # 1-2 minutes on 2 cores
#   SANITIZE=1 kernels/cuda/emulation/run.sh      # with AddressSanitizer and UBSan (alignment): ~6 minutes
#
# Output: one "ok"/"FAIL" line per check, then "N failures"; the exit status is non-zero on any failure.
set -euo pipefail
if ! command -v g++ >/dev/null; then
  echo "run.sh: SKIPPED: no g++ on PATH (the CUDA emulation compiles the kernels with the host g++)"
  exit 0
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
if [[ -n "${EMULATION_WORK_DIR:-}" ]]; then
  work="$EMULATION_WORK_DIR"  # kept: the rewritten sources and the binary
else
  work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/lmf_cuda_emulation.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work/src" "$work/inc/kernels/cuda" "$work/obj"

ops=(activations adamw cast cross_entropy embedding grad_norm layernorm residual rmsnorm rope swiglu)
# The CUDA sources (slowest to compile first) and the CPU kernels they are checked against.
cuda_sources=(kernels/attention/attention_cuda.cu kernels/attention/attention_f32_cuda.cu
  kernels/matmul/column_sum_cuda.cu)
cpu_sources=(kernels/attention/attention_cpu.cc)
for op in "${ops[@]}"; do
  cuda_sources+=("kernels/$op/${op}_cuda.cu")
  cpu_sources+=("kernels/$op/${op}_cpu.cc")
done
# Launch syntax -> ::cuemu::Launch(kernel, config...)(args), a case label staying in front;
# `extern __shared__ [__align__(n)] T name[];` -> T* name = the block's dynamic shared memory;
# `__shared__ T a[n], b[m];` (a static local) gets `::cuemu::PoisonShared(a, sizeof(a));` per array after it,
# so that each block starts with NaN shared memory, as it starts with garbage on the device.
rewrite() {
  perl -0pe 's/(^[ \t]*)([^;{}\n][^;{}]*?)\s*<<<(.*?)>>>\s*\(/$1::cuemu::Launch($2, $3)(/gms;
             s/::cuemu::Launch\((case [^:]*::\w+:)(\s*)/$1$2::cuemu::Launch(/g;
             s/extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?(\w[\w: ]*?)\s+(\w+)\[\];/$1* $2 = static_cast<$1*>(::cuemu::DynamicShared());/g;
             s{(^[ \t]*__shared__\s[^;]*;)}{my $d = $1; my $p = ""; $p .= " ::cuemu::PoisonShared($1, sizeof($1));" while $d =~ /(\w+)\s*\[/g; $d . $p}gme' "$1" >"$2"
  if grep -q '<<<' "$2"; then echo "run.sh: a launch in $1 was not rewritten" >&2; exit 1; fi
  if grep -q 'extern __shared__' "$2"; then echo "run.sh: dynamic shared memory in $1 was not rewritten" >&2; exit 1; fi
}
for f in "${cuda_sources[@]}"; do rewrite "$root/$f" "$work/src/$(basename "$f" .cu).cc"; done
rewrite "$root/kernels/cuda/norm_kernels.cuh" "$work/inc/kernels/cuda/norm_kernels.cuh"

flags=(-std=c++17 -O1 -g -march=x86-64-v3 -w)
[[ "${SANITIZE:-0}" == 1 ]] && flags+=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
emulated=(-I"$work/inc" -I"$here/fake" -I"$root")
host=(-I"$root")
jobs=()
compile() {  # output, include flags..., source (in the background, at most 2 at a time)
  local out="$1" src="${*: -1}"
  shift
  while (($(jobs -rp | wc -l) >= 2)); do wait -n; done
  g++ "${flags[@]}" "${@:1:$#-1}" -c "$src" -o "$out" &
  jobs+=($!)
}
for f in "${cuda_sources[@]}"; do
  compile "$work/obj/$(basename "$f" .cu).o" "${emulated[@]}" "$work/src/$(basename "$f" .cu).cc"
done
for f in "${cpu_sources[@]}"; do compile "$work/obj/$(basename "$f" .cc).o" "${host[@]}" "$root/$f"; done
for f in cuemu emulation_check attention_check; do compile "$work/obj/$f.o" "${host[@]}" "$here/$f.cc"; done
host_sources=(kernels/core/core.cc kernels/core/dispatch.cc base/thread_pool.cc base/check.cc
  kernels/cuda/caching_allocator.cc)
for f in "${host_sources[@]}"; do
  compile "$work/obj/host_$(basename "$f" .cc).o" "${host[@]}" "$root/$f"
done
for j in "${jobs[@]}"; do wait "$j"; done

absl_libs=()
shopt -s nullglob
for lib in /usr/lib/x86_64-linux-gnu/libabsl_*.so; do
  name="$(basename "$lib" .so)"
  absl_libs+=("-l${name#lib}")
done
if ((${#absl_libs[@]} == 0)); then
  echo "run.sh: no Abseil shared libraries in /usr/lib/x86_64-linux-gnu (Debian's libabsl-dev)" >&2
  exit 1
fi
g++ "${flags[@]}" "$work"/obj/*.o -o "$work/emulation_check" -lpthread "${absl_libs[@]}"
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:detect_stack_use_after_return=0}" "$work/emulation_check"
