// File helpers with errors that name the file: whole-file reads, atomic writes (temp file, fsync, rename,
// fsync of the folder, so a crash leaves either the old or the new file, never a torn one), and read-only
// memory maps for token files and corpora larger than memory.
#ifndef LMFORGE_BASE_FILE_H_
#define LMFORGE_BASE_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lmf {

// The whole file (a regular file, or a pipe read to its end: `--config=<(...)`). A folder, device or socket
// is InvalidArgument naming the path.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes `data` to `path` atomically: `path.tmp.<pid>` is written and fsynced, then renamed over `path`,
// then the folder is fsynced. The folder must exist. Any name the filesystem takes works: where
// "<name>.tmp.<pid>" would be too long a name (NAME_MAX) the temp file is "<start of name>.<hash of
// name>.tmp.<pid>" instead, in the same folder.
absl::Status WriteFileAtomically(const std::string& path, std::string_view data);

// Whether an atomic write to `path` can succeed, checked before expensive work: its folder exists and is
// writable, and `path` is missing or a regular file. A device, pipe or folder at `path` is refused: the
// rename would replace it (as root, `--output=/dev/null` would replace the system's /dev/null).
// AtomicFileWriter::Create and WriteFileAtomically check this too.
absl::Status CheckFileCanBeWritten(const std::string& path);

// The folder part of a path: "." for a bare file name, "/" for a file in the root folder.
std::string DirName(const std::string& path);

// Makes a folder and its parents (like mkdir -p).
absl::Status MakeDirs(const std::string& path);

bool FileExists(const std::string& path);

// The names in a folder (without "." and ".."), sorted.
absl::StatusOr<std::vector<std::string>> ListFolder(const std::string& dir);

// The folder relative paths given by the user are taken from: the folder ./bazelw was started in
// (LMF_WORKING_DIRECTORY, which bazelw sets, also when it was started outside the checkout), else Bazel's
// BUILD_WORKING_DIRECTORY (`bazel run` starts a binary in its runfiles folder), else the current folder.
std::string UserWorkingDirectory();
// `path` made absolute against UserWorkingDirectory() (an absolute or empty path is returned as it is).
std::string UserPath(const std::string& path);

// Deletes a folder that holds only plain files, with its files (checkpoint folders, staging folders).
absl::Status RemoveFlatFolder(const std::string& dir);

// fsyncs a folder, making the creations, renames and deletions in it durable.
absl::Status SyncFolder(const std::string& dir);

// Size in bytes, or an error naming the file.
absl::StatusOr<uint64_t> FileSize(const std::string& path);

// A read-only memory map of a whole regular file (a pipe, device or folder is InvalidArgument naming the
// path: its size is unknown). Move-only; unmaps on destruction. An empty file maps to an empty view.
class MappedFile {
 public:
  static absl::StatusOr<MappedFile> Open(const std::string& path);
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void Reset();
  const char* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// An exclusive advisory lock (flock) on `path`, created if missing, held until the object is destroyed. The
// kernel drops it when the holder dies (a killed run leaves no stale lock). The holder writes "pid P on HOST"
// into the file, for the error another process gets. Locks conflict between processes and between two
// FileLocks of one process alike. Move-only.
class FileLock {
 public:
  // FailedPrecondition naming `path` and the holder when it is held; Unimplemented where the filesystem has
  // no locks (ENOLCK, ENOSYS, EOPNOTSUPP, EINVAL: some network and FUSE mounts); other errors name `path`.
  static absl::StatusOr<FileLock> Acquire(const std::string& path);
  FileLock(FileLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Incremental atomic writer for large outputs (token files, checkpoints): writes go to a temp file beside
// `path`; Commit() fsyncs and renames it into place. Destroying an uncommitted writer deletes the temp
// file, so a failed or interrupted write never replaces a good file. A signal that ends the process leaves
// the temp file behind (a 10 GB encode stopped by Ctrl-C left 10 GB), unless the program called
// RemoveTempFilesOnSignals().
class AtomicFileWriter {
 public:
  static absl::StatusOr<AtomicFileWriter> Create(const std::string& path);
  AtomicFileWriter() = default;
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  absl::Status Write(std::string_view data);
  // Overwrites bytes already written (e.g. a header whose counts are known only at the end).
  absl::Status WriteAt(uint64_t offset, std::string_view data);
  uint64_t bytes_written() const { return bytes_written_; }
  // Flushes what was written to the disk without committing (fsync of the temp file): a caller that commits
  // several files together learns of a full disk or quota before it changes anything.
  absl::Status Sync();
  absl::Status Commit();

 private:
  void Abandon();
  int fd_ = -1;
  int temp_slot_ = -1;  // where RemoveTempFilesOnSignals finds tmp_path_; -1: not registered
  uint64_t bytes_written_ = 0;
  std::string path_;
  std::string tmp_path_;
};

// For command-line programs without signal handlers of their own: SIGINT, SIGTERM, SIGHUP and SIGQUIT
// delete the temp files of every uncommitted AtomicFileWriter, then end the process by the same signal (its
// exit status says so). The final files are untouched, as before. Not for programs that handle these
// signals themselves (the trainer checkpoints on SIGTERM). A signal the process started ignoring (nohup's
// SIGHUP, a background job's SIGINT) stays ignored.
void RemoveTempFilesOnSignals();

}  // namespace lmf

#endif  // LMFORGE_BASE_FILE_H_
