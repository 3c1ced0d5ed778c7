#!/usr/bin/env bash
# End-to-end check of the experiment binaries as a user runs them: a tokenizer and token files from the
# `bpe` CLI, `train` on the tiny config with --set overrides, a simulated kill (--stop_after) and --resume,
# `eval` and `generate` on the run folder, their device flags and refusals, and the errors and exit
# codes for a bad config, an unknown flag and a run folder that already holds a run.
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

# --resume is a switch: another value is a usage error (exit 2) naming it.
set +e
"$bin/experiments/train" "${common[@]}" --resume=maybe 2> maybe.log
code=$?
set -e
[[ $code == 2 ]] && grep -q '^train: --resume is a switch: --resume or --resume=true|false, got "maybe"$' maybe.log ||
  fail "--resume=maybe: exit $code: $(cat maybe.log)"
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
# --checkpoint with --weights (which it would ignore) is a usage error (exit 2).
set +e
"$bin/experiments/eval" --checkpoint=run --weights=run/checkpoints/step_00000030/model.safetensors \
    --tokens=train.tok > /dev/null 2> eval_mixed.log
code=$?
set -e
[[ $code == 2 ]] && grep -q "^eval: --checkpoint takes the model's config and weights from the run; it cannot be combined" \
  eval_mixed.log || fail "eval --checkpoint --weights: exit $code: $(cat eval_mixed.log)"
# A missing --tokens is named, not only the usage printed.
set +e
"$bin/experiments/eval" --checkpoint=run 2> eval_no_tokens.log
code=$?
set -e
[[ $code == 2 ]] && grep -q '^eval: --tokens=FILE (the token file to evaluate on) is required$' eval_no_tokens.log ||
  fail "eval without --tokens: exit $code: $(cat eval_no_tokens.log)"

"$bin/experiments/generate" --checkpoint=run --prompt="Once upon a time" --max_tokens=20 --seed=1 > gen.txt 2> gen.log ||
  fail "generate: $(cat gen.log)"
grep -q "^Once upon a time" gen.txt || fail "generate output: $(cat gen.txt)"
# --num_samples: one batch of samples, sample i drawn with seed 1 + i, so sample 0 is the text above.
"$bin/experiments/generate" --checkpoint=run --prompt="Once upon a time" --max_tokens=20 --seed=1 \
    --num_samples=3 > gen3.txt 2> gen3.log || fail "generate --num_samples=3: $(cat gen3.log)"
[[ "$(grep -c '^=== sample [0-2] (seed [1-3]) ===$' gen3.txt)" == 3 ]] || fail "generate --num_samples=3: $(cat gen3.txt)"
awk '/^=== sample 1 /{exit} NR > 1' gen3.txt > gen3_first.txt
cmp -s gen.txt gen3_first.txt || fail "sample 0 of --num_samples=3 differs from --seed=1 alone: $(cat gen3_first.txt)"
# --prompt_file: one prompt per line (blank lines and a CRLF ending skipped), each output after its header,
# each exactly what --prompt gives with the same flags.
printf 'The dog\n\nOnce upon a time\r\n' > prompts.txt
"$bin/experiments/generate" --checkpoint=run --prompt_file=prompts.txt --max_tokens=20 --seed=1 > genf.txt \
    2> genf.log || fail "generate --prompt_file: $(cat genf.log)"
[[ "$(grep -c '^=== prompt [01] (line [13]) ===$' genf.txt)" == 2 ]] || fail "generate --prompt_file: $(cat genf.txt)"
awk '/^=== prompt 1 /{found=1; next} found' genf.txt > genf_second.txt
cmp -s gen.txt genf_second.txt || fail "--prompt_file's line 3 differs from --prompt: $(cat genf_second.txt)"

