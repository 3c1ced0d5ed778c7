#!/usr/bin/env bash
# `//scaling:report` as a user runs it: a results table given by a path relative to the folder the user is
# in (BUILD_WORKING_DIRECTORY, as `bazel run` sets it; the binary itself starts elsewhere), the report
# written beside it, and each bad flag named with the value given and what was expected.
set -euo pipefail

report="$PWD/scaling/report"
user="$TEST_TMPDIR/user"
mkdir -p "$user/sweep"
fail() { echo "FAIL: $*" >&2; exit 1; }

# Three IsoFLOP budgets of five sizes, losses from L = 1.7 + 400/N^0.34 + 400/D^0.28 (no curves).
awk 'BEGIN {
  print "run,budget_flops,params,non_embedding_params,tokens,flops,final_loss,best_val_loss,d_model,n_layers,n_heads,batch_size,lr,status";
  split("1e17 1e18 1e19", budgets, " ");
  for (b = 1; b <= 3; ++b) {
    c = budgets[b] + 0;
    for (k = -2; k <= 2; ++k) {
      n = 0.1 * sqrt(c) * 10 ^ (0.3 * k); d = c / (6 * n);
      l = 1.7 + 400 / n ^ 0.34 + 400 / d ^ 0.28;
      printf "r%d_%d,%g,%.0f,%.0f,%.0f,%g,%.6f,%.6f,64,2,1,32,0.001,finished\n", b, k + 2, c, n, n, d, c, l, l;
    }
  }
}' > "$user/sweep/results.csv"

mkdir -p "$TEST_TMPDIR/elsewhere"
cd "$TEST_TMPDIR/elsewhere"  # where the binary runs; relative paths must still be the user's
BUILD_WORKING_DIRECTORY="$user" "$report" --results=sweep/results.csv --target_flops=1e21 --bootstrap=0 \
  --out=mine > out.log 2> err.log || fail "report: $(cat err.log)"
[[ -f "$user/mine/report.md" ]] || fail "no $user/mine/report.md: $(cat out.log err.log)"
grep -q "Approach 3" "$user/mine/report.md" || fail "report.md without Approach 3"

# The objective of Approach 3 is a flag; the report says which one it fitted.
BUILD_WORKING_DIRECTORY="$user" "$report" --results=sweep/results.csv --target_flops=1e21 --bootstrap=0 \
  --parametric_objective=huber_likelihood --out=likelihood > out.log 2> err.log || fail "report: $(cat err.log)"
grep -q "maximum likelihood with Huber-distributed errors" "$user/likelihood/report.md" ||
  fail "report.md does not name the likelihood objective"

# A published sweep's table: N, C and the loss only. N counts embeddings there, so --params=total; without
# it the report names the flag.
awk 'BEGIN {
  print "params,flops,final_loss";
  for (i = 0; i < 4; ++i) for (j = 0; j < 4; ++j) {
    n = 1e7 * 10 ^ i; d = 1e9 * 10 ^ j;
    printf "%.0f,%g,%.6f\n", n, 6 * n * d, 1.7 + 400 / n ^ 0.34 + 400 / d ^ 0.28;
  }
}' > "$user/published.csv"
set +e
BUILD_WORKING_DIRECTORY="$user" "$report" --results=published.csv --target_flops=1e21 --bootstrap=0 \
  --out=published_report 2> err.log
code=$?
set -e
[[ $code == 1 ]] || fail "published table without --params=total: exit $code"
grep -q "no non_embedding_params column to take N from; use the params column (--params=total)" err.log ||
  fail "published table message: $(cat err.log)"
BUILD_WORKING_DIRECTORY="$user" "$report" --results=published.csv --target_flops=1e21 --bootstrap=0 --params=total \
  --out=published_report > out.log 2> err.log || fail "published table: $(cat err.log)"
grep -q "Recipe:\*\* not available: the table has no d_model, n_layers, n_heads, batch_size, lr columns" \
  "$user/published_report/report.md" || fail "published table: the recipe does not say what it lacks"
grep -q "Tokens are derived as D = flops / (6 params)" "$user/published_report/report.md" ||
  fail "published table: the report does not say D was derived"

# --moe_params: a dense table gives the same report under total and active N, byte for byte; a table of
# mixture-of-experts runs (a quarter to a half of each N active, the share varying with size) gives other
# fits under the two, and its report names the basis.
for basis in total active; do
  BUILD_WORKING_DIRECTORY="$user" "$report" --results=sweep/results.csv --target_flops=1e21 --bootstrap=0 \
    --moe_params=$basis --out=dense_$basis > out.log 2> err.log || fail "dense --moe_params=$basis: $(cat err.log)"
done
cmp -s "$user/dense_total/report.md" "$user/dense_active/report.md" ||
  fail "a dense table's report depends on --moe_params: $(diff "$user/dense_total/report.md" "$user/dense_active/report.md")"
grep -q "mixture-of-experts" "$user/dense_total/report.md" && fail "a dense table's report speaks of experts"
awk -F, 'NR == 1 { print $0 ",active_params,active_non_embedding_params"; next }
  { share = 0.25 + 0.05 * (NR % 6); printf "%s,%.0f,%.0f\n", $0, $3 * share, $4 * share }' \
  "$user/sweep/results.csv" > "$user/sweep/moe_results.csv"
for basis in total active; do
  BUILD_WORKING_DIRECTORY="$user" "$report" --results=sweep/moe_results.csv --target_flops=1e21 --bootstrap=0 \
    --moe_params=$basis --out=moe_$basis > "moe_$basis.log" 2> err.log || fail "MoE --moe_params=$basis: $(cat err.log)"
done
grep -q "mixture-of-experts runs: total parameters, every expert" "$user/moe_total/report.md" ||
  fail "the MoE report does not name the total basis"
grep -q "mixture-of-experts runs: active parameters, the experts a token uses" "$user/moe_active/report.md" ||
  fail "the MoE report does not name the active basis"
recommended() { grep "Approach 3 recommends" "$1"; }
[[ -n "$(recommended moe_total.log)" && "$(recommended moe_total.log)" != "$(recommended moe_active.log)" ]] ||
  fail "the two bases fit the same law: $(recommended moe_total.log) / $(recommended moe_active.log)"

# Bad flags: exit 2, one line per flag, naming it and its value.
set +e
BUILD_WORKING_DIRECTORY="$user" "$report" --results=sweep/results.csv --target_flops=1e21 --params=all \
  --loss=min --parametric_objective=mean --moe_params=some 2> bad.log
code=$?
set -e
[[ $code == 2 ]] || fail "bad flags: exit $code: $(cat bad.log)"
grep -qx "report: --params=all: expected non_embedding or total" bad.log || fail "params message: $(cat bad.log)"
grep -qx "report: --loss=min: expected final or best" bad.log || fail "loss message: $(cat bad.log)"
grep -qx "report: --moe_params=some: expected total or active" bad.log || fail "moe_params message: $(cat bad.log)"
grep -qx "report: --parametric_objective: unknown Approach 3 objective 'mean': expected huber_sum or huber_likelihood" \
  bad.log || fail "parametric_objective message: $(cat bad.log)"
echo PASS
