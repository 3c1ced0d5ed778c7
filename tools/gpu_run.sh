#!/usr/bin/env bash
# Runs a GPU bundle (made by tools/gpu_bundle.sh) on the device machine, which has a GPU, CUDA 13 and
# python3 with PyTorch but no Bazel and none of the build machine's Debian libraries. Within a total time
# budget, in this order: an `ldd -r` check of every binary (each unresolved library or symbol on one line),
# the CUDA versions (cuda_info), the attention kernels' SASS instruction counts (cuobjdump), every gpu test
# (per-test timeout), the benchmarks in the order of importance (end-to-end training step, attention, GEMM,
# memory-bound), then compute-sanitizer memcheck and racecheck on a filtered attention test and one
# memory-bound test. A step that no longer fits in what is left of the budget is skipped and named.
#
#   ./gpu_run.sh [--budget SECONDS] [--tests-only|--bench-only] [--no-sanitizer]
#
# Library paths: only our binaries get LD_LIBRARY_PATH (set per invocation): the bundle's lib/, then the
# device's CUDA library folders, then whatever LD_LIBRARY_PATH the device already had. The bundle's
# libstdc++/libgcc_s (lib/cxx/) are added only if the device's own libstdc++ lacks a GLIBCXX version our
# binaries need. The PyTorch peers that the benchmarks start (`python3 ...`) run through a small python3
# shim that restores the device's original environment, so no bundled library reaches them.
#
# Logs: full logs under $OUT if set (the device tool returns it), else under <bundle>/logs: env, ldd, sass,
# tests, bench, sanitizer, summary (.log/.txt, each cut to 16 MB). The short summary table is printed last. Exit
# status 0 only if nvidia-smi shows a GPU, every test that ran passed, every benchmark and sanitizer run
# that ran succeeded, no step was skipped for time and no library was unresolved.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
start_s=$(date +%s)

budget=510
mode=all
sanitizer=1
while (($#)); do
  case "$1" in
    --budget) budget="${2:?--budget needs seconds}"; shift 2 ;;
    --budget=*) budget="${1#--budget=}"; shift ;;
    --tests-only|--bench-only) mode="$1"; shift ;;
    --no-sanitizer) sanitizer=0; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ {print; next} NR > 1 {exit}' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_run: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$budget" =~ ^[0-9]+$ ]] || { echo "gpu_run: --budget must be whole seconds, got '$budget'" >&2; exit 2; }

logdir="${OUT:-$here/logs}"
mkdir -p "$logdir"
env_log="$logdir/env.log" ldd_log="$logdir/ldd.log" test_log="$logdir/tests.log"
bench_log="$logdir/bench.log" san_log="$logdir/sanitizer.log" summary="$logdir/summary.txt"
: >"$env_log"; : >"$ldd_log"; : >"$test_log"; : >"$bench_log"; : >"$san_log"; : >"$summary"
work="$(mktemp -d /tmp/gpu_run.XXXXXX)"
# nvidia-smi and compute-sanitizer where the PATH lacks them.
PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin:${CUDA_HOME:-/usr/local/cuda}/compute-sanitizer:/usr/local/nvidia/bin"

elapsed() { echo $(($(date +%s) - start_s)); }
left() { echo $((budget - $(elapsed))); }
rows=()      # summary table rows
problems=0   # anything that makes the exit status non-zero
row() { rows+=("$(printf '%-40s %s' "$1" "$2")"); echo "${rows[-1]}"; }  # also printed as progress

# ---- environment: the device's CUDA libraries, its libstdc++, its python3 --------------------------------
orig_ld="${LD_LIBRARY_PATH:-}"
orig_ld_set=${LD_LIBRARY_PATH+1}
toolkit_dirs=() wheel_dirs=()
add_dir() {  # array name, folder: adds the folder if it holds shared libraries
  [[ -d "$2" ]] && compgen -G "$2/lib*.so*" >/dev/null && eval "$1+=(\"\$(cd \"\$2\" && pwd -P)\")"
}
for d in "${CUDA_HOME:-/usr/local/cuda}"/lib64 "${CUDA_HOME:-/usr/local/cuda}"/lib \
  "${CUDA_HOME:-/usr/local/cuda}"/targets/x86_64-linux/lib; do
  add_dir toolkit_dirs "$d"
