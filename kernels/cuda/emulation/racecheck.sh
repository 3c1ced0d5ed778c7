#!/usr/bin/env bash
# The racecheck build's self-test (//kernels/cuda/emulation:racecheck_test, ~15 s): compiles the fiber
# emulator and racecheck_check.cc with ThreadSanitizer (RACECHECK=1, see cuemu.cc) and runs each of its
# kernels in a process of its own: every race_* kernel (within a block or between blocks) must draw a
# ThreadSanitizer race report, every clean_* kernel (the same kernel, synchronised) must run without one; a
# divergent __syncthreads must abort (any build, cuemu.cc). The real kernels under the racecheck build:
#   RACECHECK=1 ./bazelw run //kernels/cuda/emulation:emulation_test   # every check (~20 minutes; kernels/README.md)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
source "$here/common.sh"
RACECHECK=1
emulation_start racecheck.sh lmf_cuda_racecheck
if ! echo 'int main() { return 0; }' | g++ -fsanitize=thread -x c++ - -o "$work/probe" 2>/dev/null; then
  echo "racecheck.sh: SKIPPED: g++ cannot link ThreadSanitizer here (Debian's libtsan2)"
  exit 0
fi
compile "$work/obj/cuemu.o" -I"$root" "$here/cuemu.cc"
compile "$work/obj/racecheck_check.o" -I"$root" "$here/racecheck_check.cc"
compiles_done
g++ "${flags[@]}" "$work/obj/cuemu.o" "$work/obj/racecheck_check.o" -o "$work/racecheck_check"

failures=0
race='ThreadSanitizer: data race'
# expect CASE STATUS MUST_PRINT MUST_NOT_PRINT: runs one case of racecheck_check in its own process; ok when
# it ends with exit status STATUS (66: ThreadSanitizer reported, 134: abort) and its output holds MUST_PRINT
# and not MUST_NOT_PRINT (each skipped when empty).
expect() {
  local name="$1" want="$2" must="$3" must_not="$4" status=0
  TSAN_OPTIONS="halt_on_error=1:exitcode=66" "$work/racecheck_check" "$name" >"$work/out" 2>&1 || status=$?
  if [[ "$status" == "$want" ]] && { [[ -z "$must" ]] || grep -q "$must" "$work/out"; } &&
    { [[ -z "$must_not" ]] || ! grep -q "$must_not" "$work/out"; }; then
    echo "ok   $name"
  else
    echo "FAIL $name: exit status $status (expected $want${must:+, printing '$must'}${must_not:+, not '$must_not'})"
    sed 's/^/     | /' "$work/out" | head -40
    failures=$((failures + 1))
  fi
}
for kernel in neighbour_read overwrite_while_read lane_exchange shared_accumulator async_copy_read block_rows \
  shift_rows; do
  expect "race_$kernel" 66 "$race" ""
  expect "clean_$kernel" 0 "" "$race"
done
expect race_shuffle_as_barrier 66 "$race" ""  # a shuffle orders no memory
expect clean_launch_order 0 "" "$race"
expect divergent_barrier 134 'threads wait at different __syncthreads' ""
echo "$failures failures"
((failures == 0))
