// Splits text files into chunks at safe cuts (special-token starts, or newlines after a non-space ASCII
// byte; see NextSafeCut) so that chunks can be pre-tokenized in parallel and give exactly the pre-tokens of
// the whole file. Files are read with pread, a chunk at a time, never as one string: memory stays
// proportional to the chunk size times the number of threads, whatever the file size.
#ifndef LMFORGE_TOKENIZER_CORPUS_CHUNKS_H_
#define LMFORGE_TOKENIZER_CORPUS_CHUNKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tokenizer/pretokenize.h"

namespace lmf::tokenizer {

struct CorpusChunk {
  int file_index = 0;  // into the list of paths given to PlanCorpusChunks
  uint64_t begin = 0;  // byte range in that file
  uint64_t end = 0;
};

// Chunks of about target_bytes each (longer where no safe cut is near), in file order, covering every
// byte of every file. Missing or unreadable files are errors naming the file.
absl::StatusOr<std::vector<CorpusChunk>> PlanCorpusChunks(const std::vector<std::string>& paths,
                                                          const SpecialTokenSplitter& specials,
                                                          uint64_t target_bytes);

// An open file that chunks are read from with pread (thread-safe).
class CorpusFile {
 public:
  static absl::StatusOr<CorpusFile> Open(const std::string& path);
  CorpusFile(CorpusFile&& other) noexcept;
  CorpusFile& operator=(CorpusFile&& other) noexcept;
  CorpusFile(const CorpusFile&) = delete;
  CorpusFile& operator=(const CorpusFile&) = delete;
  ~CorpusFile();

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads bytes [begin, end) into *out (resized).
  absl::Status Read(uint64_t begin, uint64_t end, std::string* out) const;

 private:
  CorpusFile() = default;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
};

}  // namespace lmf::tokenizer

#endif  // LMFORGE_TOKENIZER_CORPUS_CHUNKS_H_
