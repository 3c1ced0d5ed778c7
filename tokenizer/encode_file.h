// Streaming, parallel encoding of text files into one token file (token_file.h). Files are cut into
// chunks at safe points (corpus_chunks.h), a batch of chunks is encoded at once on all threads, each thread
// with its own pre-token cache, and the ids are appended in order: memory is bounded by the batch size,
// whatever the size of the input. Specials in the text (e.g. <|endoftext|> between documents) become
// their ids. Each file is encoded on its own (no pre-token spans two files) and the ids of the files are
// written one after the other, in the order given.
#ifndef LMFORGE_TOKENIZER_ENCODE_FILE_H_
#define LMFORGE_TOKENIZER_ENCODE_FILE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace lmf::tokenizer {

struct EncodeFileOptions {
  ThreadPool* pool = nullptr;      // null: ThreadPool::Default()
  uint64_t chunk_bytes = 1 << 20;  // target size of one chunk of text
  int chunks_per_thread = 2;       // chunks in flight per thread (memory: threads * this * chunk_bytes)
  // Called after each batch with the text bytes encoded so far, their total, and the tokens written.
  std::function<void(uint64_t bytes_done, uint64_t bytes_total, uint64_t tokens)> progress;
};

struct EncodeFileStats {
  uint64_t bytes = 0;
  uint64_t tokens = 0;
};

absl::StatusOr<EncodeFileStats> EncodeFilesToTokenFile(const Tokenizer& tokenizer,
                                                       const std::vector<std::string>& inputs,
                                                       const std::string& output, const EncodeFileOptions& options);

}  // namespace lmf::tokenizer

#endif  // LMFORGE_TOKENIZER_ENCODE_FILE_H_
