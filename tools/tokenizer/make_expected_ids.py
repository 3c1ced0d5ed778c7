#!/usr/bin/env python3
"""Generates the expected GPT-2 token ids for tokenizer/gpt2_test.cc with tiktoken, offline: tiktoken's
`gpt2` encoding is built from the GPT-2 vocab.json/merges.txt in the shared reference data (tiktoken would
otherwise download its files) with tiktoken.Encoding(name, pat_str, mergeable_ranks, special_tokens).

Writes, under tokenizer/testdata/:
  tiktoken_gpt2_<file>.ids          the ids of each reference text (the texts themselves are not copied),
                                    space-separated, encoded with allowed_special={"<|endoftext|>"}
  tiktoken_gpt2_unicode_cases.txt   `<UTF-8 hex> <comma-separated ids>` for Unicode edge cases made here
Run from the repository root with the pyenv python3 (which has tiktoken):

    python3 tools/tokenizer/make_expected_ids.py [../shared/data]
"""
import json
import os
import random
import sys

import tiktoken

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
FIXTURES = "cs336/assignment1-basics/tests/fixtures"
TEXTS = ["corpus.en", "tinystories_sample.txt", "address.txt", "german.txt",
         "special_token_trailing_newlines.txt", "special_token_double_newlines_non_whitespace.txt"]
ENDOFTEXT = "<|endoftext|>"


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def gpt2_encoding(fixtures):
    byte_decoder = {c: b for b, c in bytes_to_unicode().items()}
    with open(os.path.join(fixtures, "gpt2_vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    ranks = {bytes(byte_decoder[c] for c in token): i for token, i in vocab.items() if token != ENDOFTEXT}
    return tiktoken.Encoding("gpt2_offline", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={ENDOFTEXT: vocab[ENDOFTEXT]})


def unicode_cases():
    cases = ["", " ", "\n", "Hello, world!", "héllo wörld", "🙃", "👨‍👩‍👧‍👦 family", "日本語のテキスト",
             "Ünïcödé façade naïve café", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "e\u0301", "\u00a0\u2009\u3000x", "a\r\nb\r\n",
             "   leading and trailing   ", "tabs\tand\t\tmore", "digits 1234567890 ١٢٣ Ⅻ ½",
             "don't you'll we've they're I'm he'd it's 'S", "<|endoftext|>", "a<|endoftext|>b<|endoftext|><|endoftext|>",
             "<|endoftext|", "<|endoftext|>\n\n<|endoftext|> x", "ÿþ\u0100\u0101", "\x00\x01\x1f\x7f",
             "z" * 300, " " * 257 + "x", "🚀" * 50]
    rng = random.Random(1234)
    pool = (list("abcdefghijklmnopqrstuvwxyz ABC\n\t'.,!?-0123456789") + list("éüßñαβγжЯ中文日本한국٣Ⅻ½😀🚀€©")
            + ["\u0301", "\u00a0", "\u3000", "'s", "'ll", "<|endoftext|>", "  ", "\n\n"])
    for _ in range(200):
        cases.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 60))))
    return cases


def main():
    shared = sys.argv[1] if len(sys.argv) > 1 else "../shared/data"
    fixtures = os.path.join(shared, FIXTURES)
    enc = gpt2_encoding(fixtures)
    out_dir = "tokenizer/testdata"
    for name in TEXTS:
        with open(os.path.join(fixtures, name), encoding="utf-8") as f:
            text = f.read()
        ids = enc.encode(text, allowed_special={ENDOFTEXT})
        assert enc.decode(ids) == text
        with open(os.path.join(out_dir, f"tiktoken_gpt2_{name}.ids"), "w") as f:
            f.write(" ".join(map(str, ids)) + "\n")
    with open(os.path.join(out_dir, "tiktoken_gpt2_unicode_cases.txt"), "w") as f:
        for text in unicode_cases():
            ids = enc.encode(text, allowed_special={ENDOFTEXT})
            f.write(f"{text.encode('utf-8').hex()} {','.join(map(str, ids))}\n")


if __name__ == "__main__":
    main()
