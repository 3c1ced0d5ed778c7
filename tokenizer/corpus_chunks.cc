// Chunk planning: at each multiple of the target size, a window of the file is read and searched for the
// next safe cut; the window grows until one is found or the file ends.
#include "tokenizer/corpus_chunks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lmf::tokenizer {

absl::StatusOr<CorpusFile> CorpusFile::Open(const std::string& path) {
  CorpusFile f;
  f.path_ = path;
  // A pipe or device has no size (st_size 0) and cannot be read by offset: it would count as an empty corpus.
  // Checked before the open as well, which would wait forever on a pipe nobody writes to.
  const auto not_regular = [&]() {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": is not a regular file (a pipe or device); corpora are split by offset and read in parallel, so "
        "save the text to a file first"));
  };
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return not_regular();
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0) {
    const int err = errno;
    std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::InvalidArgumentError(msg);
  }
  if (::fstat(f.fd_, &st) != 0) return absl::InternalError(absl::StrCat(path, ": stat failed: ", std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, ": is a folder, expected a text file"));
  if (!S_ISREG(st.st_mode)) return not_regular();
  f.size_ = static_cast<uint64_t>(st.st_size);
  return f;
}

CorpusFile::CorpusFile(CorpusFile&& other) noexcept { *this = std::move(other); }

CorpusFile& CorpusFile::operator=(CorpusFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    path_ = std::move(other.path_);
  }
  return *this;
}

CorpusFile::~CorpusFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status CorpusFile::Read(uint64_t begin, uint64_t end, std::string* out) const {
  out->resize(end - begin);
  uint64_t done = 0;
  while (done < end - begin) {
    const ssize_t n = ::pread(fd_, out->data() + done, end - begin - done, static_cast<off_t>(begin + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat(path_, ": read failed: ", std::strerror(errno)));
    }
    if (n == 0) return absl::DataLossError(absl::StrCat(path_, ": file shrank while being read"));
    done += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CorpusChunk>> PlanCorpusChunks(const std::vector<std::string>& paths,
                                                          const SpecialTokenSplitter& specials,
                                                          uint64_t target_bytes) {
  target_bytes = std::max<uint64_t>(target_bytes, 1);
  std::vector<CorpusChunk> chunks;
  std::string window;
  for (size_t f = 0; f < paths.size(); ++f) {
    auto file = CorpusFile::Open(paths[f]);
    if (!file.ok()) return file.status();
    const uint64_t size = file->size();
    uint64_t begin = 0;
    while (begin < size) {
      const uint64_t target = begin + target_bytes;
      if (target >= size) {
        chunks.push_back({static_cast<int>(f), begin, size});
        break;
      }
      // The window starts early enough to see a special that covers `target`.
      const uint64_t back = std::min<uint64_t>(target - begin, std::max<size_t>(specials.max_length(), 1));
      uint64_t span = 1 << 16;
      uint64_t cut = size;
      while (true) {
        const uint64_t w_begin = target - back;
        const uint64_t w_end = std::min(size, target + span);
        if (absl::Status s = file->Read(w_begin, w_end, &window); !s.ok()) return s;
        const size_t p = NextSafeCut(window, back, specials);
        // A cut near the window's end may sit inside a special that the window cuts off (or be no cut
        // at all); it counts only at the end of the file. Otherwise look further.
        if (p + specials.max_length() < window.size() || w_end == size) {
          cut = w_begin + p;
          break;
        }
        span *= 4;
      }
      chunks.push_back({static_cast<int>(f), begin, cut});
      begin = cut;
    }
  }
  return chunks;
}

}  // namespace lmf::tokenizer
