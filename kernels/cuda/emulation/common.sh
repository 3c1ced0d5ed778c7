# Shared steps of the CUDA emulation scripts (emulated_test.sh, the test of every lmf_emulated_test, and
# racecheck.sh), sourced by them: the skip without g++, the work folder, the rewrite of CUDA-only syntax for
# cuemu.h, parallel compiles. Each function uses the caller's `work`, `flags` and `jobs`.

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
    work="$EMULATION_WORK_DIR"  # kept: the rewritten sources, the objects (compile reuses them), the binaries
  else
    work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/$prefix.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
  fi
  mkdir -p "$work/src" "$work/inc" "$work/obj"
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
# garbage on the device (cuemu.h). DST keeps its time where its text stays the same (a kept work folder).
emulation_rewrite() {
  mkdir -p "$(dirname "$2")"
  perl -0pe 's/(^[ \t]*)([^;{}\n][^;{}]*?)\s*<<<(.*?)>>>\s*\(/$1::cuemu::Launch($2, $3)(/gms;
             s/::cuemu::Launch\((case [^:]*::\w+:)(\s*)/$1$2::cuemu::Launch(/g;
             s/extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?(\w[\w: ]*?)\s+(\w+)\[\];/$1* $2 = static_cast<$1*>(::cuemu::DynamicShared());/g;
             s{(^[ \t]*__shared__\s[^;]*;)}{my $d = $1; my $p = ""; $p .= " auto& $1 = ::cuemu::BlockShared($1_cuemu_key);" while $d =~ /(\w+)\s*\[/g; $d =~ s/(\w+)(\s*\[)/$1_cuemu_key$2/g; $d . $p}gme' "$1" >"$2.new"
  if grep -q '<<<' "$2.new"; then echo "emulation: a launch in $1 was not rewritten" >&2; exit 1; fi
  if grep -q 'extern __shared__' "$2.new"; then echo "emulation: dynamic shared memory in $1 was not rewritten" >&2; exit 1; fi
  if cmp -s "$2.new" "$2"; then rm "$2.new"; else mv "$2.new" "$2"; fi
}

# compile OUTPUT [g++ flags...] SOURCE: in the background, at most 2 at a time; compiles_done waits for all.
# In a kept work folder (EMULATION_WORK_DIR) an object is reused where its command line is the same and it is
# newer than its source and every header the source read (g++'s dependency file beside it).
compile() {
  local out="$1" src="${*: -1}"
  shift
  local line="g++ ${flags[*]} $*"
  if [[ -n "${EMULATION_WORK_DIR:-}" && -f "$out.command" && "$(<"$out.command")" == "$line" ]] &&
    object_current "$out"; then
    return
  fi
  while (($(jobs -rp | wc -l) >= 2)); do wait -n; done
  mkdir -p "$(dirname "$out")"
  rm -f "$out"
  printf '%s' "$line" >"$out.command"
  g++ "${flags[@]}" -MMD -MF "$out.d" "${@:1:$#-1}" -c "$src" -o "$out" &
  jobs+=($!)
}
compiles_done() {
  local j
  for j in "${jobs[@]}"; do wait "$j"; done
  jobs=()
}

# object_current OBJECT: whether OBJECT exists and no file its dependency file names is newer (or gone).
object_current() {
  local out="$1" dep
  [[ -f "$out" && -f "$out.d" ]] || return 1
  for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$out.d"); do
    [[ -e "$dep" && ! "$dep" -nt "$out" ]] || return 1
  done
}
