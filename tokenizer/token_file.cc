// Token file reading (validation of the 64-byte header against the file size) and streaming writing.
#include "tokenizer/token_file.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"

namespace lmf::tokenizer {
namespace {

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void PutU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t GetU32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t GetU64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::string EncodeTokenFileHeader(const TokenFileHeader& header) {
  std::string out(kTokenFileHeaderBytes, '\0');
  std::memcpy(out.data(), kTokenFileMagic, 8);
  PutU32(&out[8], header.version);
  PutU32(&out[12], header.bytes_per_token);
  PutU32(&out[16], header.vocab_size);
  PutU32(&out[20], 0);
  PutU64(&out[24], header.num_tokens);
  PutU64(&out[32], header.tokenizer_hash);
  return out;
}

absl::StatusOr<TokenFileReader> TokenFileReader::Open(const std::string& path) {
  auto map = MappedFile::Open(path);
  if (!map.ok()) return map.status();
  TokenFileReader r;
  r.map_ = std::move(*map);
  const size_t file_size = r.map_.size();
  if (file_size < kTokenFileHeaderBytes) {
    return absl::DataLossError(absl::StrCat(path, ": not a token file: ", file_size,
                                            " bytes, shorter than the 64-byte header (truncated or empty)"));
  }
  const auto* p = reinterpret_cast<const unsigned char*>(r.map_.data());
  if (std::memcmp(p, kTokenFileMagic, 8) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a token file: bad magic (expected \"LMFTOKS1\" in the first 8 bytes)"));
  }
  TokenFileHeader& h = r.header_;
  h.version = GetU32(p + 8);
  h.bytes_per_token = GetU32(p + 12);
  h.vocab_size = GetU32(p + 16);
  h.num_tokens = GetU64(p + 24);
  h.tokenizer_hash = GetU64(p + 32);
  if (h.version != kTokenFileVersion) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": token file version ", h.version,
                                                   " is not supported (this build reads version ",
                                                   kTokenFileVersion, ")"));
  }
  if (h.bytes_per_token != 2 && h.bytes_per_token != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": token file header: bytes_per_token is ", h.bytes_per_token, ", expected 2 or 4"));
  }
  if (h.vocab_size == 0 || h.bytes_per_token != BytesPerTokenForVocab(h.vocab_size)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": token file header: vocab_size ", h.vocab_size,
                                                   " does not match bytes_per_token ", h.bytes_per_token));
  }
  // Bytes 20-23 and 40-63 are reserved: version 1 writers (every one so far) write zeros there. A non-zero
  // byte is a field this reader does not know (a newer format that kept the version number) or damage;
  // either way the ids would be read wrong, so the file is refused, naming the first such byte.
  for (const auto& [begin, end] : {std::pair<size_t, size_t>{20, 24}, std::pair<size_t, size_t>{40, 64}}) {
    for (size_t i = begin; i < end; ++i) {
      if (p[i] == 0) continue;
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: token file header: byte %d is 0x%02x, expected 0 (bytes %d-%d are reserved and zero in "
          "version %d token files): written by a newer format version, or damaged",
          path, i, p[i], begin, end - 1, kTokenFileVersion));
    }
  }
  const uint64_t payload = file_size - kTokenFileHeaderBytes;
  if (h.num_tokens > payload / h.bytes_per_token) {
    // (The byte count in long double: num_tokens * width can overflow 64 bits in a corrupt header.)
    return absl::DataLossError(
        absl::StrCat(path, ": token file truncated: header says ", h.num_tokens, " tokens (",
                     absl::StrFormat("%.0Lf", static_cast<long double>(h.num_tokens) * h.bytes_per_token),
                     " bytes) but only ", payload, " bytes follow the header"));
  }
  if (payload != h.num_tokens * h.bytes_per_token) {
    return absl::DataLossError(absl::StrCat(path, ": token file has ",
                                            payload - h.num_tokens * h.bytes_per_token,
                                            " trailing bytes after its ", h.num_tokens, " tokens"));
  }
  r.ids_ = p + kTokenFileHeaderBytes;
  return r;
}