# eval's placement flags (--device, --cuda_device, --precision). Each refusal exits 1 with its message.
expect_error() {  # expect_error LOG PATTERN COMMAND...
  local log=$1 pattern=$2
  shift 2
  set +e
  "$@" > /dev/null 2> "$log"
  local code=$?
  set -e
  [[ $code == 1 ]] || fail "$* exit code $code (expected 1): $(cat "$log")"
  grep -Eq "$pattern" "$log" || fail "$* message: $(cat "$log")"
}
# Without a GPU (or in a binary without the CUDA backend) --device=cuda is the device error with CUDA's own
# message; with one, eval must give the CPU's loss (printed to 4 decimals; the CUDA fp32 loss is within 1e-4
# relative, see trainer_cuda_test). No machine has CUDA device 999.
cuda_error='eval: --device=cuda --cuda_device=[0-9]+ --precision=fp32: (cannot open CUDA device [0-9]+: .+|this binary was built without the CUDA backend)'
set +e
"$bin/experiments/eval" --checkpoint=run --tokens=train.tok --device=cuda > eval_cuda.txt 2> eval_cuda.log
code=$?
set -e
if [[ $code == 0 ]]; then
  awk -v a="$(cut -d' ' -f2 eval.txt)" -v b="$(cut -d' ' -f2 eval_cuda.txt)" \
    'BEGIN { d = a - b; exit !(d < 1e-3 && d > -1e-3) }' || fail "CUDA loss $(cat eval_cuda.txt) vs CPU $(cat eval.txt)"
else
  [[ $code == 1 ]] || fail "eval --device=cuda exit code $code: $(cat eval_cuda.log)"
  grep -Eq "$cuda_error" eval_cuda.log || fail "eval --device=cuda message: $(cat eval_cuda.log)"
fi
expect_error eval_cuda999.log "$cuda_error" \
  "$bin/experiments/eval" --checkpoint=run --tokens=train.tok --device=cuda --cuda_device=999
# bf16 on the CPU (bf16 activations, fp32 math and statistics): the loss within 2% of fp32's, the
# per-step bound the trainer's CPU BF16 test holds its loss curve to.
"$bin/experiments/eval" --checkpoint=run --tokens=train.tok --precision=bf16 > eval_bf16.txt 2> eval_bf16.log \
  || fail "eval --precision=bf16 on the CPU: $(cat eval_bf16.log)"
awk -v a="$(cut -d' ' -f2 eval.txt)" -v b="$(cut -d' ' -f2 eval_bf16.txt)" \
  'BEGIN { d = a - b; exit !(b > 0 && d < 0.02 * a && d > -0.02 * a) }' \
  || fail "CPU bf16 loss $(cat eval_bf16.txt) vs fp32 $(cat eval.txt)"
expect_error eval_tpu.log "^eval: --device=tpu: expected cpu or cuda$" \
  "$bin/experiments/eval" --checkpoint=run --tokens=train.tok --device=tpu
expect_error eval_fp16.log "^eval: --precision=fp16: expected fp32 or bf16$" \
  "$bin/experiments/eval" --checkpoint=run --tokens=train.tok --device=cuda --precision=fp16
expect_error eval_ordinal.log "^eval: --cuda_device needs --device=cuda$" \
  "$bin/experiments/eval" --checkpoint=run --tokens=train.tok --cuda_device=1
# generate takes the same placement flags: without a GPU (or the CUDA backend) the same device error; with
# one, text (its logits against the CPU's are model/language_model:language_model_decode_cuda_test's), or,
# for this config's head size 16, the model's refusal naming the head size.
set +e
"$bin/experiments/generate" --checkpoint=run --prompt="Once upon a time" --max_tokens=20 --device=cuda \
    > gen_cuda.txt 2> gen_cuda.log
code=$?
set -e
if [[ $code == 0 ]]; then
  grep -q "^Once upon a time" gen_cuda.txt || fail "generate --device=cuda output: $(cat gen_cuda.txt)"
else
  [[ $code == 1 ]] || fail "generate --device=cuda exit code $code: $(cat gen_cuda.log)"
  grep -Eq "^generate: (${cuda_error#eval: }|.*head size 16 .* is not supported)" gen_cuda.log || fail "generate --device=cuda message: $(cat gen_cuda.log)"