done
real_python="$(command -v python3 || true)"
if [[ -n "$real_python" ]]; then
  # The pip wheels' libraries (nvidia-nccl-cu13, nvidia-cublas, ...) under the python's site-packages.
  while IFS= read -r d; do add_dir wheel_dirs "$d"; done < <(timeout 30 "$real_python" - 2>/dev/null <<'EOF'
import glob, os, site
for r in site.getsitepackages() + [site.getusersitepackages()]:
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib"))):
        print(d)
EOF
  )
fi
join_dirs() {  # folders -> a:b:c, each once, in order
  local -A seen=()
  local d out=""
  for d in "$@"; do [[ -n "${seen[$d]:-}" ]] || { seen[$d]=1; out="${out:+$out:}$d"; }; done
  echo "$out"
}
# Two orders: the toolkit's libraries first (default), or the wheels' first (used only where the toolkit's
# leave more libraries or symbols unresolved, e.g. a libcublas older than our headers, or no libnccl).
cuda_path_toolkit="$(join_dirs "${toolkit_dirs[@]+"${toolkit_dirs[@]}"}" "${wheel_dirs[@]+"${wheel_dirs[@]}"}")"
cuda_path_wheels="$(join_dirs "${wheel_dirs[@]+"${wheel_dirs[@]}"}" "${toolkit_dirs[@]+"${toolkit_dirs[@]}"}")"

# libstdc++: the device's own unless it lacks a GLIBCXX/CXXABI version our binaries need (lib/REQUIRES).
cxx_note="device's own"
need_cxx="$(sed -n 's/^GLIBCXX //p' "$here/lib/REQUIRES" 2>/dev/null)"
need_glibc="$(sed -n 's/^GLIBC //p' "$here/lib/REQUIRES" 2>/dev/null)"
sys_cxx="$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')"
[[ -z "$sys_cxx" ]] && for f in /usr/lib/x86_64-linux-gnu/libstdc++.so.6 /usr/lib64/libstdc++.so.6; do
  [[ -e "$f" ]] && { sys_cxx="$f"; break; }
done
use_bundled_cxx=0
if [[ -z "$sys_cxx" ]]; then
  use_bundled_cxx=1 cxx_note="bundled (the device has no libstdc++.so.6)"
elif [[ -n "$need_cxx" ]] && ! grep -qa "$need_cxx" "$sys_cxx"; then
  use_bundled_cxx=1 cxx_note="bundled (the device's $sys_cxx lacks $need_cxx)"
