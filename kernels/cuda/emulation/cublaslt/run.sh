#!/usr/bin/env bash
# Runs the cuBLASLt GEMM path of kernels/matmul (matmul_cuda.cc, with cuda_context.cc and the kernels it
# launches: column_sum_cuda.cu for dbias, activations_cuda.cu for the unfused GELU) on the CPU against the CPU
# GEMM (matmul_cpu.cc on oneDNN): compiles them with g++ against this folder's fake cuBLASLt and CUDA runtime
# (fake/; fake_cublaslt.cc follows the cublasLt.h documentation), the kernels' launches rewritten as ../run.sh
# does but into fake/sequential_launch.h (these kernels have no barriers), and runs
# cublaslt_check.cc. It checks the mapping of row-major MatmulParams onto cuBLASLt's column-major API, not
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
if ! command -v g++ >/dev/null; then
  echo "cublaslt/run.sh: SKIPPED: no g++ on PATH (the emulation compiles matmul_cuda.cc with the host g++)"
  exit 0
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
if [[ -n "${EMULATION_WORK_DIR:-}" ]]; then
  work="$EMULATION_WORK_DIR"  # kept: the rewritten sources and the binary
else
  work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/lmf_cublaslt_emulation.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work/src" "$work/obj"

rewrite() {  # launch syntax -> ::seqlaunch::Launch(kernel, config...)(args), as ../run.sh
  perl -0pe 's/(^[ \t]*)([^;{}\n][^;{}]*?)\s*<<<(.*?)>>>\s*\(/$1::seqlaunch::Launch($2, $3)(/gms;
             s/::seqlaunch::Launch\((case [^:]*::\w+:)(\s*)/$1$2::seqlaunch::Launch(/g' "$1" >"$2"
  if grep -q '<<<' "$2"; then echo "cublaslt/run.sh: a launch in $1 was not rewritten" >&2; exit 1; fi
}
rewrite "$root/kernels/matmul/column_sum_cuda.cu" "$work/src/column_sum_cuda.cc"
rewrite "$root/kernels/activations/activations_cuda.cu" "$work/src/activations_cuda.cc"

flags=(-std=c++17 -O1 -g -march=x86-64-v3 -w)
[[ "${SANITIZE:-0}" == 1 ]] && flags+=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
emulated=(-I"$here/fake" -I"$here/../fake" -I"$root")  # this folder's runtime and cuBLASLt fakes first; bf16 from ../fake
host=(-I"$root")
jobs=()
compile() {  # output, include flags..., source (in the background, at most 2 at a time)
  local out="$1" src="${*: -1}"
  shift
  while (($(jobs -rp | wc -l) >= 2)); do wait -n; done
  g++ "${flags[@]}" "${@:1:$#-1}" -c "$src" -o "$out" &
  jobs+=($!)
}
# Emulated: the CUDA backend's host code and kernels, the fake cuBLASLt, the check.
compile "$work/obj/matmul_cuda.o" "${emulated[@]}" "$root/kernels/matmul/matmul_cuda.cc"
compile "$work/obj/cuda_context.o" "${emulated[@]}" "$root/kernels/cuda/cuda_context.cc"
compile "$work/obj/column_sum_cuda.o" "${emulated[@]}" "$work/src/column_sum_cuda.cc"
compile "$work/obj/activations_cuda.o" "${emulated[@]}" "$work/src/activations_cuda.cc"
compile "$work/obj/fake_cublaslt.o" "${emulated[@]}" "$here/fake_cublaslt.cc"
compile "$work/obj/cublaslt_check.o" "${emulated[@]}" "$here/cublaslt_check.cc"
# Host: the CPU reference and what both sides link.
compile "$work/obj/matmul_cpu.o" "${host[@]}" -fopenmp "$root/kernels/matmul/matmul_cpu.cc"
compile "$work/obj/activations_cpu.o" "${host[@]}" "$root/kernels/activations/activations_cpu.cc"
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
  echo "cublaslt/run.sh: no Abseil shared libraries in /usr/lib/x86_64-linux-gnu (Debian's libabsl-dev)" >&2
  exit 1
fi
g++ "${flags[@]}" "$work"/obj/*.o -o "$work/cublaslt_check" -fopenmp -ldnnl -lpthread "${absl_libs[@]}"
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}" LMF_NUM_THREADS="${LMF_NUM_THREADS:-2}" "$work/cublaslt_check"
