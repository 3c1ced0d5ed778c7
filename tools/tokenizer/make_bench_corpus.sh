#!/usr/bin/env bash
# Builds the >= 100 MB English benchmark corpus for //tokenizer:bpe_benchmark from Debian packages (the
# only sources of real English text reachable offline here): the Linux kernel and Python/Sphinx
# documentation sources (reStructuredText), Perl's POD manuals, the GNU Collaborative International
# Dictionary of English (Webster 1913), git's manuals, and the text of the Django, SQLAlchemy and
# PostgreSQL HTML manuals. Non-English kernel translations are left out. The packages are downloaded with
# `apt-get download` and unpacked with dpkg-deb, nothing is installed.
#
#   tools/tokenizer/make_bench_corpus.sh /tmp/tok_corpus     # writes /tmp/tok_corpus/english.txt
set -euo pipefail
out="${1:-/tmp/tok_corpus}"
mkdir -p "$out/debs" "$out/root"
cd "$out/debs"
packages=(linux-doc-6.12 python3.11-doc perl-doc dict-gcide git-doc python-django-doc python-sqlalchemy-doc
          postgresql-doc-15 sphinx-doc)
apt-get download "${packages[@]}"
for deb in *.deb; do dpkg-deb -x "$deb" "$out/root"; done
cd "$out/root"
{
  find . -name '*.txt' -path '*_sources*' -not -path '*translations*' -print0 | sort -z | xargs -0 cat
  find . -name '*.pod' -print0 | sort -z | xargs -0 cat
  zcat usr/share/dictd/gcide.dict.dz
  find usr/share/doc/git-doc -name '*.txt' -print0 | sort -z | xargs -0 cat
  find usr/share/doc/python-django-doc usr/share/doc/python-sqlalchemy-doc usr/share/doc/postgresql-doc-15 \
    -name '*.html' -print0 | sort -z | xargs -0 python3 -c '
import html, re, sys
for path in sys.argv[1:]:
    text = open(path, encoding="utf-8", errors="replace").read()
    text = re.sub(r"(?is)<(script|style)[^>]*>.*?</\1>", " ", text)
    text = html.unescape(re.sub(r"(?s)<[^>]+>", " ", text))
    text = re.sub(r"[ \t]+", " ", text)
    sys.stdout.write(re.sub(r"\n\s*\n+", "\n\n", text))
'
} >"$out/english.raw"
# A few manuals are in Latin-1: make the whole corpus valid UTF-8 (HF tokenizers refuses anything else).
python3 -c 'import sys; open(sys.argv[2], "w", encoding="utf-8").write(open(sys.argv[1], encoding="utf-8", errors="replace").read())' \
  "$out/english.raw" "$out/english.txt"
rm "$out/english.raw"
ls -l "$out/english.txt"
