#!/usr/bin/env bash
# End-to-end test of the `bpe` command line: train -> encode -> decode gives the input back, stats reads
# both files, and every bad input the issue lists (missing file, vocab smaller than 256 + specials, corrupt
# tokenizer file, token file from another tokenizer, unknown flag or verb) fails with exit status 1 and a
# message naming the problem.
set -uo pipefail

bpe="$TEST_SRCDIR/$TEST_WORKSPACE/tokenizer/bpe"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# Expects the command to fail with exit status 1 and stderr containing $1.
expect_error() {
  local needle="$1"
  shift
  local err
  err="$("$@" 2>&1 >/dev/null)"
  local rc=$?
  [[ $rc -eq 1 ]] || fail "exit status $rc (expected 1) for: $*"
  [[ "$err" == *"$needle"* ]] || fail "stderr of '$*' lacks '$needle': $err"
}

corpus="$tmp/corpus.txt"
for i in $(seq 1 300); do
  printf 'The quick brown fox %d jumps over the lazy dog. Ünïcödé café naïve 日本語 😀\n' "$i"
  if ((i % 50 == 0)); then printf '<|endoftext|>'; fi
done >"$corpus"

"$bpe" train --input="$corpus" --vocab_size=400 --output="$tmp/tok.lmftok" \
  --gpt2_vocab_out="$tmp/vocab.json" --gpt2_merges_out="$tmp/merges.txt" >"$tmp/train.out" 2>&1 ||
  fail "train failed: $(cat "$tmp/train.out")"
grep -q "trained 400 tokens" "$tmp/train.out" || fail "train summary missing: $(cat "$tmp/train.out")"
grep -q "merges/s" "$tmp/train.out" || fail "train progress lacks merges/s: $(cat "$tmp/train.out")"

"$bpe" encode --tokenizer="$tmp/tok.lmftok" --input="$corpus" --output="$tmp/corpus.tok" >"$tmp/encode.out" 2>&1 ||
  fail "encode failed: $(cat "$tmp/encode.out")"
grep -q "bytes/token" "$tmp/encode.out" || fail "encode lacks the compression ratio: $(cat "$tmp/encode.out")"

"$bpe" decode --tokenizer="$tmp/tok.lmftok" --input="$tmp/corpus.tok" --output="$tmp/decoded.txt" ||
  fail "decode failed"
cmp -s "$corpus" "$tmp/decoded.txt" || fail "decode(encode(corpus)) differs from the corpus"

# The exported GPT-2 files load as the same tokenizer, so they decode the same token file.
"$bpe" decode --gpt2_vocab="$tmp/vocab.json" --gpt2_merges="$tmp/merges.txt" --input="$tmp/corpus.tok" \
  >"$tmp/decoded2.txt" || fail "decode with the exported GPT-2 files failed"
cmp -s "$corpus" "$tmp/decoded2.txt" || fail "GPT-2 export round trip differs"

"$bpe" stats --tokenizer="$tmp/tok.lmftok" --input="$tmp/corpus.tok" >"$tmp/stats.out" 2>&1 || fail "stats failed"
grep -q "6 special tokens" "$tmp/stats.out" || fail "stats miscounted specials: $(cat "$tmp/stats.out")"

expect_error "/nonexistent/corpus.txt" "$bpe" train --input=/nonexistent/corpus.txt --vocab_size=400 --output="$tmp/x"
expect_error "smaller than the 256 byte tokens + 1 special tokens" \
  "$bpe" train --input="$corpus" --vocab_size=256 --output="$tmp/x"
expect_error "missing --vocab_size" "$bpe" train --input="$corpus" --output="$tmp/x"
head -c 300 "$tmp/tok.lmftok" >"$tmp/truncated.lmftok"
expect_error "corrupt tokenizer file" "$bpe" stats --tokenizer="$tmp/truncated.lmftok"
printf 'hello\n' >"$tmp/garbage.lmftok"
expect_error "not a tokenizer file" "$bpe" encode --tokenizer="$tmp/garbage.lmftok" --input="$corpus" --output="$tmp/y"
"$bpe" train --input="$corpus" --vocab_size=300 --output="$tmp/other.lmftok" >/dev/null 2>&1 || fail "second train failed"
expect_error "does not match the tokenizer" "$bpe" decode --tokenizer="$tmp/other.lmftok" --input="$tmp/corpus.tok"
expect_error "bad magic" "$bpe" decode --tokenizer="$tmp/tok.lmftok" --input="$corpus"
expect_error "unknown flag --bogus" "$bpe" encode --tokenizer="$tmp/tok.lmftok" --bogus=1
expect_error "unknown verb" "$bpe" frobnicate
expect_error "--threads=100000: expected an integer from 0 to 1024" \
  "$bpe" encode --tokenizer="$tmp/tok.lmftok" --input="$corpus" --output="$tmp/y" --threads=100000