fi
ld_path_with() {  # CUDA folders -> our binaries' LD_LIBRARY_PATH
  local p="$here/lib"
  ((use_bundled_cxx)) && p="$p:$here/lib/cxx"
  [[ -n "$1" ]] && p="$p:$1"
  [[ -n "$orig_ld" ]] && p="$p:$orig_ld"
  echo "$p"
}
binaries=()
for f in "$here"/tests/* "$here"/bench/*; do [[ -f "$f" && -x "$f" ]] && binaries+=("$f"); done
count_unresolved() {  # LD_LIBRARY_PATH -> lines of unresolved libraries and symbols over all binaries
  local b n=0
  for b in "${binaries[@]+"${binaries[@]}"}"; do
    n=$((n + $(LD_LIBRARY_PATH="$1" ldd -r "$b" 2>&1 | grep -cE 'not found|undefined symbol|not a dynamic')))
  done
  echo "$n"
}
cuda_path="$cuda_path_toolkit" cuda_order="toolkit first"
if [[ "$cuda_path_wheels" != "$cuda_path_toolkit" ]]; then
  n_toolkit="$(count_unresolved "$(ld_path_with "$cuda_path_toolkit")")"
  if ((n_toolkit)) && (($(count_unresolved "$(ld_path_with "$cuda_path_wheels")") < n_toolkit)); then
    cuda_path="$cuda_path_wheels" cuda_order="python wheels first: the toolkit's left $n_toolkit unresolved"
  fi
fi
ours_ld="$(ld_path_with "$cuda_path")"

# The python3 shim our benchmarks find first on PATH: the device's python3 with the device's environment.
mkdir -p "$work/peerbin"
if [[ -n "$real_python" ]]; then
  if [[ -n "$orig_ld_set" ]]; then restore="export LD_LIBRARY_PATH=$(printf '%q' "$orig_ld")"
  else restore="unset LD_LIBRARY_PATH"; fi
  printf '#!/usr/bin/env bash\n%s\nexec %q "$@"\n' "$restore" "$real_python" >"$work/peerbin/python3"
  chmod +x "$work/peerbin/python3"
fi
ours_path="$work/peerbin:$PATH"
# Thread pools (the CPU reference runs inside the gpu tests) sized by the cores we may use, at most 16 (the
# device's count; hardware_concurrency can report more than the container may run).
ours_threads="$(nproc 2>/dev/null || echo 16)"
((ours_threads > 16)) && ours_threads=16
ours() { env LD_LIBRARY_PATH="$ours_ld" PATH="$ours_path" LMF_NUM_THREADS="$ours_threads" "$@"; }
# Line-buffered output where coreutils' stdbuf exists, so a step killed by its timeout keeps every line it
# printed (stdout to a file is otherwise block-buffered and lost with the process).
linebuf=()
command -v stdbuf >/dev/null 2>&1 && linebuf=(stdbuf -oL -eL)

{
  echo "date: $(date -u '+%F %T UTC')  host: $(uname -srm)"
  grep -h '^PRETTY_NAME=' /etc/os-release 2>/dev/null
  echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null) (binaries need $need_glibc)"
  echo "libstdc++: ${sys_cxx:-none} -> using $cxx_note (binaries need $need_cxx)"
  echo "CUDA library folders ($cuda_order): ${cuda_path:-none found}"
  echo "LD_LIBRARY_PATH for our binaries: $ours_ld"
  echo "python3: ${real_python:-none}"
  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>&1
  command -v nvcc >/dev/null && timeout 20 nvcc --version | tail -1
  command -v compute-sanitizer >/dev/null && timeout 20 compute-sanitizer --version | tail -1
  [[ -n "$real_python" ]] && timeout 30 env PATH="$PATH" "$real_python" -c \
    'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")' 2>&1 | tail -1
} >"$env_log" 2>&1
gpu_name="$(timeout 20 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
cat "$env_log"

# ---- ldd: every binary's libraries must resolve -------------------------------------------------------------
declare -A unresolved=()
n_unresolved=0
for b in "${binaries[@]}"; do
  name="${b#"$here"/}"
  out="$(ours ldd -r "$b" 2>&1)"  # -r: also every symbol must resolve (a CUDA library older than our headers)
  { echo "== $name"; echo "$out"; } >>"$ldd_log"
  bad="$(grep -E 'not found|undefined symbol|not a dynamic' <<<"$out" | sed 's/^[[:space:]]*//')"
  if [[ -n "$bad" ]]; then
    unresolved[$b]=1
    # Each missing library on its own line; missing symbols counted, with the first one named.
    while IFS= read -r l; do
      [[ "$l" == *"undefined symbol"* ]] || echo "unresolved: $name: $l"
      n_unresolved=$((n_unresolved + 1))
    done <<<"$bad"
    n_sym="$(grep -c 'undefined symbol' <<<"$bad")"
    ((n_sym)) && echo "unresolved: $name: $n_sym undefined symbols, first: $(grep -m1 'undefined symbol' <<<"$bad" | cut -f1)"
  fi
done
# Where the CUDA libraries came from (one binary is enough: they all take them from the same folders).
grep -hE '^[[:space:]]*lib(cudart|cublas|cublasLt|nccl|cuda)\.so[^ ]* => ' "$ldd_log" | sed 's/^[[:space:]]*//; s/ (0x.*//' | sort -u
# The CUDA runtime, cuBLAS(Lt) and NCCL versions our headers expect against those loaded, and the driver.
if [[ -x "$here/bench/tools__cuda_info__cuda_info" && -z "${unresolved[$here/bench/tools__cuda_info__cuda_info]:-}" ]]; then
  ours timeout 30 "$here/bench/tools__cuda_info__cuda_info" 2>&1 | tee -a "$env_log"
