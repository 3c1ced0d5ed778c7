#!/usr/bin/env bash
# bazel/gtest_main.cc: a test binary whose test calls exit(0) fails (exit 1, a message on stderr) where
# GoogleTest's own main passed it under Bazel 4; without that exit, the same binary passes, death tests
# of both styles included.
set -euo pipefail

bin="$PWD/bazel/premature_exit_for_test"
# The binary under test writes GoogleTest's premature-exit file too; it is not this test's.
unset TEST_PREMATURE_EXIT_FILE
cd "$TEST_TMPDIR"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$bin" > normal.out 2> normal.err || fail "without PREMATURE_EXIT: exit $?: $(cat normal.out normal.err)"
grep -qF "the last test ran" normal.out || fail "the last test did not run: $(cat normal.out)"
grep -qF "[  PASSED  ] 4 tests." normal.out || fail "not all 4 tests passed: $(cat normal.out)"

rc=0
PREMATURE_EXIT=1 "$bin" > early.out 2> early.err || rc=$?
[[ $rc == 1 ]] || fail "a test that calls exit(0): exit $rc, want 1: $(cat early.out early.err)"
grep -qF "exited while its tests were running" early.err || fail "no message on stderr: $(cat early.err)"
if grep -qF "the last test ran" early.out; then fail "tests ran after the exit"; fi
echo "PASS"