uint32_t TokenFileReader::at(uint64_t i) const {
  LMF_CHECK_LT(i, header_.num_tokens);
  if (header_.bytes_per_token == 2) {
    const unsigned char* q = ids_ + 2 * i;
    return static_cast<uint32_t>(q[0]) | (static_cast<uint32_t>(q[1]) << 8);
  }
  return GetU32(ids_ + 4 * i);
}

uint64_t TokenFileReader::FirstIdAtOrAbove(uint32_t limit, uint64_t begin, uint64_t end) const {
  LMF_CHECK(begin <= end && end <= header_.num_tokens) << "[" << begin << ", " << end << ")";
  if (header_.bytes_per_token == 2) {
    for (uint64_t i = begin; i < end; ++i) {
      const unsigned char* q = ids_ + 2 * i;
      if ((static_cast<uint32_t>(q[0]) | (static_cast<uint32_t>(q[1]) << 8)) >= limit) return i;
    }
    return end;
  }
  for (uint64_t i = begin; i < end; ++i) {
    if (GetU32(ids_ + 4 * i) >= limit) return i;
  }
  return end;
}

absl::Status TokenFileReader::Read(uint64_t start, uint64_t count, int32_t* out) const {
  if (start > header_.num_tokens || count > header_.num_tokens - start) {
    return absl::OutOfRangeError(absl::StrCat(path(), ": read of tokens [", start, ", ", start + count,
                                              ") past the end (", header_.num_tokens, " tokens)"));
  }
  if (header_.bytes_per_token == 2) {
    const unsigned char* q = ids_ + 2 * start;
    for (uint64_t i = 0; i < count; ++i) {
      out[i] = static_cast<int32_t>(static_cast<uint32_t>(q[2 * i]) | (static_cast<uint32_t>(q[2 * i + 1]) << 8));
    }
  } else {
    const unsigned char* q = ids_ + 4 * start;
    for (uint64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(GetU32(q + 4 * i));
  }
  return absl::OkStatus();
}

absl::StatusOr<TokenFileWriter> TokenFileWriter::Create(const std::string& path, uint32_t vocab_size,
                                                        uint64_t tokenizer_hash) {
  if (vocab_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": token file needs a vocab_size > 0"));
  }
  if (vocab_size > static_cast<uint32_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": vocab_size ", vocab_size, " does not fit the int32 ids readers return"));
  }
  auto file = AtomicFileWriter::Create(path);
  if (!file.ok()) return file.status();
  TokenFileWriter w;
  w.path_ = path;
  w.file_ = std::move(*file);
  w.header_.vocab_size = vocab_size;
  w.header_.bytes_per_token = BytesPerTokenForVocab(vocab_size);
  w.header_.tokenizer_hash = tokenizer_hash;
  if (absl::Status s = w.file_.Write(EncodeTokenFileHeader(w.header_)); !s.ok()) return s;
  return w;
}

absl::Status TokenFileWriter::Append(const uint32_t* ids, size_t n) {
  const uint32_t width = header_.bytes_per_token;
  buffer_.resize(n * width);
  char* q = buffer_.data();
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] >= header_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": token id ", ids[i], " (at position ",
                                                     header_.num_tokens + i, ") is >= vocab_size ",
                                                     header_.vocab_size));
    }
    for (uint32_t b = 0; b < width; ++b) q[width * i + b] = static_cast<char>((ids[i] >> (8 * b)) & 0xff);
  }
  if (absl::Status s = file_.Write(buffer_); !s.ok()) return s;
  header_.num_tokens += n;
  return absl::OkStatus();
}

absl::Status TokenFileWriter::Commit() {
  if (absl::Status s = file_.WriteAt(0, EncodeTokenFileHeader(header_)); !s.ok()) return s;
  return file_.Commit();
}

}  // namespace lmf::tokenizer