fi
if ! command -v ldd >/dev/null; then
  row "ldd" "NOT CHECKED: no ldd on this machine (binaries that miss a library fail at start)"
elif ((n_unresolved)); then
  problems=1
  row "ldd" "$n_unresolved unresolved in ${#unresolved[@]} binaries (those are skipped; see ldd.log)"
else
  row "ldd" "all ${#binaries[@]} binaries resolve"
fi

# ---- SASS: which instructions the attention kernels compiled to ------------------------------------------
# cuobjdump (from the device's toolkit; the build machine has none) over the attention test binary; per kernel
# and architecture the counts of HMMA (mma.sync), HGMMA (wgmma), LDSM (ldmatrix), LDGSTS (cp.async) and
# LDL/STL (local memory: spills, or register arrays indexed at run time) go to sass.txt, and one summary row
# for the sm_90a code. Informational: it never fails the run.
sass_log="$logdir/sass.txt"
: >"$sass_log"
sass_awk=$(cat <<'AWK'
function flush() {
  if (fn != "" && fn ~ pattern)
    printf "%-8s %6d %6d %6d %6d %6d %6d  %s\n", arch, c["HMMA"], c["HGMMA"], c["LDSM"], c["LDGSTS"], c["LDL"], c["STL"], fn
  delete c
  fn = ""
}
BEGIN { printf "%-8s %6s %6s %6s %6s %6s %6s  %s\n", "arch", "HMMA", "HGMMA", "LDSM", "LDGSTS", "LDL", "STL", "kernel" }
/^[[:space:]]*arch = / { flush(); arch = $3; next }
/^[[:space:]]*Function : / { flush(); fn = $3; next }
/^[[:space:]]*\/\*[0-9a-f]+\*\// {
  i = 2
  if ($i == "{") i++
  if ($i ~ /^@/) i++
  op = $i
  sub(/\..*/, "", op)
  sub(/;$/, "", op)
  if (op == "HMMA" || op == "HGMMA" || op == "LDSM" || op == "LDGSTS" || op == "LDL" || op == "STL") c[op]++
}
END { flush() }
AWK
)
att_bin="$here/tests/kernels__attention__attention_cuda_test"
if ! command -v cuobjdump >/dev/null; then
  row "sass attention" "NOT RUN: no cuobjdump on PATH"
elif [[ ! -x "$att_bin" ]]; then
  row "sass attention" "NOT RUN: attention_cuda_test missing from the bundle"
elif ! timeout 60 cuobjdump -sass "$att_bin" >"$work/attention.sass" 2>&1; then
  row "sass attention" "cuobjdump failed: $(tail -1 "$work/attention.sass")"
else
  awk -v pattern='Flash|DotRows' "$sass_awk" "$work/attention.sass" >"$work/sass_counts.txt"
  if command -v c++filt >/dev/null; then
    # Demangled and shortened: "sm_90a ... FlashForwardKernel<64, true, false>".
    while IFS= read -r l; do
      name="${l##* }"
      printf '%s %s\n' "${l% *}" "$(c++filt "$name" | sed 's/^void //; s/lmf::kernels::cuda::(anonymous namespace):://; s/(.*//')"
    done <"$work/sass_counts.txt" >"$sass_log"
  else
    cp "$work/sass_counts.txt" "$sass_log"
  fi
  cat "$sass_log"
  row "sass attention" "$(awk 'NR > 1 && $1 == "sm_90a" {n++; h += $2 > 0; w += $3 > 0; l += $4 > 0; g += $5 > 0;
    m += ($6 + $7) > 0} END {printf "sm_90a: %d kernels; HMMA in %d, HGMMA in %d, LDSM in %d, LDGSTS in %d, local memory in %d (sass.txt)", n, h, w, l, g, m}' "$sass_log")"
fi

