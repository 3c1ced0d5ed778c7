#!/usr/bin/env bash
# Runs GPU tests (the gpu-tagged *_cuda_test.cc files, unchanged) on the CPU through the CUDA emulation of
# kernels/cuda/emulation: every kernel's .cu rewritten for the fiber emulator (cuemu.h, its fake headers and
# tensor-core instructions), the CUDA runtime and cuBLASLt replaced by the fakes of
# kernels/cuda/emulation/cublaslt/fake (host memory; work happens at once), the protos generated with the
# system protoc. So a GPU test's own logic and the host code it drives (model, optimizer, trainer,
# checkpoints on the device path) run before any GPU time is spent. Device memory is fenced off from the
# host as on a GPU (the fake runtime's header says how): host code that dereferences a device pointer
# faults. What it cannot see: the GPU's arithmetic, stream ordering, speed, and races (unless RACECHECK=1:
# ThreadSanitizer on the emulated threads, kernels/README.md); and CUDA events measure only the fake
# cuBLASLt's emulated algorithm times plus 1 us per event record (tests of timings pass, their figures mean
# nothing).
# CI runs the model's two GPU tests this way (//model/emulation:model_emulation_test); this script is for
# any GPU test by hand, e.g. before a GPU session. Emulated kernels are slow: the trainer's GPU test takes
# about 10 minutes per 60-step training run on 2 cores.
#
#   tools/emulation/gpu_test.sh experiments/trainer/trainer_cuda_test.cc --gtest_filter='*Bf16*'
#   tools/emulation/gpu_test.sh kernels/matmul/matmul_cuda_test.cc kernels/rope/rope_cuda_test.cc
#   EMULATION_WORK_DIR=/tmp/emu tools/emulation/gpu_test.sh ...   # keeps the objects and the binaries there
#
# The leading arguments ending in .cc are the tests; the rest go to each test binary. It compiles every
# source of the lists below that exists (~90 files two at a time, ~5 minutes; in a Bazel sandbox only the
# files the test declares exist, so a test that needs no trainer compiles none of it), links each test
# with gtest_main, runs them from the checkout root with TEST_TMPDIR set, and fails if any fails.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
emu="$root/kernels/cuda/emulation"
tests=()
while (($#)) && [[ "$1" == *.cc ]]; do
  [[ -f "$root/$1" ]] || { echo "gpu_test.sh: no file $root/$1" >&2; exit 2; }
  tests+=("$1")
  shift
done
((${#tests[@]})) || { echo "usage: gpu_test.sh path/to/some_cuda_test.cc... [test arguments]" >&2; exit 2; }
source "$emu/common.sh"
emulation_start tools/emulation/gpu_test.sh lmf_gpu_test_emulation

cd "$root"
mkdir -p "$work/gen" "$work/tests"
protos=(config/*.proto experiments/checkpoint/*.proto experiments/metrics/*.proto)
if [[ -f "${protos[0]}" ]]; then
  command -v protoc >/dev/null || { echo "gpu_test.sh: needs protoc (Debian's protobuf-compiler)" >&2; exit 2; }
  protoc -I. --cpp_out="$work/gen" "${protos[@]}"
fi
cuda_sources=(kernels/*/*_cuda.cu)
for f in "${cuda_sources[@]}"; do emulation_rewrite "$root/$f" "$work/src/$(basename "$f" .cu).cc"; done
emulation_rewrite "$root/kernels/cuda/norm_kernels.cuh" "$work/inc/kernels/cuda/norm_kernels.cuh"

# Everything sees the CUDA backend (LMF_WITH_CUDA) through the fakes: the cuBLASLt emulation's runtime and
# cuBLASLt first, then the kernel emulation's bf16, cub and tensor-core fakes.
emulated=(-DLMF_WITH_CUDA=1 -I"$work/inc" -I"$work/gen" -I"$emu/cublaslt/fake" -I"$emu/fake" -I"$root")
host_sources=(base/check.cc base/file.cc base/json.cc base/subprocess.cc base/thread_pool.cc
  distributed/gloo_group.cc kernels/core/core.cc kernels/core/dispatch.cc kernels/cpu/peak_flops.cc kernels/cuda/caching_allocator.cc kernels/cuda/cuda_context.cc
  kernels/profile/op_profile.cc kernels/profile/cpu_op_profiler.cc kernels/cuda/op_profiler.cc kernels/cuda/gpu_test_util.cc
  kernels/matmul/matmul_cuda.cc kernels/memory/memory_cuda.cc kernels/testing/compare.cc
  kernels/*/*_cpu.cc model/accounting/accounting.cc model/accounting/training_memory.cc model/config/config.cc
  model/language_model/init.cc model/language_model/language_model.cc model/language_model/language_model_decode.cc model/layers/*.cc model/layers/*/*.cc
  model/optimizer/adamw.cc model/training/step_strategy.cc distributed/data_parallel_step.cc
  tokenizer/pretokenize.cc tokenizer/token_file.cc tokenizer/tokenizer.cc tokenizer/tokenizer_file.cc
  config/errors.cc config/loader.cc config/model_conversion.cc config/overrides.cc config/run_length.cc
  config/validation.cc
  experiments/checkpoint/checkpoint.cc experiments/checkpoint/safetensors.cc
  experiments/crc32c/crc32c.cc experiments/data/token_batches.cc experiments/metrics/metrics_log.cc
  experiments/metrics/tensorboard_writer.cc experiments/model_loading.cc experiments/schedule/lr_schedule.cc
  experiments/trainer/data_parallel.cc experiments/trainer/memory_check.cc
  experiments/trainer/optimizer.cc experiments/trainer/stop_signals.cc experiments/trainer/trainer.cc
  experiments/trainer/training_device.cc experiments/trainer/weights.cc)
for f in "${cuda_sources[@]}"; do
  compile "$work/obj/$(basename "$f" .cu).o" "${emulated[@]}" "$work/src/$(basename "$f" .cu).cc"
done
for f in "${host_sources[@]}"; do
  [[ -f "$f" && "$f" != *_test.cc ]] || continue
  compile "$work/obj/$(echo "$f" | tr / _ | sed 's/\.cc$//').o" "${emulated[@]}" -fopenmp "$root/$f"
done
shopt -s nullglob
for f in "$work"/gen/config/*.pb.cc "$work"/gen/experiments/*/*.pb.cc; do compile "$work/obj/pb_$(basename "$f" .cc).o" -I"$work/gen" "$f"; done
compile "$work/obj/fake_cublaslt.o" "${emulated[@]}" "$emu/cublaslt/fake_cublaslt.cc"
compile "$work/obj/cuemu.o" -I"$root" "$emu/cuemu.cc"
for t in "${tests[@]}"; do compile "$work/tests/$(basename "$t" .cc).o" "${emulated[@]}" "$root/$t"; done
compiles_done
libs=(-fopenmp -ldnnl -lgloo -pthread -lgtest_main -lgtest)
[[ -f "${protos[0]}" ]] && libs+=(-lprotobuf -lpcre2-8)
# A fresh TEST_TMPDIR per run, as Bazel gives: a kept EMULATION_WORK_DIR's last run folders would make the
# trainer's tests find "already holds a run".
rm -rf "$work/test_tmp"
mkdir -p "$work/test_tmp"
status=0
for t in "${tests[@]}"; do
  name="$(basename "$t" .cc)"
  echo "=== $name (emulated CUDA)"
  emulation_link "$work/$name" "$work/tests/$name.o" "${libs[@]}"
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}" TEST_TMPDIR="$work/test_tmp" \
    LMF_NUM_THREADS="${LMF_NUM_THREADS:-2}" "$work/$name" "$@" || status=1
done
exit "$status"