[[ -f "$tmp/y" ]] && fail "a failed encode left an output file"
# An output that is one of the inputs is refused before anything is written (it replaced the input).
cp "$corpus" "$tmp/own.txt"
expect_error "--output=$tmp/own.txt is the --input file $tmp/own.txt: writing it would destroy the input" \
  "$bpe" encode --tokenizer="$tmp/tok.lmftok" --input="$corpus","$tmp/own.txt" --output="$tmp/own.txt"
cmp -s "$corpus" "$tmp/own.txt" || fail "the refused encode changed its input"
expect_error "is the --tokenizer file" "$bpe" decode --tokenizer="$tmp/tok.lmftok" --input="$tmp/corpus.tok" \
  --output="$tmp/../$(basename "$tmp")/tok.lmftok"
expect_error "--gpt2_vocab_out and --gpt2_merges_out name the same file" \
  "$bpe" train --input="$corpus" --vocab_size=300 --output="$tmp/z" --gpt2_vocab_out="$tmp/v" --gpt2_merges_out="$tmp/v"

# Two outputs that do not exist yet, spelled differently, are still one file (the vocab replaced the tokenizer).
(cd "$tmp" && expect_error "--output and --gpt2_vocab_out name the same file" \
  "$bpe" train --input="$corpus" --vocab_size=300 --output=fresh.lmftok --gpt2_vocab_out=./fresh.lmftok \
  --gpt2_merges_out=fresh_merges.txt)
[[ -e "$tmp/fresh.lmftok" ]] && fail "the refused train wrote fresh.lmftok"

# Pipes: their size is unknown, so a corpus or token file read through one was taken as empty (exit 0).
# The error names the path. A pipe as an output would be replaced by a regular file (as root, so would
# /dev/null): refused before any work, and the pipe is left as it was.
mkfifo "$tmp/pipe"
expect_error "$tmp/pipe: is not a regular file" \
  "$bpe" encode --tokenizer="$tmp/tok.lmftok" --input="$tmp/pipe" --output="$tmp/p.tok"
expect_error "$tmp/pipe: is not a regular file" "$bpe" train --input="$tmp/pipe" --vocab_size=300 --output="$tmp/p"
expect_error "--output=$tmp/pipe: $tmp/pipe: is a pipe" \
  "$bpe" train --input="$corpus" --vocab_size=300 --output="$tmp/pipe"
expect_error "$tmp/pipe: is a pipe" \
  "$bpe" decode --tokenizer="$tmp/tok.lmftok" --input="$tmp/corpus.tok" --output="$tmp/pipe"
[[ -p "$tmp/pipe" ]] || fail "an output that is a pipe was replaced"
expect_error "$tmp/pipe: is a pipe" "$bpe" stats --tokenizer="$tmp/tok.lmftok" --input="$tmp/pipe"
# An output whose folder is missing fails before training, naming the path given (not a temporary file).
expect_error "--output=$tmp/no_dir/t.lmftok: $tmp/no_dir/t.lmftok: its folder $tmp/no_dir does not exist" \
  "$bpe" train --input="$corpus" --vocab_size=300 --output="$tmp/no_dir/t.lmftok"

# Standard output that cannot take the text fails the command instead of losing it quietly.
if [[ -w /dev/full ]]; then
  "$bpe" decode --tokenizer="$tmp/tok.lmftok" --input="$tmp/corpus.tok" >/dev/full 2>"$tmp/full.err"
  rc=$?
  [[ $rc -eq 1 ]] || fail "decode to a full stdout exited $rc"
  grep -q "writing to standard output failed" "$tmp/full.err" || fail "decode to /dev/full: $(cat "$tmp/full.err")"
fi

