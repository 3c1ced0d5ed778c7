// File helpers: POSIX I/O with errno turned into absl::Status messages that name the path.
#include "base/file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lmf {
namespace {

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  const int err = errno;
  std::string msg = absl::StrCat(path, ": ", what, " failed: ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

absl::Status WriteAll(int fd, const char* data, size_t size, const std::string& path, int64_t offset = -1) {
  while (size > 0) {
    const ssize_t n = offset < 0 ? ::write(fd, data, size) : ::pwrite(fd, data, size, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write", path);
    }
    data += n;
    size -= static_cast<size_t>(n);
    if (offset >= 0) offset += n;
  }
  return absl::OkStatus();
}

// The temp file of an atomic write to `path`: "<name>.tmp.<pid>" beside it. Where that name would pass the
// filesystem's limit on a name (NAME_MAX, 255 bytes on most; pathconf says) or the path PATH_MAX, the name is
// cut short and a hash of the whole name put in its place, "<start of name>.<16 hex digits>.tmp.<pid>":
// still in the same folder (the rename must not cross filesystems), still unique per path and process, and
// still ending in ".tmp.<pid>". The cut backs off to the start of a UTF-8 character.
std::string TempPathFor(const std::string& path) {
  const std::string suffix = absl::StrCat(".tmp.", ::getpid());
  const size_t slash = path.rfind('/');
  const size_t name_start = slash == std::string::npos ? 0 : slash + 1;
  const std::string name = path.substr(name_start);
  const long name_max_conf = ::pathconf(DirName(path).c_str(), _PC_NAME_MAX);
  size_t name_max = name_max_conf > 0 ? static_cast<size_t>(name_max_conf) : NAME_MAX;
  const size_t path_max = PATH_MAX - 1;  // bytes, without the terminating NUL
  name_max = std::min(name_max, path_max > name_start ? path_max - name_start : size_t{0});
  if (name.size() + suffix.size() <= name_max) return absl::StrCat(path, suffix);
  uint64_t hash = 14695981039346656037ull;  // FNV-1a, 64 bits
  for (const char c : name) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  const std::string tail = absl::StrCat(".", absl::Hex(hash, absl::kZeroPad16), suffix);
  size_t keep = name_max > tail.size() ? std::min(name.size(), name_max - tail.size()) : 0;
  while (keep > 0 && keep < name.size() && (static_cast<unsigned char>(name[keep]) & 0xC0) == 0x80) --keep;
  return absl::StrCat(path.substr(0, name_start), name.substr(0, keep), tail);
}

// The temp files of live AtomicFileWriters, for RemoveTempFilesOnSignals' handler, which may only make
// async-signal-safe calls: fixed slots, each a path copied in and a state word published with release order.
// The word's low two bits are the state, the rest a count of the slot's uses, so the handler, which copies a
// live path and then reads the word again, can tell that the slot was freed and refilled under it (another
// thread) and skip the torn copy.
constexpr int kTempSlots = 64;
enum TempSlotState : uint64_t { kFree = 0, kFilling = 1, kLive = 2 };
std::atomic<uint64_t> temp_slot_word[kTempSlots];
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the signal handler needs lock-free atomics");
char temp_slot_path[kTempSlots][PATH_MAX];

// A slot holding `path`, or -1 where all are taken or the path is too long (the file is then only not
// removed on a signal).
int RegisterTempFile(const std::string& path) {
  if (path.size() >= PATH_MAX) return -1;
  for (int i = 0; i < kTempSlots; ++i) {
    uint64_t word = temp_slot_word[i].load(std::memory_order_relaxed);
    if ((word & 3) != kFree) continue;
    const uint64_t uses = (word >> 2) + 1;
    if (!temp_slot_word[i].compare_exchange_strong(word, uses << 2 | kFilling, std::memory_order_acquire))
      continue;
    std::memcpy(temp_slot_path[i], path.c_str(), path.size() + 1);
    temp_slot_word[i].store(uses << 2 | kLive, std::memory_order_release);
    return i;
  }
  return -1;
}

void UnregisterTempFile(int slot) {
  if (slot < 0) return;
  const uint64_t word = temp_slot_word[slot].load(std::memory_order_relaxed);
  temp_slot_word[slot].store((word >> 2) << 2 | kFree, std::memory_order_release);
}

extern "C" void RemoveTempFilesAndDie(int sig) {
  const int saved_errno = errno;
  static char path[PATH_MAX];  // one handler runs at a time: SA_RESETHAND, then the signal ends the process
  for (int i = 0; i < kTempSlots; ++i) {
    const uint64_t before = temp_slot_word[i].load(std::memory_order_acquire);
    if ((before & 3) != kLive) continue;
    std::memcpy(path, temp_slot_path[i], PATH_MAX);
    path[PATH_MAX - 1] = '\0';
    // The word read again by a read-modify-write that changes nothing: its release half keeps the copy
    // above before it, as an acquire fence and a plain load would, without a fence, which ThreadSanitizer
    // cannot model (GCC refuses atomic_thread_fence under -fsanitize=thread). Lock-free, so signal-safe.
    if (temp_slot_word[i].fetch_add(0, std::memory_order_acq_rel) == before) ::unlink(path);
  }
  errno = saved_errno;
  ::signal(sig, SIG_DFL);  // installed with SA_RESETHAND too; again in case another thread got here first
  ::raise(sig);
}

// What a path that is not a regular file is, for errors: "a folder", "a pipe", "a device", ...
const char* KindOfNonRegular(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a pipe";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Opens `path` for reading and stats it: the descriptor and its size, or an error naming the path. Anything
// but a regular file is InvalidArgument, except a pipe where `allow_pipe` (read to its end, its size unknown:
// 0): a pipe's st_size is 0, so a mapped or sized read would see it as empty and go on silently. The error is
// taken from errno before anything else can change it.
struct OpenedFile {
  int fd = -1;
  size_t size = 0;
};
absl::StatusOr<OpenedFile> OpenRegularFile(const std::string& path, bool allow_pipe) {
  // The kind is checked before the open too: opening a pipe nobody writes to would wait forever.
  const auto refuse = [&](mode_t mode) -> absl::Status {
    if (S_ISREG(mode) || (allow_pipe && S_ISFIFO(mode))) return absl::OkStatus();
    if (S_ISDIR(mode))
      return absl::InvalidArgumentError(absl::StrCat(path, ": is a folder, expected a file"));
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": is ", KindOfNonRegular(mode), ", expected a regular file (save the data to a file first)"));
  };
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (absl::Status s = refuse(st.st_mode); !s.ok()) return s;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open", path);
  if (::fstat(fd, &st) != 0) {
    absl::Status s = ErrnoError("stat", path);
    ::close(fd);
    return s;
  }
  if (absl::Status s = refuse(st.st_mode); !s.ok()) {
    ::close(fd);
    return s;
  }
  return OpenedFile{fd, static_cast<size_t>(st.st_size)};
}

}  // namespace

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  absl::StatusOr<OpenedFile> opened = OpenRegularFile(path, /*allow_pipe=*/true);
  if (!opened.ok()) return opened.status();
  const int fd = opened->fd;
  std::string out;
  out.reserve(opened->size);
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status s = ErrnoError("read", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view data) {
  auto writer = AtomicFileWriter::Create(path);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = writer->Write(data); !s.ok()) return s;
  return writer->Commit();
}

