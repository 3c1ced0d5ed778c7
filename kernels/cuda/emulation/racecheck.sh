#!/usr/bin/env bash
# The racecheck build's self-test (//kernels/cuda/emulation:racecheck_test, ~15 s): compiles the fiber
# emulator and racecheck_check.cc with ThreadSanitizer (RACECHECK=1, see cuemu.cc) and runs each of its
# kernels in a process of its own: every race_* kernel must draw a ThreadSanitizer race report, every clean_*
# kernel (the same kernel, synchronised) must run without one; a divergent __syncthreads must abort (any
# build, cuemu.cc). The real kernels under the racecheck build:
#   RACECHECK=1 kernels/cuda/emulation/run.sh     # every emulation check (~16 minutes; kernels/README.md)
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
for kernel in neighbour_read overwrite_while_read lane_exchange shared_accumulator async_copy_read; do
  for kind in race clean; do
    status=0
    TSAN_OPTIONS="halt_on_error=1:exitcode=66" "$work/racecheck_check" "${kind}_$kernel" >"$work/out" 2>&1 ||
      status=$?
    reported=0
    grep -q 'ThreadSanitizer: data race' "$work/out" && reported=1
    if [[ "$kind" == race && "$status" == 66 && "$reported" == 1 ]] ||
      [[ "$kind" == clean && "$status" == 0 && "$reported" == 0 ]]; then
      echo "ok   ${kind}_$kernel"
    else
      echo "FAIL ${kind}_$kernel: exit status $status, race report: $reported (expected: $([[ $kind == race ]] && echo one || echo none))"
      sed 's/^/     | /' "$work/out" | head -40
      failures=$((failures + 1))
    fi
  done
done
status=0
TSAN_OPTIONS="halt_on_error=1:exitcode=66" "$work/racecheck_check" race_shuffle_as_barrier >"$work/out" 2>&1 ||
  status=$?
if [[ "$status" == 66 ]] && grep -q 'ThreadSanitizer: data race' "$work/out"; then
  echo "ok   race_shuffle_as_barrier"
else
  echo "FAIL race_shuffle_as_barrier: exit status $status (expected a race report: a shuffle orders no memory)"
  sed 's/^/     | /' "$work/out" | head -40
  failures=$((failures + 1))
fi
if TSAN_OPTIONS="halt_on_error=1:exitcode=66" "$work/racecheck_check" clean_launch_order >"$work/out" 2>&1; then
  echo "ok   clean_launch_order"
else
  echo "FAIL clean_launch_order"
  sed 's/^/     | /' "$work/out" | head -40
  failures=$((failures + 1))
fi
status=0
"$work/racecheck_check" divergent_barrier >"$work/out" 2>&1 || status=$?
if [[ "$status" == 134 ]] && grep -q 'threads wait at different __syncthreads' "$work/out"; then
  echo "ok   divergent_barrier (aborts)"
else
  echo "FAIL divergent_barrier: exit status $status (expected an abort naming the two __syncthreads)"
  sed 's/^/     | /' "$work/out" | head -20
  failures=$((failures + 1))
fi
echo "$failures failures"
((failures == 0))
