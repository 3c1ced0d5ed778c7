#!/usr/bin/env bash
# `//scaling:account` as a user runs it: --help prints the usage on stdout and runs nothing (exit 0, even
# beside a full command), a missing --config is a usage error (exit 2), and a config gives its table.
set -euo pipefail

account="$PWD/scaling/accounting/account_main"
config="$PWD/experiments/configs/tiny.textproto"
cd "$TEST_TMPDIR"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$account" --config="$config" --help > help.out 2> help.err || fail "--help: exit $?"
grep -q "^usage: account --config=" help.out || fail "--help printed no usage on stdout: $(cat help.out help.err)"
[[ ! -s help.err ]] || fail "--help wrote to stderr: $(cat help.err)"
[[ $(wc -l < help.out) == 1 ]] || fail "--help ran the accounting too: $(cat help.out)"

set +e
"$account" > none.out 2> none.err
code=$?
set -e
[[ $code == 2 ]] || fail "no --config: exit $code"
grep -q "^usage: account --config=" none.err || fail "no --config: no usage on stderr: $(cat none.err)"

"$account" --config="$config" > table.out 2> table.err || fail "account: $(cat table.err)"
[[ $(wc -l < table.out) -gt 1 ]] || fail "no table: $(cat table.out)"
echo PASS