fi
expect_error gen_cuda999.log "^generate: ${cuda_error#eval: }" \
  "$bin/experiments/generate" --checkpoint=run --prompt="Once" --device=cuda --cuda_device=999
"$bin/experiments/generate" --checkpoint=run --prompt="Once" --max_tokens=5 --precision=bf16 > gen_bf16.txt \
  2> gen_bf16.log || fail "generate --precision=bf16 on the CPU: $(cat gen_bf16.log)"
grep -q "^Once" gen_bf16.txt || fail "generate --precision=bf16 output: $(cat gen_bf16.txt)"
# Numeric flags: out of range or not finite is a usage error naming the flag (was: an abort, or nothing
# generated, or nan sampling without a word).
expect_error eval_batch0.log "^eval: --batch_size=0: expected at least 1$" \
  "$bin/experiments/eval" --checkpoint=run --tokens=train.tok --batch_size=0
expect_error gen_pf.log "^generate: --prompt_file=.*missing.txt: open failed: No such file or directory$" \
  "$bin/experiments/generate" --checkpoint=run --prompt_file=missing.txt
expect_error gen_pf_dir.log "^generate: --prompt_file=.*/run: is a folder, expected a file$" \
  "$bin/experiments/generate" --checkpoint=run --prompt_file=run
expect_error gen_tok_empty.log "^generate: --tokenizer= is empty: give a tokenizer file" \
  "$bin/experiments/generate" --checkpoint=run --prompt=Once --tokenizer=
# The run's own tokenizer gone: the error says it is data.tokenizer and what to pass instead.
mv tok.lmftok tok.moved
expect_error gen_tok_missing.log "^generate: the run's data.tokenizer=$work/tok.lmftok: .*; pass the tokenizer the model was trained with as --tokenizer=FILE$" \
  "$bin/experiments/generate" --checkpoint=run --prompt=Once
mv tok.moved tok.lmftok
printf '\n  \n' > blank_prompts.txt
expect_error gen_pf_blank.log "^generate: --prompt_file=.*blank_prompts.txt: no prompt in it " \
  "$bin/experiments/generate" --checkpoint=run --prompt_file=blank_prompts.txt
expect_error gen_max0.log "^generate: --max_tokens=-3: expected at least 1$" \
  "$bin/experiments/generate" --checkpoint=run --prompt="Once" --max_tokens=-3
expect_error gen_samples0.log "^generate: --num_samples=0: expected at least 1$" \
  "$bin/experiments/generate" --checkpoint=run --prompt="Once" --num_samples=0
expect_error gen_samples.log "^generate: --num_samples=257: expected at most 256 " \
  "$bin/experiments/generate" --checkpoint=run --prompt="Once" --num_samples=257
# A negative seed would wrap to a huge unsigned one: the same samples as --seed=18446744073709551611.
expect_error gen_seed.log "^generate: --seed=-5: expected at least 0$" \
  "$bin/experiments/generate" --checkpoint=run --prompt="Once" --seed=-5
expect_error gen_nan.log '^generate: --temperature=nan: expected a finite number$' \
  "$bin/experiments/generate" --checkpoint=run --prompt="Once" --temperature=nan
expect_error gen_topp.log '^generate: --top_p=inf: expected a finite number$' \
  "$bin/experiments/generate" --checkpoint=run --prompt="Once" --top_p=inf
# A flag that takes a value, given bare, is a usage error (exit 2), not the value "true".
set +e
"$bin/experiments/generate" --checkpoint=run --prompt > /dev/null 2> gen_bare.log
code=$?
set -e
[[ $code == 2 ]] && grep -q '^generate: --prompt needs a value: --prompt=VALUE$' gen_bare.log ||
  fail "generate --prompt: exit $code: $(cat gen_bare.log)"
