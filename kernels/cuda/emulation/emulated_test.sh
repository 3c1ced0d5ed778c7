#!/usr/bin/env bash
# The test of every lmf_emulated_test (emulation.bzl): builds the programs its manifest names on the CPU
# emulation of CUDA and runs them. Started by the script the rule generates, from the test's runfiles (where
# `bazel test` and `bazel run` start it), as `emulated_test.sh MANIFEST [program arguments]`.
#
# The manifest (written by the rule from Bazel's graph; one item a line):
#   name LABEL          runtime device|host_memory       define NAME=VALUE (from the targets' CcInfo)
#   cuda FILE.cu        rewritten for the fiber emulator (common.sh), then compiled
#   host FILE.cc        compiled (host code and generated protobuf code alike)
#   rewrite FILE.cuh    a device header rewritten like the .cu files, found first (ahead of the tree)
#   program NAME FILE.cc...   a program's own sources (a GPU test's, or a check program's); every other
#                       object is linked into each program
#   link FLAG           the targets' link flags, as Bazel links them, less the CUDA libraries
#   env NAME=VALUE      set for the programs (e.g. LMF_EMULATED_DEVICES, the devices the fake runtime shows)
# Every file is compiled with the fake CUDA headers first (runtime device: cublaslt/fake, then fake/;
# host_memory: fake/; and nccl/fake, with the fake NCCL linked in, where a source includes <nccl.h>),
# largest first, two at a time; then each program is linked and run from here with a
# fresh TEST_TMPDIR and LMF_NUM_THREADS=2 (unless set), the arguments passed on. Fails if any program fails.
# Under `bazel test` the GoogleTest reports of the programs are merged into the test's one report.
# Environment: SANITIZE=1 (ASan, UBSan), RACECHECK=1 (ThreadSanitizer), EMULATION_WORK_DIR (kept, objects
# reused): see common.sh; pass them with --test_env=NAME under `bazel test`.
set -euo pipefail
manifest="$1"
shift
emu=kernels/cuda/emulation
source "$emu/common.sh"

name="" runtime="" defines=() cuda=() host=("$emu/cuemu.cc") rewrite=() programs=() link=() envs=()
while read -r kind item; do
  case "$kind" in
    name) name="$item" ;;
    runtime) runtime="$item" ;;
    define) defines+=("-D$item") ;;
    cuda) cuda+=("$item") ;;
    host) host+=("$item") ;;
    rewrite) rewrite+=("$item") ;;
    program) programs+=("$item") ;;
    link) link+=("$item") ;;
    env) envs+=("$item") ;;
    *) echo "emulated_test.sh: $manifest: unknown line '$kind $item'" >&2; exit 2 ;;
  esac
done <"$manifest"
case "$runtime" in
  device) fakes=(-I"$emu/cublaslt/fake" -I"$emu/fake"); host+=("$emu/cublaslt/fake_cublaslt.cc") ;;
  host_memory) fakes=(-I"$emu/fake") ;;
  *) echo "emulated_test.sh: $manifest: runtime '$runtime' (expected device or host_memory)" >&2; exit 2 ;;
esac
if grep -qs '^#include <nccl.h>' "${host[@]}" $(for p in "${programs[@]}"; do echo "${p#* }"; done); then
  fakes=(-I"$emu/nccl/fake" "${fakes[@]}")
  host+=("$emu/nccl/fake_nccl.cc" "$emu/nccl/fake_nccl_wire.cc")
fi
for f in "${cuda[@]}" "${host[@]}" "${rewrite[@]}" $(for p in "${programs[@]}"; do echo "${p#* }"; done); do
  [[ -f "$f" ]] || { echo "emulated_test.sh: $f (in $manifest) is missing from the runfiles" >&2; exit 2; }
done
emulation_start "$name" lmf_emulation

# The fakes come before the rewritten headers, which come before the tree: the fake mma.cuh (kernels/cuda) and
# wgmma.cuh (kernels/attention) replace the real ones.
emulated=("${defines[@]}" "${fakes[@]}" -I"$work/inc" -I.)
for f in "${rewrite[@]}"; do emulation_rewrite "$f" "$work/inc/$f"; done
units=()  # "OBJECT SOURCE"; objects keep their source's path, under obj/
for f in "${cuda[@]}"; do
  emulation_rewrite "$f" "$work/src/$f.cc"
  units+=("$work/obj/$f.o $work/src/$f.cc")
done
for f in "${host[@]}"; do units+=("$work/obj/$f.o $f"); done
libraries=()
for u in "${units[@]}"; do libraries+=("${u%% *}"); done
for p in "${programs[@]}"; do
  for f in ${p#* }; do units+=("$work/obj/$f.o $f"); done
done
# Largest source first, so that the longest compiles do not start last.
while read -r _ object source; do
  compile "$object" "${emulated[@]}" "$source"
done < <(for u in "${units[@]}"; do echo "$(stat -L -c %s "${u#* }") $u"; done | sort -rn)
compiles_done

rm -rf "$work/test_tmp" "$work/reports"
mkdir -p "$work/test_tmp" "$work/reports"
status=0
for p in "${programs[@]}"; do
  program="${p%% *}"
  objects=()
  for f in ${p#* }; do objects+=("$work/obj/$f.o"); done
  echo "=== $program (emulated CUDA)"
  g++ "${flags[@]}" "${objects[@]}" "${libraries[@]}" -o "$work/$program" "${link[@]}"
  env "${envs[@]}" ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:detect_stack_use_after_return=0}" \
    TEST_TMPDIR="$work/test_tmp" LMF_NUM_THREADS="${LMF_NUM_THREADS:-2}" \
    XML_OUTPUT_FILE="$work/reports/$program.xml" "$work/$program" "$@" || {
    status=$?
    # A program that died (or failed outside its test cases) fails in the report too.
    grep -qs '<failure' "$work/reports/$program.xml" || cat >"$work/reports/$program.xml" <<EOF2
<testsuites>
<testsuite name="$program" tests="1" failures="1"><testcase name="$program" status="run">
<failure message="exited with status $status (see the test log)"></failure></testcase>
</testsuite>
</testsuites>
EOF2
  }
done

# Under `bazel test`: one report holding every program's GoogleTest suites (check programs write none unless
# they fail; Bazel then writes its own from the exit status).
reports=("$work"/reports/*.xml)
if [[ -n "${XML_OUTPUT_FILE:-}" && -f "${reports[0]}" ]]; then
  {
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo '<testsuites>'
    sed -n '/<testsuite /,/<\/testsuite>/p' "${reports[@]}"
    echo '</testsuites>'
  } >"$XML_OUTPUT_FILE"
fi
exit "$status"
