#!/usr/bin/env bash
# Runs the whole model's CUDA path on the CPU: model/language_model's GPU tests (language_model_cuda_test.cc
# and language_model_decode_cuda_test.cc, unchanged) through tools/emulation/gpu_test.sh, i.e. against the
# CUDA emulation of kernels/cuda/emulation (every kernel rewritten for the fiber emulator, the CUDA runtime
# and cuBLASLt replaced by fakes). So the model's device code paths -- bf16 compute copies and fp32 master
# weights, device buffers, dispatch, the caching allocator, the KV cache -- run end to end and meet the
# tests' comparisons with the fp32 CPU model. What it cannot see: the GPU's arithmetic, stream ordering and
# intra-warp races. CI runs it as //model/emulation:model_emulation_test (its BUILD declares exactly the
# sources the tool compiles here); where g++ is missing it says so and passes.
#
#   model/emulation/run.sh                          # ~45 files, then the two test binaries (~4 minutes)
#   model/emulation/run.sh --gtest_filter='*Bf16*'   # a subset
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exec "$root/tools/emulation/gpu_test.sh" model/language_model/language_model_cuda_test.cc \
  model/language_model/language_model_decode_cuda_test.cc "$@"