# The checkpoint records the tokenizer its training data was encoded with: a token file or a tokenizer of
# another is refused (its loss or text would be meaningless), even where the run names no data.tokenizer.
"$bin/tokenizer/bpe" train --input=corpus.txt --vocab_size=280 --output=other.lmftok 2>/dev/null
"$bin/tokenizer/bpe" encode --tokenizer=other.lmftok --input=corpus.txt --output=other.tok 2>/dev/null
other_hash=$("$bin/tokenizer/bpe" stats --tokenizer=other.lmftok | sed -n 's/.*hash \([0-9a-f]*\).*/\1/p')
[[ -n "$other_hash" ]] || fail "no hash in bpe stats"
expect_error gen_tok.log "^generate: .*other.lmftok: tokenizer hash $other_hash, but the model was trained on token ids of the tokenizer with hash [0-9a-f]{16} \(its checkpoint\)" \
  "$bin/experiments/generate" --checkpoint=run --prompt="Once" --tokenizer=other.lmftok
expect_error eval_tok.log "^eval: .*other.tok: the token file was written by a different tokenizer \(header tokenizer_hash=$other_hash, the model's training data \(its checkpoint\) has hash [0-9a-f]{16}\)$" \
  "$bin/experiments/eval" --checkpoint=run --tokens=other.tok
"$bin/experiments/eval" --checkpoint=run --tokens=train.tok --device=cpu --precision=fp32 > eval_cpu.txt 2> eval_cpu.log ||
  fail "eval --device=cpu: $(cat eval_cpu.log)"
[[ "$(cut -d'|' -f1-3 eval.txt)" == "$(cut -d'|' -f1-3 eval_cpu.txt)" ]] || fail "--device=cpu changed the loss"

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

# A validation file set while evaluation is off (run.eval_tokens 0) is said, not silently never read.
"$bin/experiments/train" --config="$config" --set=data.train_tokens=train.tok --set=data.val_tokens=train.tok \
  --set=run.eval_tokens=0 --set=run.max_steps=2 --set=schedule.warmup=1 --set=run.output_dir=run_noeval --set=logging.progress_bar=NEVER \
  2> noeval.log || fail "train without evaluation: $(cat noeval.log)"
grep -q "data.val_tokens=$work/train.tok is set but run.eval_tokens is 0: no validation loss is computed" noeval.log ||
  fail "no word about the unread validation file: $(cat noeval.log)"
# --help (on stdout, exit 0) says each flag's default, and runs nothing even beside a full command.
"$bin/experiments/generate" --checkpoint=run --prompt="Once upon" --help > generate_help.log || fail "generate --help: exit $?"
for want in "--max_tokens (new tokens per prompt (fewer where <|endoftext|> comes, if the tokenizer has it)); default: 256" \
    "--temperature (sampling temperature; 0 is greedy); default: 0.8" \
    "--top_p (nucleus sampling, in (0, 1]); default: 0.95" "--seed (a non-negative integer); default: 0" \
    "--tokenizer (the model's tokenizer file; none: the run's data.tokenizer)" \
    '--device (where the model runs: cpu or cuda); default: "cpu"'; do
  grep -qF -- "$want" generate_help.log || fail "generate --help lacks '$want': $(cat generate_help.log)"
done
"$bin/experiments/eval" --checkpoint=run --tokens=train.tok --help > eval_help.log || fail "eval --help: exit $?"
for want in "--batch_size (sequences per forward; none: the run's run.batch_size); default: (none)" \
    "--eval_tokens (tokens to score; none: the whole file" '--device (where the model runs: cpu or cuda); default: "cpu"'; do
  grep -qF -- "$want" eval_help.log || fail "eval --help lacks '$want': $(cat eval_help.log)"
done
"$bin/experiments/train" "${common[@]}" --set=run.output_dir=run_help --help > train_help.log || fail "train --help: exit $?"
for want in "--resume (continue run.output_dir from its newest good checkpoint" \
    "--set (overrides a field" "--stop_after (end right after this step" "4 stopped by a signal"; do
  grep -qF -- "$want" train_help.log || fail "train --help lacks '$want': $(cat train_help.log)"
done
[[ ! -e run_help ]] || fail "train --help trained a run"
! grep -q "Once upon" generate_help.log || fail "generate --help generated: $(cat generate_help.log)"
! grep -q "^loss" eval_help.log || fail "eval --help evaluated: $(cat eval_help.log)"
echo PASS
