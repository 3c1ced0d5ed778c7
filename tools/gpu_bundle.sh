#!/usr/bin/env bash
# Builds every GPU test and GPU benchmark (targets tagged "gpu") and copies them, with their runfiles
# (the data they read), into one folder that runs on a GPU machine without Bazel:
#
#   tools/gpu_bundle.sh [OUT_DIR]      # default: gpu_bundle/ at the repository root (git-ignored)
#   (on the GPU machine)  OUT_DIR/gpu_run.sh
#
# Builds for sm_90a and sm_80 (see bazel/lmf.bzl). Tests go to OUT_DIR/tests, binaries to OUT_DIR/bench.
# The gpu targets: every op's <op>_cuda_test in kernels/ (and kernels/cuda, kernels/memory), the CUDA
# benchmarks (kernels/matmul, kernels/attention, kernels/cuda) and those of other folders. Honours
# LMF_BAZEL_OUTPUT_BASE (binaries are taken from `bazel info bazel-bin`, not the .bazel/ links).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/gpu_bundle}"
cd "$root"

tests=$(./bazelw query 'attr(tags, "[\[ ,]gpu[,\]]", tests(//...))' 2>/dev/null)
bins=$(./bazelw query 'attr(tags, "[\[ ,]gpu[,\]]", kind("cc_binary", //...))' 2>/dev/null)
if [[ -z "$tests$bins" ]]; then
  echo "gpu_bundle: no targets tagged gpu" >&2
  exit 1
fi
echo "gpu_bundle: building $(echo $tests $bins | wc -w) targets" >&2
# shellcheck disable=SC2086
./bazelw build $tests $bins

bin_root="$(./bazelw info bazel-bin 2>/dev/null)"
[[ -d "$bin_root" ]] || { echo "gpu_bundle: bazel info bazel-bin gave no folder" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out/tests" "$out/bench"
copy_target() {  # label, destination folder
  local label="$1" dest="$2"
  local path="${label#//}"
  path="${path/://}"
  local bin="$bin_root/$path"
  [[ -x "$bin" ]] || { echo "gpu_bundle: $label built no executable at $bin" >&2; exit 1; }
  local name="${path//\//__}"
  cp -L "$bin" "$dest/$name"
  if [[ -d "$bin.runfiles" ]]; then
    cp -rL "$bin.runfiles" "$dest/$name.runfiles"
  fi
}
for t in $tests; do copy_target "$t" "$out/tests"; done
for b in $bins; do copy_target "$b" "$out/bench"; done
cp tools/gpu_run.sh "$out/gpu_run.sh"
# Reference scripts the benchmarks compare against (PyTorch peers), if any exist.
if compgen -G "tools/gpu_peers/*.py" >/dev/null; then
  mkdir -p "$out/peers" && cp tools/gpu_peers/*.py "$out/peers/"
fi
du -sh "$out" >&2
echo "gpu_bundle: wrote $out ($(ls "$out/tests" | grep -vc runfiles) tests, $(ls "$out/bench" | grep -vc runfiles) benchmarks)" >&2
