#!/usr/bin/env python3
"""Runs lmforge's tokenizer benchmark next to its peers on the same bytes and thread count, and prints the
ratios (the numbers in tokenizer/README.md come from this script):

  - training a 10,000-token vocab with <|endoftext|>: //tokenizer:bpe_benchmark vs HF `tokenizers`
    BpeTrainer with the same pre-tokenization (ByteLevel, GPT-2 regex, no prefix space); wall time of the
    training call and peak resident memory of each process (getrusage of the child);
  - encoding with GPT-2's tokenizer: MB/s vs tiktoken's `gpt2` (built offline from the same vocab files),
    on one thread and on all threads (tiktoken's encode_ordinary_batch), same bytes, same chunking;
  - CS336 corpus.en, vocab 500: our time (best of 5);
  - pre-tokenization, one thread: our scanner vs PCRE2 JIT with the same pattern, and their agreement.

    python3 tools/tokenizer/bpe_benchmark.py --bench=<path of bpe_benchmark> --corpus=/tmp/tok_corpus/english.txt

The corpus comes from tools/tokenizer/make_bench_corpus.sh. Each measurement runs in its own process.
"""
import argparse
import os
import subprocess
import sys
import time

FIXTURES = "cs336/assignment1-basics/tests/fixtures"


def fields(line):
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


def child_rss_mb(cmd, env=None):
    """Runs cmd, returns (stdout, peak RSS in MB of that child alone, via wait4)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{err.decode()}")
    return out.decode(), usage.ru_maxrss / 1024.0


def safe_cuts(data, chunk):
    """Chunk ends at the same safe cuts as the C++ code: a '\\n' right after an ASCII non-space byte."""
    cuts, pos = [0], 0
    while pos < len(data):
        target = min(len(data), pos + chunk)
        i = target
        while i < len(data) and not (data[i] == 0x0A and 0x20 < data[i - 1] < 0x7F):
            i += 1
        cuts.append(i)
        pos = i
    return cuts


def hf_train(corpus, vocab_size):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    start = time.perf_counter()
    tok.train([corpus], trainer)
    print(f"seconds={time.perf_counter() - start:.3f} vocab={tok.get_vocab_size()}")


def tiktoken_encode(shared, corpus, nbytes, threads):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from make_expected_ids import gpt2_encoding
    enc = gpt2_encoding(os.path.join(shared, FIXTURES))
    data = open(corpus, "rb").read()[:nbytes]
    cuts = safe_cuts(data, 1 << 20)
    chunks = [data[a:b].decode("utf-8") for a, b in zip(cuts, cuts[1:])]
    text = "".join(chunks)
    start = time.perf_counter()
    if threads == 1:
        tokens = len(enc.encode_ordinary(text))
    else:
        tokens = sum(len(ids) for ids in enc.encode_ordinary_batch(chunks, num_threads=threads))
    seconds = time.perf_counter() - start
    print(f"seconds={seconds:.3f} tokens={tokens} mb_per_s={len(data) / 1e6 / seconds:.2f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", help="path of the bpe_benchmark binary")
    parser.add_argument("--corpus", help="English text (tools/tokenizer/make_bench_corpus.sh)")
    parser.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "../../../shared/data"))
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--vocab_size", type=int, default=10000)
    parser.add_argument("--encode_bytes", type=int, default=0, help="encode only the first N bytes (0: all)")
    parser.add_argument("--hf_train", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tiktoken", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hf_train:
        return hf_train(args.corpus, args.vocab_size)
    if args.tiktoken:
        return tiktoken_encode(args.shared, args.corpus, args.encode_bytes, args.threads)

    size = os.path.getsize(args.corpus)
    nbytes = args.encode_bytes or size
    data = open(args.corpus, "rb").read(nbytes)
    nbytes = data.rfind(b"\n") + 1 if nbytes < size else nbytes  # whole lines, the same bytes for both
    del data
    t = args.threads
    fixtures = os.path.join(args.shared, FIXTURES)
    me = [sys.executable, os.path.abspath(__file__), f"--corpus={args.corpus}", f"--shared={args.shared}"]
    env = dict(os.environ, RAYON_NUM_THREADS=str(t), LMF_NUM_THREADS=str(t))
    print(f"corpus {args.corpus}: {size / 1e6:.1f} MB; threads {t}; machine load {os.getloadavg()[0]:.1f}")

    out, our_rss = child_rss_mb([args.bench, "train", f"--input={args.corpus}",
                                 f"--vocab_size={args.vocab_size}", f"--threads={t}"], env)
    ours = fields(out)
    out, hf_rss = child_rss_mb(me + ["--hf_train", f"--vocab_size={args.vocab_size}"], env)
    hf = fields(out)
    print(f"train vocab {args.vocab_size}: lmforge {float(ours['seconds']):.2f} s "
          f"(pre-tokenize {float(ours['pretokenize_seconds']):.2f} s, merge {float(ours['merge_seconds']):.2f} s), "
          f"peak {our_rss:.0f} MB | HF tokenizers {float(hf['seconds']):.2f} s, peak {hf_rss:.0f} MB | "
          f"speedup {float(hf['seconds']) / float(ours['seconds']):.2f}x, memory ratio {our_rss / hf_rss:.2f}")

    gpt2 = [f"--gpt2_vocab={fixtures}/gpt2_vocab.json", f"--gpt2_merges={fixtures}/gpt2_merges.txt"]
    for threads in sorted({1, t}):
        out, _ = child_rss_mb([args.bench, "encode", f"--input={args.corpus}", f"--max_bytes={nbytes}",
                               f"--threads={threads}"] + gpt2, env)
        ours = fields(out)
        out, _ = child_rss_mb(me + ["--tiktoken", f"--encode_bytes={nbytes}", f"--threads={threads}"], env)
        tk = fields(out)
        print(f"encode GPT-2, {threads} thread(s), {nbytes / 1e6:.1f} MB: lmforge {float(ours['mb_per_s']):.1f} MB/s "
              f"({ours['tokens']} tokens) | tiktoken {float(tk['mb_per_s']):.1f} MB/s ({tk['tokens']} tokens) | "
              f"speedup {float(ours['mb_per_s']) / float(tk['mb_per_s']):.2f}x")

    out, _ = child_rss_mb([args.bench, "corpus_en", f"--input={fixtures}/corpus.en", f"--threads={t}"], env)
    print(f"corpus.en vocab 500: lmforge {1000 * float(fields(out)['best_of_5_seconds']):.1f} ms "
          f"(CS336 reference: 380 ms)")

    out, _ = child_rss_mb([args.bench, "pretokenize", f"--input={args.corpus}"], env)
    pre = fields(out)
    print(f"pre-tokenize, 1 thread: scanner {float(pre['scanner_mb_per_s']):.1f} MB/s | PCRE2 JIT "
          f"{float(pre['pcre2_jit_mb_per_s']):.1f} MB/s | speedup {float(pre['speedup']):.2f}x; "
          f"{pre['pieces']} pieces, {pre['mismatches']} cut differences")


if __name__ == "__main__":
    main()