absl::Status MakeDirs(const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("mkdir", partial);
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": exists and is not a folder"));
  }
  return absl::OkStatus();
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

absl::StatusOr<std::vector<std::string>> ListFolder(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoError("open folder", dir);
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::string UserWorkingDirectory() {
  for (const char* name : {"LMF_WORKING_DIRECTORY", "BUILD_WORKING_DIRECTORY"}) {
    const char* dir = std::getenv(name);
    if (dir != nullptr && *dir == '/') return dir;
  }
  char buffer[PATH_MAX];
  if (::getcwd(buffer, sizeof(buffer)) != nullptr) return buffer;
  return "";
}

std::string UserPath(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  const std::string base = UserWorkingDirectory();
  return base.empty() ? path : absl::StrCat(base, "/", path);
}

absl::Status RemoveFlatFolder(const std::string& dir) {
  auto names = ListFolder(dir);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    const std::string path = dir + "/" + name;
    if (::unlink(path.c_str()) != 0) return ErrnoError("delete", path);
  }
  if (::rmdir(dir.c_str()) != 0) return ErrnoError("delete folder", dir);
  return absl::OkStatus();
}

absl::Status SyncFolder(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open folder", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoError("fsync folder", dir);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> FileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoError("stat", path);
  return static_cast<uint64_t>(st.st_size);
}

// ---- MappedFile ----

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  absl::StatusOr<OpenedFile> opened = OpenRegularFile(path, /*allow_pipe=*/false);
  if (!opened.ok()) return opened.status();
  const int fd = opened->fd;
  MappedFile m;
  m.path_ = path;
  m.size_ = opened->size;
  if (m.size_ > 0) {
    void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      absl::Status s = ErrnoError("mmap", path);
      ::close(fd);
      return s;
    }
    m.data_ = static_cast<const char*>(p);
  }
  ::close(fd);
  return m;
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

MappedFile::~MappedFile() { Reset(); }

