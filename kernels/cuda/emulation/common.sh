# Shared steps of the CUDA emulation scripts (run.sh here and cublaslt/run.sh), sourced by them: the skip
# without g++, the work folder, the rewrite of CUDA-only syntax for cuemu.h, parallel compiles and the link.
# Each function uses the caller's `root` (the tree), `work`, `flags` and `jobs`.

# emulation_start NAME WORK_PREFIX: exits 0 (skipped) without g++; sets `work` (EMULATION_WORK_DIR when
# given, kept; else a fresh folder removed on exit) and `flags` (SANITIZE=1 adds ASan and UBSan, RACECHECK=1
# ThreadSanitizer, which stops at the first race it reports).
emulation_start() {
  local name="$1" prefix="$2"
  if ! command -v g++ >/dev/null; then
    echo "$name: SKIPPED: no g++ on PATH (the CUDA emulation compiles the sources with the host g++)"
    exit 0
  fi
  if [[ -n "${EMULATION_WORK_DIR:-}" ]]; then
    work="$EMULATION_WORK_DIR"  # kept: the rewritten sources and the binary
  else
    work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/$prefix.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
  fi
  mkdir -p "$work/src" "$work/inc/kernels/cuda" "$work/obj"
  flags=(-std=c++17 -O1 -g -march=x86-64-v3 -w)
  [[ "${SANITIZE:-0}" == 1 ]] && flags+=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
  if [[ "${RACECHECK:-0}" == 1 ]]; then  # ThreadSanitizer on the emulated threads (cuemu.cc says what it sees)
    if [[ "${SANITIZE:-0}" == 1 ]]; then echo "$name: RACECHECK=1 and SANITIZE=1 exclude each other" >&2; exit 2; fi
    flags+=(-fsanitize=thread -DCUEMU_RACECHECK=1 -U__SANITIZE_THREAD__)  # the macro: see cuemu.cc
    export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:history_size=4:second_deadlock_stack=1}"
  fi
  jobs=()
}

# emulation_rewrite SRC DST: launch syntax -> ::cuemu::Launch(kernel, config...)(args), a case label staying
# in front; `extern __shared__ [__align__(n)] T name[];` -> T* name = the block's dynamic shared memory;
# `__shared__ T a[n], b[m];` (a static local) -> `__shared__ T a_cuemu_key[n], b_cuemu_key[m];` followed by
# `auto& a = ::cuemu::BlockShared(a_cuemu_key);` per array: the block's own copy, NaN at its start as it holds
# garbage on the device (cuemu.h).
emulation_rewrite() {
  perl -0pe 's/(^[ \t]*)([^;{}\n][^;{}]*?)\s*<<<(.*?)>>>\s*\(/$1::cuemu::Launch($2, $3)(/gms;
             s/::cuemu::Launch\((case [^:]*::\w+:)(\s*)/$1$2::cuemu::Launch(/g;
             s/extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?(\w[\w: ]*?)\s+(\w+)\[\];/$1* $2 = static_cast<$1*>(::cuemu::DynamicShared());/g;
             s{(^[ \t]*__shared__\s[^;]*;)}{my $d = $1; my $p = ""; $p .= " auto& $1 = ::cuemu::BlockShared($1_cuemu_key);" while $d =~ /(\w+)\s*\[/g; $d =~ s/(\w+)(\s*\[)/$1_cuemu_key$2/g; $d . $p}gme' "$1" >"$2"
  if grep -q '<<<' "$2"; then echo "emulation: a launch in $1 was not rewritten" >&2; exit 1; fi
  if grep -q 'extern __shared__' "$2"; then echo "emulation: dynamic shared memory in $1 was not rewritten" >&2; exit 1; fi
}

# compile OUTPUT [g++ flags...] SOURCE: in the background, at most 2 at a time; compiles_done waits for all.
compile() {
  local out="$1" src="${*: -1}"
  shift
  while (($(jobs -rp | wc -l) >= 2)); do wait -n; done
  g++ "${flags[@]}" "${@:1:$#-1}" -c "$src" -o "$out" &
  jobs+=($!)
}
compiles_done() {
  local j
  for j in "${jobs[@]}"; do wait "$j"; done
}

# compile_host_support: the host code both sides link (context, dispatch, thread pool, checks, allocator).
compile_host_support() {
  local f
  for f in kernels/core/core.cc kernels/core/dispatch.cc base/thread_pool.cc base/check.cc \
    kernels/cuda/caching_allocator.cc; do
    compile "$work/obj/host_$(basename "$f" .cc).o" -I"$root" "$root/$f"
  done
}

# emulation_link BINARY [g++ link flags...]: links every object in $work/obj with Debian's Abseil.
emulation_link() {
  local binary="$1" lib name
  shift
  local absl_libs=()
  shopt -s nullglob
  for lib in /usr/lib/x86_64-linux-gnu/libabsl_*.so; do
    name="$(basename "$lib" .so)"
    absl_libs+=("-l${name#lib}")
  done
  if ((${#absl_libs[@]} == 0)); then
    echo "emulation: no Abseil shared libraries in /usr/lib/x86_64-linux-gnu (Debian's libabsl-dev)" >&2
    exit 1
  fi
  g++ "${flags[@]}" "$work"/obj/*.o -o "$binary" "$@" -lpthread "${absl_libs[@]}"
}
