#!/usr/bin/env bash
# Runs clang-tidy (the checks in .clang-tidy) over the project's C++ sources, or the files given.
# Compile flags are the project's (C++17, x86-64-v3, repository root, generated headers under .bazel/bin
# (build first) and the CUDA headers on the include path).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
command -v clang-tidy >/dev/null || { echo "clang_tidy: install clang-tidy (apt-get install clang-tidy)" >&2; exit 1; }
if (($#)); then files=("$@"); else mapfile -t files < <(git ls-files '*.cc' | grep -v '^third_party/'); fi
gen="$root/.bazel/bin"
status=0
for f in "${files[@]}"; do
  clang-tidy --quiet "$f" -- -std=c++17 -march=x86-64-v3 -I. -I"$gen" -isystem /usr/include/eigen3 \
    -isystem /usr/local/cuda/include -DPCRE2_CODE_UNIT_WIDTH=8 2>/dev/null || status=1
done
exit $status
