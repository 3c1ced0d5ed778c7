#!/usr/bin/env bash
# --help of the binaries whose flags are Abseil's (sweep, quickstart, report, make_stories), as a script
# runs it: exit 0, the usage and every flag with its default on stdout, and nothing run. The system's
# Abseil alone exits 1 after its help (base/flags.h).
set -euo pipefail

bin="$PWD"
cd "$TEST_TMPDIR"
fail() { echo "FAIL: $*" >&2; exit 1; }

# binary, then lines its help must hold
check() {
  local binary="$1"
  shift
  local name
  name="$(basename "$binary")"
  "$bin/$binary" --help > "$name.out" 2> "$name.err" || fail "$name --help: exit $?: $(cat "$name.err")"
  [[ ! -s "$name.err" ]] || fail "$name --help wrote on stderr: $(cat "$name.err")"
  for want in "$@"; do
    grep -qF -- "$want" "$name.out" || fail "$name --help lacks '$want': $(cat "$name.out")"
  done
}

check experiments/sweep/sweep "sweep: Plans and runs a sweep" "--sweep (the sweep textproto" \
  "--parallel_runs (training processes at once (0: the sweep file's parallel_runs)); default: 0"
check experiments/quickstart/quickstart "quickstart: " '--out (output folder' 'default: "lmforge_quickstart"' \
  "--target_flops (the budget the report extrapolates to); default: 1e+15"
check scaling/report "report: Fits scaling laws" "--bootstrap (bootstrap resamples" "default: 1000"
check experiments/synthetic_corpus/make_stories "make_stories: Writes a deterministic synthetic corpus" \
  "--bytes (approximate size of the corpus in bytes"

# --help beside a full command runs nothing: no corpus is written, no quickstart folder made.
"$bin/experiments/synthetic_corpus/make_stories" --out=stories.txt --bytes=1000 --help > /dev/null ||
  fail "make_stories --help beside a command: exit $?"
[[ ! -e stories.txt ]] || fail "make_stories --help wrote the corpus"
"$bin/experiments/quickstart/quickstart" --out="$TEST_TMPDIR/qs" --help > /dev/null || fail "quickstart --help: exit $?"
[[ ! -e qs ]] || fail "quickstart --help made its folder"

# An unknown flag is still an error.
if "$bin/scaling/report" --no_such_flag 2> unknown.err; then fail "report --no_such_flag exited 0"; fi
grep -q "no_such_flag" unknown.err || fail "unknown flag not named: $(cat unknown.err)"
echo PASS
