// The Debian documentation corpus (see debian_docs.h).
#include "experiments/quickstart/debian_docs.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"

namespace lmf::quickstart {
namespace {

// README, NEWS, FAQ (any case, any suffix but compressed or HTML ones), and *.txt, *.md, *.rst.
bool IsDocumentName(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* skip : {".gz", ".xz", ".bz2", ".zst", ".html", ".htm", ".pdf", ".png", ".svg"}) {
    if (absl::EndsWith(name, skip)) return false;
  }
  for (const char* prefix : {"readme", "news", "faq"}) {
    if (absl::StartsWith(name, prefix)) return true;
  }
  for (const char* suffix : {".txt", ".md", ".rst"}) {
    if (absl::EndsWith(name, suffix)) return !absl::StartsWith(name, "license") && !absl::StartsWith(name, "copying");
  }
  return false;
}

// Valid UTF-8 without NUL or other control characters than tab, newline, carriage return and form feed.
bool IsText(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f') return false;
      ++i;
      continue;
    }
    const int extra = (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    if (extra < 0 || i + static_cast<size_t>(extra) >= s.size()) return false;  // a bad or cut-off sequence
    for (int k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += 1 + extra;
  }
  return true;
}

}  // namespace

absl::StatusOr<DocsCorpus> WriteDebianDocsCorpus(const DocsCorpusOptions& options, const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_directory(options.root, error)) {
    return absl::NotFoundError(absl::StrCat("--data=", kDebianDocsData, ": ", options.root,
                                            " is not a folder (Debian installs package documentation there)"));
  }
  std::vector<std::string> paths;
  for (fs::recursive_directory_iterator it(options.root, fs::directory_options::skip_permission_denied, error), end;
       !error && it != end; it.increment(error)) {
    if (it->is_regular_file(error) && !it->is_symlink(error) && IsDocumentName(it->path().filename().string())) {
      paths.push_back(it->path().string());
    }
  }
  std::sort(paths.begin(), paths.end());
  DocsCorpus corpus;
  std::string text;
  for (const std::string& path : paths) {
    if (corpus.bytes >= options.max_bytes) break;
    absl::StatusOr<std::string> doc = ReadFile(path);
    if (!doc.ok() || doc->size() < 200 || !IsText(*doc)) {  // unreadable, a stub, or not text
      ++corpus.skipped;
      continue;
    }
    absl::StrAppend(&text, *doc, doc->back() == '\n' ? "" : "\n", "<|endoftext|>\n");
    corpus.bytes += doc->size();
    ++corpus.files;
  }
  if (corpus.bytes < options.min_bytes) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "--data=%s: %s holds %.2f MB of plain-text documentation in %d files (README, *.txt, *.md, *.rst, NEWS, "
        "FAQ), less than the %.1f MB the quickstart needs: install documentation packages (e.g. `apt-get install "
        "python3-doc git-doc`), or pass --data with your own text files",
        kDebianDocsData, options.root, corpus.bytes / 1e6, corpus.files, options.min_bytes / 1e6));
  }
  if (absl::Status s = WriteFileAtomically(out, text); !s.ok()) return s;
  return corpus;
}

}  // namespace lmf::quickstart