# A damaged id is reported at its position in the file (decode reported it within its 2^20-token block).
plant_bad_id() {  # the token file with the id at index 1,100,000 set to 0xFFFF (uint16 ids, 64-byte header)
  local src="$1" dst="$2"
  cp "$src" "$dst"
  printf '\xff\xff' | dd of="$dst" bs=1 seek=$((64 + 2 * 1100000)) conv=notrunc status=none
}
for i in $(seq 1 240); do cat "$corpus"; done >"$tmp/big.txt"  # ~1.3M tokens: past one 2^20-token block
"$bpe" encode --tokenizer="$tmp/tok.lmftok" --input="$tmp/big.txt" --output="$tmp/big.tok" >/dev/null 2>&1 ||
  fail "encode of big.txt failed"
plant_bad_id "$tmp/big.tok" "$tmp/bad.tok"
expect_error "$tmp/bad.tok: token 1100000 has id 65535, past the vocab size 400" \
  "$bpe" decode --tokenizer="$tmp/tok.lmftok" --input="$tmp/bad.tok" --output="$tmp/bad.txt"
expect_error "$tmp/bad.tok: token 1100000 has id 65535, past the vocab size 400" \
  "$bpe" stats --tokenizer="$tmp/tok.lmftok" --input="$tmp/bad.tok"

# Flags: a value given twice, an empty value, numbers out of range or with junk.
expect_error "--input is given twice" \
  "$bpe" encode --tokenizer="$tmp/tok.lmftok" --input="$corpus" --input="$tmp/own.txt" --output="$tmp/y"
expect_error "--input is given twice ($corpus and $tmp/own.txt); give it once (a list is comma-separated)" \
  "$bpe" encode --tokenizer="$tmp/tok.lmftok" --input="$corpus" --input="$tmp/own.txt" --output="$tmp/y"
expect_error "--output is given twice ($tmp/y and $tmp/z); give it once" \
  "$bpe" encode --tokenizer="$tmp/tok.lmftok" --input="$corpus" --output="$tmp/y" --output="$tmp/z"
twice="$("$bpe" encode --tokenizer="$tmp/tok.lmftok" --input="$corpus" --output="$tmp/y" --output="$tmp/z" 2>&1)" || true
[[ "$twice" != *"comma-separated"* ]] || fail "--output is no list: $twice"
expect_error "--vocab_size=-5: expected an integer from 256 to" \
  "$bpe" train --input="$corpus" --vocab_size=-5 --output="$tmp/y"
expect_error "--tokenizer= has no value" "$bpe" stats --tokenizer=
expect_error "--chunk_mb=0: expected an integer from 1 to 4096" \
  "$bpe" encode --tokenizer="$tmp/tok.lmftok" --input="$corpus" --output="$tmp/y" --chunk_mb=0
expect_error "--threads=99999999999999999999999: expected an integer from 0 to 1024" \
  "$bpe" encode --tokenizer="$tmp/tok.lmftok" --input="$corpus" --output="$tmp/y" --threads=99999999999999999999999
expect_error "--threads= 2: expected an integer" \
  "$bpe" encode --tokenizer="$tmp/tok.lmftok" --input="$corpus" --output="$tmp/y" "--threads= 2"
expect_error "--gpt2_specials applies to --gpt2_vocab" \
  "$bpe" stats --tokenizer="$tmp/tok.lmftok" --gpt2_specials=x
# A huge --vocab_size trains what the corpus allows (it aborted allocating for 10^9 tokens up front).
"$bpe" train --input="$corpus" --vocab_size=1000000000 --output="$tmp/huge.lmftok" >"$tmp/huge.out" 2>&1 ||
  fail "train with --vocab_size=1e9 failed: $(cat "$tmp/huge.out")"
grep -q "ran out of pairs" "$tmp/huge.out" || fail "no ran-out-of-pairs note: $(cat "$tmp/huge.out")"

# --help (on stdout, exit 0) says the defaults of --threads and --chunk_mb.
"$bpe" --help > "$tmp/help.log" || fail "bpe --help: exit $?"
grep -qF -- "--threads defaults to LMF_NUM_THREADS, else one per hardware thread" "$tmp/help.log" ||
  fail "bpe --help lacks --threads' default: $(cat "$tmp/help.log")"

if ((failures > 0)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "bpe CLI: all checks passed"
