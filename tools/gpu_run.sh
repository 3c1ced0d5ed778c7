#!/usr/bin/env bash
# Runs every test and benchmark of a GPU bundle (made by tools/gpu_bundle.sh) on a machine with a GPU and
# no Bazel, and prints one summary. Exit status 0 only if no test case failed.
#
#   ./gpu_run.sh [--tests-only|--bench-only]
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mode="${1:-all}"
export LMF_SHARED_DATA="${LMF_SHARED_DATA:-$here/shared_data}"
[[ -d "$LMF_SHARED_DATA" ]] || unset LMF_SHARED_DATA
log="${GPU_RUN_LOG:-$here/gpu_run.log}"
: >"$log"

passed=0 failed=0 skipped=0 broken=()
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'

if [[ "$mode" != --bench-only ]]; then
  for t in "$here"/tests/*; do
    [[ -f "$t" && -x "$t" ]] || continue
    name="$(basename "$t")"
    xml="$(mktemp)"
    start=$(date +%s.%N)
    (cd "$t.runfiles/lmforge" 2>/dev/null || cd "$here"; TEST_TMPDIR="$(mktemp -d)" "$t" --gtest_output="xml:$xml") >>"$log" 2>&1
    rc=$?
    secs=$(echo "$(date +%s.%N) - $start" | bc)
    # Count test cases from the XML report.
    p=$(grep -c '<testcase .*result="completed"' "$xml" 2>/dev/null || true)
    f=$(grep -c '<failure' "$xml" 2>/dev/null || true)
    s=$(grep -c '<skipped' "$xml" 2>/dev/null || true)
    p=$((p - f - s)); ((p < 0)) && p=0
    if [[ ! -s "$xml" ]] || { ((rc != 0)) && ((f == 0)); }; then
      f=$((f + 1)); broken+=("$name (exit $rc)")
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    printf '%-60s %3d passed %3d failed %3d skipped  %6.1fs\n' "$name" "$p" "$f" "$s" "$secs"
    rm -f "$xml"
  done
fi

if [[ "$mode" != --tests-only ]]; then
  for b in "$here"/bench/*; do
    [[ -f "$b" && -x "$b" ]] || continue
    echo "=== benchmark $(basename "$b")"
    (cd "$b.runfiles/lmforge" 2>/dev/null || cd "$here"; "$b") 2>&1 | tee -a "$log"
  done
fi

for x in "${broken[@]+"${broken[@]}"}"; do echo "broken: $x"; done
echo "full log: $log"
echo "gpu: $passed passed, $failed failed, $skipped skipped"
((failed == 0))