# ---- running one step ----------------------------------------------------------------------------------------
# run_step LOG TIMEOUT DIR CMD...: runs CMD in DIR with our library path and TEST_* variables, appending
# its output to LOG; sets step_rc and step_secs. rc 124/137: timed out.
run_step() {
  local log="$1" limit="$2" dir="$3"
  shift 3
  local t0 t1
  t0=$(date +%s.%N)
  (cd "$dir" && ours TEST_TMPDIR="$(mktemp -d "$work/tmp.XXXXXX")" timeout -k 5 "$limit" "${linebuf[@]}" "$@") >>"$log" 2>&1
  step_rc=$?
  t1=$(date +%s.%N)
  step_secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
}
# fits NOMINAL MIN PHASE_END: prints the timeout to use (NOMINAL capped by what is left of the phase),
# or nothing if less than MIN is left.
fits() {
  local nominal="$1" min="$2" phase_end="$3" t
  t=$((phase_end - $(elapsed)))
  ((t > nominal)) && t=$nominal
  ((t >= min)) && echo "$t"
}
runfiles_dir() {  # where a test or benchmark starts: its runfiles' workspace folder, else a scratch folder
  local b="$1" name
  name="$(basename "$b")"
  if [[ -d "$here/runfiles/$name/lmforge" ]]; then echo "$here/runfiles/$name/lmforge"; else echo "$work"; fi
}

# Phase ends (seconds since start): tests until 40% of the budget, benchmarks until 85%, sanitizers until
# the end; time a phase leaves unused goes to the next.
tests_end=$((budget * 40 / 100))
bench_end=$((budget * 85 / 100))
san_end=$((budget - 5))

