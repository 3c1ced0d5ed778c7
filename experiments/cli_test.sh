#!/usr/bin/env bash
# End-to-end check of the experiment binaries as a user runs them: a tokenizer and token files from the
# `bpe` CLI, `train` on the tiny config with --set overrides, a simulated kill (--stop_after) and --resume,
# `eval` and `generate` on the run folder, and the errors and exit codes for a bad config, an unknown flag
# and a run folder that already holds a run.
set -euo pipefail

bin="$PWD"
work="$TEST_TMPDIR/cli"
mkdir -p "$work"
cd "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }

for i in $(seq 1 300); do
  echo "Once upon a time a cat number $((i % 7)) sat on the mat and looked at the dog $((i % 5)).<|endoftext|>"
done > corpus.txt
"$bin/tokenizer/bpe" train --input=corpus.txt --vocab_size=300 --specials='<|endoftext|>' --output=tok.lmftok 2>/dev/null
"$bin/tokenizer/bpe" encode --tokenizer=tok.lmftok --input=corpus.txt --output=train.tok 2>/dev/null

config="$bin/experiments/configs/tiny.textproto"
common=(--config="$config" --set=data.train_tokens=train.tok --set=data.val_tokens=train.tok
        --set=data.tokenizer=tok.lmftok --set=run.eval_tokens=512 --set=run.max_steps=30
        --set=run.checkpoint_interval=10 --set=run.output_dir=run --set=logging.progress_bar=NEVER)

"$bin/experiments/train" "${common[@]}" --stop_after=15 2> train1.log || fail "first train: $(cat train1.log)"
grep -q "checkpoint $work/run/checkpoints/step_00000010" train1.log || fail "no checkpoint at step 10: $(cat train1.log)"
[[ $(wc -l < run/metrics.jsonl) == 15 ]] || fail "expected 15 metrics lines after the kill"

# Without --resume, an existing run is refused.
if "$bin/experiments/train" "${common[@]}" 2> refused.log; then fail "overwrote an existing run"; fi
grep -q "already holds a run; pass --resume" refused.log || fail "refusal message: $(cat refused.log)"

"$bin/experiments/train" "${common[@]}" --resume 2> train2.log || fail "resume: $(cat train2.log)"
grep -q "resuming from $work/run/checkpoints/step_00000010 (step 10)" train2.log || fail "resume message: $(cat train2.log)"
[[ $(wc -l < run/metrics.jsonl) == 30 ]] || fail "expected 30 metrics lines after the resume"
grep -q '"step":30,' run/metrics.jsonl || fail "no step 30 in metrics.jsonl"
[[ -f run/config.textproto ]] || fail "no resolved config"
ls run/events.out.tfevents.* > /dev/null || fail "no TensorBoard event file"
[[ -f run/checkpoints/step_00000030/model.safetensors ]] || fail "no final checkpoint"

"$bin/experiments/eval" --checkpoint=run --tokens=train.tok > eval.txt 2> eval.log || fail "eval: $(cat eval.log)"
grep -Eq '^loss [0-9.]+ \| perplexity [0-9.]+ \| [0-9]+ tokens' eval.txt || fail "eval output: $(cat eval.txt)"

"$bin/experiments/eval" --config="$config" --set=data.train_tokens=train.tok --set=run.output_dir=x \
    --weights=run/checkpoints/step_00000030/model.safetensors --tokens=train.tok > eval2.txt 2> eval2.log ||
  fail "eval with --weights: $(cat eval2.log)"
[[ "$(cut -d'|' -f1-3 eval.txt)" == "$(cut -d'|' -f1-3 eval2.txt)" ]] || fail "checkpoint and --weights disagree"

"$bin/experiments/generate" --checkpoint=run --prompt="Once upon a time" --max_tokens=20 --seed=1 > gen.txt 2> gen.log ||
  fail "generate: $(cat gen.log)"
grep -q "^Once upon a time" gen.txt || fail "generate output: $(cat gen.txt)"

# A real kill -9 at an arbitrary moment (possibly mid-checkpoint), then --resume: the metrics without the
# timing fields equal an uninterrupted run's, line for line, bit for bit.
long=(--config="$config" --set=data.train_tokens=train.tok --set=run.max_steps=150 --set=run.checkpoint_interval=10
      --set=logging.progress_bar=NEVER)
"$bin/experiments/train" "${long[@]}" --set=run.output_dir=straight 2> straight.log || fail "straight run: $(cat straight.log)"
"$bin/experiments/train" "${long[@]}" --set=run.output_dir=killed 2> killed.log &
pid=$!
for _ in $(seq 1 3000); do
  [[ -d killed/checkpoints/step_00000020 ]] && break
  sleep 0.01
done
kill -9 "$pid" 2> /dev/null || true
wait "$pid" 2> /dev/null || true
[[ -d killed/checkpoints/step_00000020 ]] || fail "the run to kill never reached step 20: $(cat killed.log)"
echo "killed after $(wc -l < killed/metrics.jsonl) logged steps"
"$bin/experiments/train" "${long[@]}" --set=run.output_dir=killed --resume 2> resumed.log || fail "resume after kill -9: $(cat resumed.log)"
strip() { sed 's/,"tokens_per_second".*//' "$1"; }
diff <(strip straight/metrics.jsonl) <(strip killed/metrics.jsonl) > metrics.diff || fail "metrics differ after kill -9 and resume: $(head -5 metrics.diff)"
cmp straight/checkpoints/step_00000150/model.safetensors killed/checkpoints/step_00000150/model.safetensors ||
  fail "final weights differ after kill -9 and resume"

# Errors: a bad override (exit 1, message naming the file and field), an unknown flag (exit 2).
set +e
"$bin/experiments/train" --config="$config" --set=model.n_heads=5 2> bad.log
code=$?
set -e
[[ $code == 1 ]] || fail "bad config exit code $code"
grep -q "tiny.textproto: model.n_heads=5 does not divide model.d_model=64" bad.log || fail "bad config message: $(cat bad.log)"
set +e
"$bin/experiments/train" --config="$config" --sett=x 2> flag.log
code=$?
set -e
[[ $code == 2 ]] || fail "unknown flag exit code $code"
grep -q "unknown flag --sett" flag.log || fail "unknown flag message: $(cat flag.log)"
echo PASS
