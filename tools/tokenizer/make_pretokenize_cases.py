#!/usr/bin/env python3
"""Generates tokenizer/testdata/pretokenize_cases.txt: random Unicode strings (fixed seed) and their splits
by Python's `regex` module with the GPT-2 pattern, the reference for the pre-tokenizer differential test.
Each line is `<UTF-8 of the string in hex> <byte length of each piece, comma-separated>`. Made with regex
2024.11.6 (Unicode 16.0, the version tiktoken and HF tokenizers class characters by; see
make_unicode_tables.py), from the repository root:

    /tmp/rgx/bin/python tools/tokenizer/make_pretokenize_cases.py
"""
import importlib.metadata
import random
import sys

import regex

REGEX_VERSION = "2024.11.6"

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
NUM_CASES = 3000

# Pools that exercise every branch: ASCII words and contractions, every kind of whitespace, letters and
# numbers outside ASCII (Latin-1, Greek, Cyrillic, CJK, Arabic-Indic and Roman numerals, superscripts),
# combining marks (neither letter nor number), punctuation, emoji and symbols beyond the BMP.
POOLS = [
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    list("0123456789"),
    [" ", " ", " ", "\n", "\t", "\r", "\x0b", "\x0c", "\u00a0", "\u2009", "\u3000", "\u2028", "\u0085", "\x1c"],
    ["'", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'x"],
    list(".,;:!?-_()[]{}\"/\\@#$%^&*+=<>|~`"),
    list("éüßñçÆøÅ") + list("αβγΩ") + list("жЯщ") + list("中文字日本語") + list("한국"),
    list("٠١٢٣") + list("ⅠⅡⅢ") + list("²³½") + list("０１２"),
    ["\u0301", "\u0308", "\u20dd", "\u200d"],
    ["😀", "🚀", "𝔘", "𐍈", "\U0001F468\u200d\U0001F469", "€", "©", "™"],
    [" the", " of", " and", "hello", "world", " don't", "It's", "  ", "\n\n", " \n ", "   x"],
]


def random_string(rng):
    length = rng.randint(0, 24)
    parts = []
    for _ in range(length):
        pool = rng.choice(POOLS)
        parts.append(rng.choice(pool))
    if rng.random() < 0.05:  # random code points from anywhere (valid scalar values only)
        for _ in range(rng.randint(1, 6)):
            cp = rng.randint(0, 0x10FFFF)
            while 0xD800 <= cp <= 0xDFFF:
                cp = rng.randint(0, 0x10FFFF)
            parts.append(chr(cp))
    return "".join(parts)


def main():
    version = importlib.metadata.version("regex")
    if version != REGEX_VERSION:
        sys.exit(f"regex {version} is installed; the cases must be made with regex {REGEX_VERSION}")
    rng = random.Random(20260407)
    pattern = regex.compile(GPT2_PATTERN)
    with open("tokenizer/testdata/pretokenize_cases.txt", "w", encoding="ascii") as out:
        for _ in range(NUM_CASES):
            text = random_string(rng)
            pieces = pattern.findall(text)
            assert "".join(pieces) == text
            lengths = ",".join(str(len(p.encode("utf-8"))) for p in pieces)
            out.write(f"{text.encode('utf-8').hex()} {lengths}\n")


if __name__ == "__main__":
    main()
