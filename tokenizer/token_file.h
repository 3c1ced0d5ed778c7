// Token files: a flat little-endian stream of token ids (documents separated by the end-of-text special
// token) behind a 64-byte header naming the element width, the tokenizer's vocab size and its hash. The
// tokenizer's `encode` writes them; the trainer's data loader memory-maps them. Depends only on //base and
// absl so the trainer can read them without the BPE code.
//
// Layout (all little-endian):
//   0  8  magic "LMFTOKS1"          24 8  uint64 num_tokens
//   8  4  uint32 version = 1        32 8  uint64 tokenizer_hash (Tokenizer::Hash())
//   12 4  uint32 bytes_per_token    40 24 reserved, zero
//   16 4  uint32 vocab_size
//   20 4  uint32 reserved = 0
// bytes_per_token is 2 (uint16) when vocab_size <= 65536, else 4 (uint32). The file size must equal
// 64 + num_tokens * bytes_per_token. The reserved bytes (20-23, 40-63) are written as zeros, and the reader
// refuses a file with any of them non-zero (a newer format's field it cannot read, or damage), naming the
// byte; a new field there must come with a new version.
#ifndef LMFORGE_TOKENIZER_TOKEN_FILE_H_
#define LMFORGE_TOKENIZER_TOKEN_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/file.h"

namespace lmf::tokenizer {

inline constexpr char kTokenFileMagic[8] = {'L', 'M', 'F', 'T', 'O', 'K', 'S', '1'};
inline constexpr uint32_t kTokenFileVersion = 1;
inline constexpr size_t kTokenFileHeaderBytes = 64;

struct TokenFileHeader {
  uint32_t version = kTokenFileVersion;
  uint32_t bytes_per_token = 2;
  uint32_t vocab_size = 0;
  uint64_t num_tokens = 0;
  uint64_t tokenizer_hash = 0;
};

// 2 when every id < vocab_size fits in uint16, else 4.
inline uint32_t BytesPerTokenForVocab(uint32_t vocab_size) { return vocab_size <= 65536u ? 2u : 4u; }

// A read-only memory map of a token file, validated on Open (magic, version, width, vocab, size).
class TokenFileReader {
 public:
  static absl::StatusOr<TokenFileReader> Open(const std::string& path);
  TokenFileReader(TokenFileReader&&) = default;
  TokenFileReader& operator=(TokenFileReader&&) = default;

  const TokenFileHeader& header() const { return header_; }
  uint64_t size() const { return header_.num_tokens; }  // num_tokens
  // Id i; i < size() is the caller's invariant (checked).
  uint32_t at(uint64_t i) const;
  // Copies ids [start, start + count) into out, widened to int32. A range past the end is an error.
  absl::Status Read(uint64_t start, uint64_t count, int32_t* out) const;
  // The position of the first id >= limit in [begin, end) (end <= size(), checked), or end when there is
  // none. Reads the mapped bytes directly (no copy).
  uint64_t FirstIdAtOrAbove(uint32_t limit, uint64_t begin, uint64_t end) const;
  const std::string& path() const { return map_.path(); }

 private:
  TokenFileReader() = default;
  MappedFile map_;
  TokenFileHeader header_;
  const unsigned char* ids_ = nullptr;  // first id, just past the header
};

// Streams ids into a token file atomically: a placeholder header is written first and patched with the
// token count at Commit(); an uncommitted writer leaves no file behind.
class TokenFileWriter {
 public:
  static absl::StatusOr<TokenFileWriter> Create(const std::string& path, uint32_t vocab_size,
                                                uint64_t tokenizer_hash);
  TokenFileWriter(TokenFileWriter&&) = default;
  TokenFileWriter& operator=(TokenFileWriter&&) = default;

  // Appends n ids; an id >= vocab_size is an error and nothing of that call is written.
  absl::Status Append(const uint32_t* ids, size_t n);
  absl::Status Commit();
  uint64_t num_tokens() const { return header_.num_tokens; }
  const TokenFileHeader& header() const { return header_; }

 private:
  TokenFileWriter() = default;
  std::string path_;
  AtomicFileWriter file_;
  TokenFileHeader header_;
  std::string buffer_;  // reused encoding buffer
};

// The 64 header bytes for `header` (exposed for tests that build corrupt files).
std::string EncodeTokenFileHeader(const TokenFileHeader& header);

}  // namespace lmf::tokenizer

#endif  // LMFORGE_TOKENIZER_TOKEN_FILE_H_