# ---- tests -------------------------------------------------------------------------------------------------
# Test binaries run in parts: "binary label gtest-filter" runs the cases that match, one part per line, in
# this order; a binary not listed runs whole. Cases of kernels that have never run on a GPU go in a part of
# their own, after the rest, so a hang or crash in one of them (it ends its process) cannot hide the other
# cases' results.
test_parts=(
  "kernels__attention__attention_cuda_test fa2 -*Wgmma*"
  "kernels__attention__attention_cuda_test wgmma *Wgmma*"
)
t_pass=0 t_fail=0 t_skip=0
if [[ "$mode" != --bench-only ]]; then
  echo "=== tests (phase ends at ${tests_end}s)"
  runs=()
  for t in "$here"/tests/*; do
    [[ -f "$t" && -x "$t" ]] || continue
    name="$(basename "$t")" parts=0
    for p in "${test_parts[@]}"; do
      read -r pn plabel pfilter <<<"$p"
      [[ "$pn" == "$name" ]] && { runs+=("$t $plabel $pfilter"); parts=1; }
    done
    ((parts)) || runs+=("$t - *")
  done
  for r in "${runs[@]}"; do
    read -r t label filter <<<"$r"
    name="$(basename "$t")"
    short="${name##*__}"
    [[ "$label" != - ]] && short="$short [$label]"
    if [[ -n "${unresolved[$t]:-}" ]]; then row "$short" "NOT RUN: unresolved libraries"; continue; fi
    limit="$(fits 90 15 "$tests_end")"
    if [[ -z "$limit" ]]; then row "$short" "SKIPPED: no time left in the test phase"; problems=1; continue; fi
    xml="$work/$name.${label}.xml"
    dir="$(runfiles_dir "$t")"
    echo "---- $name --gtest_filter=$filter (timeout ${limit}s)" >>"$test_log"
    before=$(wc -l <"$test_log")
    run_step "$test_log" "$limit" "$dir" env TEST_SRCDIR="$(dirname "$dir")" TEST_WORKSPACE=lmforge \
      "$t" --gtest_filter="$filter" --gtest_output="xml:$xml"
    # gtest's XML: every case has result="completed" or "skipped"; a failed one holds <failure elements.
    n_all=$(grep -c '<testcase ' "$xml" 2>/dev/null)
    n_skip=$(grep -c '<testcase .*result="skipped"' "$xml" 2>/dev/null)
    n_fail=$(awk '/<testcase /{c=0; name=$0} /<failure/{if(!c){n++; c=1}} END{print n+0}' "$xml" 2>/dev/null)
    : "${n_all:=0}" "${n_skip:=0}" "${n_fail:=0}"
    n_pass=$((n_all - n_skip - n_fail))
    status="$n_pass passed, $n_fail failed, $n_skip skipped"
    if ((step_rc == 124 || step_rc == 137)); then
      status="TIMEOUT after ${limit}s"; n_fail=$((n_fail + 1)); problems=1
    elif [[ ! -s "$xml" ]]; then
      status="CRASHED (exit $step_rc, no report)"; n_fail=$((n_fail + 1)); problems=1
    elif ((step_rc != 0)); then
      ((n_fail == 0)) && { n_fail=1; status="$status, exit $step_rc"; }
      problems=1
    fi
    row "$short" "$(printf '%-40s %6ss' "$status" "$step_secs")"
    # A crash or a hang: the case that was running.
    if [[ "$status" == TIMEOUT* || "$status" == CRASHED* ]]; then
      running="$(tail -n +"$((before + 1))" "$test_log" | grep -E '^\[ RUN +\]' | tail -1 | sed 's/^\[ RUN *\] //')"
      [[ -n "$running" ]] && { rows+=("    while running: $running"); echo "${rows[-1]}"; }
    fi
    # The names of failed cases, for the summary.
    if ((n_fail)) && [[ -s "$xml" ]]; then
      while IFS= read -r c; do rows+=("    failed: $c"); echo "${rows[-1]}"; done < <(awk -F'"' '
        /<testcase /{for(i=1;i<NF;i++) if ($i ~ /name=$/) {n=$(i+1); break}; for(i=1;i<NF;i++) if ($i ~ /classname=$/) {k=$(i+1)}; f=0}
        /<failure/{if(!f){split($0, m, "message=\""); split(m[2], w, "&#x0A;"); print k "." n " (" w[1] ")"; f=1}}' "$xml" | head -5)
    fi
    t_pass=$((t_pass + n_pass)); t_fail=$((t_fail + n_fail)); t_skip=$((t_skip + n_skip))
  done
fi

# Tests that skipped for want of a device although nvidia-smi shows one: the CUDA runtime could not use it
# (driver/runtime mismatch, ...; cuda_info's lines in env.log say more).
if [[ -n "$gpu_name" ]] && grep -q 'no CUDA device' "$test_log"; then
  row "WARNING" "nvidia-smi shows '$gpu_name' but tests skipped with 'no CUDA device': see cuda_info in env.log"
  problems=1
fi

# ---- benchmarks ----------------------------------------------------------------------------------------------
# Order of importance for issue 7 and each one's nominal timeout (the PyTorch peers' start and
# torch.compile are inside it).
bench_plan=(
  "experiments__trainer__train_step_cuda_benchmark 180"
  "kernels__attention__attention_cuda_benchmark 120"
  "kernels__matmul__matmul_cuda_benchmark 75"
  "kernels__cuda__memory_bound_benchmark 90"
)
if [[ "$mode" != --tests-only ]]; then
  echo "=== benchmarks (phase ends at ${bench_end}s)"
  planned=" "
  for p in "${bench_plan[@]}"; do planned+="${p%% *} "; done
  extra=()
  for b in "$here"/bench/*; do
    [[ -f "$b" && -x "$b" ]] || continue
    n="$(basename "$b")"
    [[ "$planned" == *" $n "* || "$n" == tools__cuda_info__cuda_info ]] || extra+=("$n 60")
  done
  for p in "${bench_plan[@]}" "${extra[@]+"${extra[@]}"}"; do
    name="${p%% *}" nominal="${p##* }"
    b="$here/bench/$name"
    short="${name##*__}"
    [[ -x "$b" ]] || { row "$short" "MISSING from the bundle"; problems=1; continue; }
    if [[ -n "${unresolved[$b]:-}" ]]; then row "$short" "NOT RUN: unresolved libraries"; continue; fi
    limit="$(fits "$nominal" 20 "$bench_end")"
    if [[ -z "$limit" ]]; then row "$short" "SKIPPED: needs up to ${nominal}s, $((bench_end - $(elapsed)))s left"; problems=1; continue; fi
    echo "==== $name (timeout ${limit}s)" | tee -a "$bench_log"
    before=$(wc -l <"$bench_log")
    run_step "$bench_log" "$limit" "$(runfiles_dir "$b")" "$b"
    tail -n +"$((before + 1))" "$bench_log"
    if ((step_rc == 124 || step_rc == 137)); then status="TIMEOUT after ${limit}s"; problems=1
    elif ((step_rc != 0)); then status="FAILED (exit $step_rc)"; problems=1
    else status="ok"; fi
    row "$short" "$(printf '%-40s %6ss' "$status" "$step_secs")"
  done
fi

# ---- compute-sanitizer ---------------------------------------------------------------------------------------
# Small cases only: the sanitizers slow kernels down 10-100x. "binary tool nominal-timeout gtest-filter".
san_plan=(
  "kernels__attention__attention_cuda_test memcheck 60 *GqaFromFusedQkvMatchesCpu/hs64_causal:*MultiQueryWithMaskAndAFullyMaskedRow/hs128_full"
  "kernels__rmsnorm__rmsnorm_cuda_test memcheck 40 *"
  "kernels__attention__attention_cuda_test racecheck 90 *GqaFromFusedQkvMatchesCpu/hs64_causal"
  "kernels__rmsnorm__rmsnorm_cuda_test racecheck 40 *"
  "kernels__attention__attention_cuda_test memcheck 60 *WgmmaForwardMatchesCpu/hs64_causal"
  "kernels__attention__attention_cuda_test memcheck 90 *WgmmaWholeBackwardMatchesCpu/hs64_causal"
)
if [[ "$mode" == all ]] && ((sanitizer)); then
  echo "=== compute-sanitizer (phase ends at ${san_end}s)"
  if ! command -v compute-sanitizer >/dev/null; then
    row "compute-sanitizer" "NOT RUN: not on PATH"
  else
    for p in "${san_plan[@]}"; do
      read -r name tool nominal filter <<<"$p"
      b="$here/tests/$name"
      label="$tool ${name##*__}"
      [[ -x "$b" && -z "${unresolved[$b]:-}" ]] || { row "$label" "NOT RUN: missing or unresolved"; continue; }
      limit="$(fits "$nominal" 15 "$san_end")"
      if [[ -z "$limit" ]]; then row "$label" "SKIPPED: needs up to ${nominal}s, $((san_end - $(elapsed)))s left"; continue; fi
      echo "---- $label --gtest_filter=$filter (timeout ${limit}s)" >>"$san_log"
      before=$(wc -l <"$san_log")
      run_step "$san_log" "$limit" "$(runfiles_dir "$b")" compute-sanitizer --tool "$tool" --print-limit 20 \
        --error-exitcode 99 "$b" --gtest_filter="$filter"
      summary_line="$(tail -n +"$((before + 1))" "$san_log" | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' | tail -1 | sed 's/^=* *//')"
      if ((step_rc == 124 || step_rc == 137)); then status="TIMEOUT after ${limit}s"
      elif ((step_rc == 99)); then status="ERRORS: ${summary_line:-see sanitizer.log}"; problems=1
      elif ((step_rc != 0)); then status="FAILED (exit $step_rc) ${summary_line}"; problems=1
      else status="clean: ${summary_line:-no summary line}"; fi
      row "$label" "$(printf '%-40s %6ss' "$status" "$step_secs")"
    done
  fi
fi

# ---- summary (printed last: the device tool returns only the end of the output) --------------------------
# Logs are capped at 16 MiB each (what the device tool brings back).
for f in "$env_log" "$ldd_log" "$test_log" "$bench_log" "$san_log"; do
  if (($(stat -c %s "$f") > 16000000)); then tail -c 16000000 "$f" >"$f.tmp" && mv "$f.tmp" "$f"; fi
done
rm -rf "$work"
{
  echo
  echo "==================== GPU bundle summary ===================="
  echo "gpu: ${gpu_name:-none}   budget ${budget}s, used $(elapsed)s   libstdc++: $cxx_note"
  for r in "${rows[@]}"; do echo "$r"; done
  echo "tests: $t_pass passed, $t_fail failed, $t_skip skipped   logs: $logdir"
  if [[ -z "$gpu_name" ]]; then echo "RESULT: NO GPU visible (nvidia-smi): tests skipped, nothing was measured"
  elif ((problems)); then echo "RESULT: PROBLEMS (see above)"
  else echo "RESULT: OK"; fi
} | tee "$summary"
((problems == 0)) && [[ -n "$gpu_name" ]]
