#!/usr/bin/env bash
# `//scaling:account` as a user runs it: --help prints the usage and the flags on stdout and runs nothing
# (exit 0, even beside a full command), a missing --config is a usage error naming it (exit 2), and a config
# gives its table.
set -euo pipefail

account="$PWD/scaling/accounting/account_main"
config="$PWD/experiments/configs/tiny.textproto"
cd "$TEST_TMPDIR"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$account" --config="$config" --help > help.out 2> help.err || fail "--help: exit $?"
grep -q "^usage: account --config=" help.out || fail "--help printed no usage on stdout: $(cat help.out help.err)"
[[ ! -s help.err ]] || fail "--help wrote to stderr: $(cat help.err)"
"$account" --help > help_alone.out || fail "--help alone: exit $?"
cmp -s help.out help_alone.out && ! grep -q "^parameters" help.out || fail "--help ran the accounting too: $(cat help.out)"
grep -q -- "--tokens_per_second (" help.out || fail "--help lists no flags: $(cat help.out)"

set +e
"$account" > none.out 2> none.err
code=$?
set -e
[[ $code == 2 ]] || fail "no --config: exit $code"
grep -q "^account_main: --config=EXPERIMENT.textproto is required$" none.err && grep -q -- "--help" none.err ||
  fail "no --config: the error does not name it: $(cat none.err)"

# A value the accounting would ignore (0 means "not given") is refused naming the flag.
set +e
"$account" --config="$config" --tokens_per_second=0 > zero.out 2> zero.err
code=$?
set -e
[[ $code == 2 ]] && grep -q "^account_main: --tokens_per_second=0: expected a positive number$" zero.err ||
  fail "--tokens_per_second=0: exit $code: $(cat zero.err)"

"$account" --config="$config" > table.out 2> table.err || fail "account: $(cat table.err)"
[[ $(wc -l < table.out) -gt 1 ]] || fail "no table: $(cat table.out)"
echo PASS