void MappedFile::Reset() {
  if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

// ---- AtomicFileWriter ----

absl::Status CheckFileCanBeWritten(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("an empty path where a file to write was expected");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": is ", KindOfNonRegular(st.st_mode),
        "; an output is written to a temporary file and renamed over its path, which would replace it: "
        "give the path of a regular file"));
  }
  const std::string dir = DirName(path);
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return absl::NotFoundError(absl::StrCat(path, ": its folder ", dir, " does not exist"));
    return ErrnoError("stat folder", dir);
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", dir, " is not a folder"));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot create files in its folder ", dir, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Create(const std::string& path) {
  if (absl::Status s = CheckFileCanBeWritten(path); !s.ok()) return s;
  AtomicFileWriter w;
  w.path_ = path;
  w.tmp_path_ = TempPathFor(path);
  // Registered before it exists, so that no moment leaves a created file unregistered.
  w.temp_slot_ = RegisterTempFile(w.tmp_path_);
  w.fd_ = ::open(w.tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.fd_ < 0) {
    absl::Status s = ErrnoError(absl::StrCat("create (as the temporary file ", w.tmp_path_, ")"), path);
    UnregisterTempFile(std::exchange(w.temp_slot_, -1));
    return s;
  }
  return w;
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept { *this = std::move(other); }

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    fd_ = std::exchange(other.fd_, -1);
    temp_slot_ = std::exchange(other.temp_slot_, -1);
    bytes_written_ = std::exchange(other.bytes_written_, 0);
    path_ = std::move(other.path_);
    tmp_path_ = std::move(other.tmp_path_);
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

void AtomicFileWriter::Abandon() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
    fd_ = -1;
  }
  UnregisterTempFile(std::exchange(temp_slot_, -1));
}

absl::Status AtomicFileWriter::Write(std::string_view data) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": write after commit"));
  absl::Status s = WriteAll(fd_, data.data(), data.size(), tmp_path_);
  if (s.ok()) bytes_written_ += data.size();
  return s;
}

absl::StatusOr<FileLock> FileLock::Acquire(const std::string& path) {
  // Never through a symbolic link: the lock is truncated and written, which would clobber the link's target.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0 && errno == ELOOP) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is a symbolic link; a lock file must be a plain file (remove the link)"));
  }
  if (fd < 0) return ErrnoError("open", path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char held_by[300] = {0};
    ssize_t n = ::pread(fd, held_by, sizeof(held_by) - 1, 0);
    // A holder that has just taken the lock writes its pid a moment later: wait up to 100 ms for it.
    for (int tries = 0; n <= 0 && err == EWOULDBLOCK && tries < 10; ++tries) {
      ::usleep(10000);
      n = ::pread(fd, held_by, sizeof(held_by) - 1, 0);
    }
    ::close(fd);
    if (err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP || err == EINVAL) {
      return absl::UnimplementedError(
          absl::StrCat(path, ": this filesystem does not support locks (flock: ", std::strerror(err), ")"));
    }
    if (err != EWOULDBLOCK) {
      errno = err;
      return ErrnoError("flock", path);
    }
    std::string holder = n > 0 ? std::string(held_by, static_cast<size_t>(n)) : "";
    holder.erase(std::remove(holder.begin(), holder.end(), '\n'), holder.end());
    return absl::FailedPreconditionError(absl::StrCat(path, " is locked by another process",
                                                      holder.empty() ? "" : absl::StrCat(" (", holder, ")")));
  }
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  const std::string pid = absl::StrCat("pid ", ::getpid(), host[0] ? absl::StrCat(" on ", host) : "", "\n");
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    absl::Status s = ErrnoError("write", path);
    ::close(fd);
    return s;
  }
  return FileLock(fd);
}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

absl::Status AtomicFileWriter::WriteAt(uint64_t offset, std::string_view data) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": write after commit"));
  if (offset + data.size() > bytes_written_) {
    return absl::OutOfRangeError(absl::StrCat(path_, ": WriteAt past the bytes written so far"));
  }
  return WriteAll(fd_, data.data(), data.size(), tmp_path_, static_cast<int64_t>(offset));
}

absl::Status AtomicFileWriter::Sync() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": sync after commit"));
  if (::fsync(fd_) != 0) return ErrnoError("fsync", tmp_path_);
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": commit twice"));
  if (::fsync(fd_) != 0) {
    absl::Status s = ErrnoError("fsync", tmp_path_);
    Abandon();
    return s;
  }
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    absl::Status s = ErrnoError("rename into place", path_);
    ::unlink(tmp_path_.c_str());
    UnregisterTempFile(std::exchange(temp_slot_, -1));
    return s;
  }
  UnregisterTempFile(std::exchange(temp_slot_, -1));
  return SyncFolder(DirName(path_));
}

void RemoveTempFilesOnSignals() {
  struct sigaction sa = {};
  sa.sa_handler = RemoveTempFilesAndDie;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    // A signal the process was started ignoring stays ignored: `nohup bpe encode ...` must outlive the
    // terminal, and a shell's background job must not die of the Ctrl-C meant for the foreground.
    struct sigaction old = {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &sa, nullptr);
  }
}

}  // namespace lmf
