// A corpus of real English for the quickstart (`--data=debian-docs`): the plain-text documentation that
// Debian packages install under /usr/share/doc (READMEs, *.txt, *.md, *.rst, NEWS, FAQs), concatenated in
// path order, each file a document ended by <|endoftext|>. Compressed files, HTML, license texts and files
// that are not UTF-8 text are left out. More text comes with more documentation packages (e.g.
// `apt-get install python3-doc git-doc`); the tokenizer benchmark's larger corpus
// (tools/tokenizer/make_bench_corpus.sh) unpacks such packages without installing them.
#ifndef LMFORGE_EXPERIMENTS_QUICKSTART_DEBIAN_DOCS_H_
#define LMFORGE_EXPERIMENTS_QUICKSTART_DEBIAN_DOCS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace lmf::quickstart {

// The name --data takes for this corpus.
inline constexpr char kDebianDocsData[] = "debian-docs";

struct DocsCorpusOptions {
  std::string root = "/usr/share/doc";
  uint64_t max_bytes = 12 << 20;  // stop after the file that passes this
  uint64_t min_bytes = 2 << 20;   // less is refused: a sweep of the quickstart's size needs this much text
};

struct DocsCorpus {
  int files = 0;       // documents written
  int skipped = 0;     // candidate files that were not text
  uint64_t bytes = 0;  // text written (without the separators)
};

// Writes the corpus to `out` (atomically). FailedPrecondition, naming the folder, the text found and how to
// get more, when under options.min_bytes; NotFound when the folder is missing.
absl::StatusOr<DocsCorpus> WriteDebianDocsCorpus(const DocsCorpusOptions& options, const std::string& out);

}  // namespace lmf::quickstart

#endif  // LMFORGE_EXPERIMENTS_QUICKSTART_DEBIAN_DOCS_H_
