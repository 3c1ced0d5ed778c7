// File helpers: atomic writes replace whole files or nothing, errors name the path, maps see the bytes.
#include "base/file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <climits>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "base/check.h"
#include "gtest/gtest.h"

namespace lmf {
namespace {

std::string TestDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp ? tmp : "/tmp";
}

TEST(File, AtomicWriteThenReadBack) {
  const std::string path = TestDir() + "/a.txt";
  ASSERT_TRUE(WriteFileAtomically(path, "hello").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "world!").ok());
  auto got = ReadFile(path);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "world!");
  EXPECT_FALSE(FileExists(path + ".tmp." + std::to_string(::getpid())));
}

// The longest file name the test folder's filesystem takes (NAME_MAX, 255 bytes on most).
size_t NameMax(const std::string& dir) {
  const long n = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  return n > 0 ? static_cast<size_t>(n) : 255;
}

// The names in `dir` that are temp files of atomic writes (".tmp." in them).
std::vector<std::string> TempFilesIn(const std::string& dir) {
  std::vector<std::string> temps;
  const absl::StatusOr<std::vector<std::string>> names = ListFolder(dir);
  for (const std::string& name : *names) {
    if (name.find(".tmp.") != std::string::npos) temps.push_back(name);
  }
  return temps;
}

// Any name the filesystem accepts can be written atomically, the longest included: the temp file's name,
// which adds ".tmp.<pid>", is cut to fit, and two long names that differ only at their end still get
// different temp files.
TEST(File, AtomicWritesTakeNamesUpToTheFilesystemsLimit) {
  const std::string dir = TestDir() + "/long_names";
  ASSERT_TRUE(MakeDirs(dir).ok());
  const size_t name_max = NameMax(dir);
  const std::string a = std::string(name_max - 1, 'n') + "a", b = std::string(name_max - 1, 'n') + "b";
  auto wa = AtomicFileWriter::Create(dir + "/" + a);
  ASSERT_TRUE(wa.ok()) << wa.status();
  auto wb = AtomicFileWriter::Create(dir + "/" + b);
  ASSERT_TRUE(wb.ok()) << wb.status();
  ASSERT_TRUE(wa->Write("first").ok());
  ASSERT_TRUE(wb->Write("second").ok());
  const std::vector<std::string> temps = TempFilesIn(dir);
  ASSERT_EQ(temps.size(), 2u);
  const std::string suffix = ".tmp." + std::to_string(::getpid());
  for (const std::string& temp : temps) {
    EXPECT_LE(temp.size(), name_max) << temp;
    EXPECT_EQ(temp.substr(0, 100), a.substr(0, 100)) << "starts like the file's name";
    EXPECT_EQ(temp.substr(temp.size() - suffix.size()), suffix) << temp;
  }
  ASSERT_TRUE(wa->Commit().ok());
  ASSERT_TRUE(wb->Commit().ok());
  EXPECT_EQ(*ReadFile(dir + "/" + a), "first");
  EXPECT_EQ(*ReadFile(dir + "/" + b), "second");
  ASSERT_TRUE(WriteFileAtomically(dir + "/" + a, "again").ok());
  EXPECT_EQ(*ReadFile(dir + "/" + a), "again");
  EXPECT_EQ(*ListFolder(dir), (std::vector<std::string>{a, b}));

  // A name of two-byte UTF-8 characters is cut between characters, not inside one.
  std::string accents;
  while (accents.size() + 2 <= name_max) accents += "\xc3\xa9";  // U+00E9
  auto wu = AtomicFileWriter::Create(dir + "/" + accents);
  ASSERT_TRUE(wu.ok()) << wu.status();
  const std::vector<std::string> temp = TempFilesIn(dir);
  ASSERT_EQ(temp.size(), 1u);
  const size_t kept = temp[0].find('.');
  ASSERT_NE(kept, std::string::npos);
  EXPECT_EQ(kept % 2, 0u) << temp[0];
  EXPECT_EQ(temp[0].substr(0, kept), accents.substr(0, kept));
  ASSERT_TRUE(wu->Commit().ok());
  EXPECT_TRUE(TempFilesIn(dir).empty());
}

TEST(File, AbandonedWriterLeavesOldFileIntact) {
  const std::string path = TestDir() + "/b.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "good").ok());
  {
    auto w = AtomicFileWriter::Create(path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Write("partial data that is never committed").ok());
  }  // destroyed without Commit, as when a write fails midway
  EXPECT_EQ(*ReadFile(path), "good");
}

TEST(File, WriteAtPatchesAHeader) {
  const std::string path = TestDir() + "/c.bin";
  auto w = AtomicFileWriter::Create(path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Write("XXXX-body").ok());
  ASSERT_TRUE(w->WriteAt(0, "HEAD").ok());
  EXPECT_FALSE(w->WriteAt(8, "toolong").ok());
  ASSERT_TRUE(w->Commit().ok());
  EXPECT_EQ(*ReadFile(path), "HEAD-body");
}

TEST(File, MissingFileErrorNamesThePath) {
  auto got = ReadFile("/nonexistent/lmf/file.txt");
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::IsNotFound(got.status()));
  EXPECT_NE(got.status().message().find("/nonexistent/lmf/file.txt"), std::string::npos);
  auto m = MappedFile::Open("/nonexistent/lmf/file.txt");
  EXPECT_FALSE(m.ok());
}

TEST(File, MappedFileSeesContentsAndEmptyFiles) {
  const std::string path = TestDir() + "/d.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "mapped bytes").ok());
  auto m = MappedFile::Open(path);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->view(), "mapped bytes");
  MappedFile moved = std::move(*m);
  EXPECT_EQ(moved.size(), 12u);
  ASSERT_TRUE(WriteFileAtomically(path, "").ok());
  auto e = MappedFile::Open(path);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->size(), 0u);
}

// A pipe's st_size is 0: mapped, it would read as an empty file and the command would go on silently.
// ReadFile reads one to its end (a config given as `<(...)`); MappedFile refuses it, naming the path.
TEST(File, PipesAreReadToTheirEndButNeverMapped) {
  const std::string fifo = TestDir() + "/in.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] {
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "piped text", 10), 10);
    ::close(fd);
  });
  auto got = ReadFile(fifo);
  writer.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "piped text");

  // Refused before the open, which would wait for a writer that never comes (the test would hang).
  auto m = MappedFile::Open(fifo);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(m.status())) << m.status();
  EXPECT_NE(m.status().message().find(fifo + ": is a pipe"), std::string::npos) << m.status();
}

TEST(File, OutputsRefuseWhatTheRenameWouldDestroy) {
  // A fifo stands in for a device here (as root, a failing test on /dev/null would replace it).
  const std::string fifo = TestDir() + "/out.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, TestDir()}) {
    auto w = AtomicFileWriter::Create(path);
    ASSERT_FALSE(w.ok()) << path;
    EXPECT_TRUE(absl::IsInvalidArgument(w.status())) << w.status();
    EXPECT_NE(w.status().message().find(path), std::string::npos) << w.status();
    EXPECT_FALSE(WriteFileAtomically(path, "x").ok());
  }
  struct stat st;
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the fifo was replaced";

  // A missing folder is named with the path the user gave, not the temporary file's.
  const std::string nested = TestDir() + "/no_such_folder/out.tok";
  auto w = AtomicFileWriter::Create(nested);
  ASSERT_FALSE(w.ok());
  EXPECT_TRUE(absl::IsNotFound(w.status())) << w.status();
  EXPECT_NE(w.status().message().find(nested + ": its folder"), std::string::npos) << w.status();
  EXPECT_EQ(w.status().message().find(".tmp."), std::string::npos) << w.status();
  EXPECT_TRUE(CheckFileCanBeWritten(TestDir() + "/fresh.txt").ok());
  EXPECT_FALSE(CheckFileCanBeWritten("").ok());
}

// A child that starts a write, then gets SIGTERM: its temp file is removed where the program asked for it,
// the process still ends by the signal, and the committed file is untouched either way.
void WriteThenTerminate(const std::string& path, bool remove_on_signals, pid_t* child) {
  *child = ::fork();
  ASSERT_GE(*child, 0);
  if (*child == 0) {
    if (remove_on_signals) RemoveTempFilesOnSignals();
    auto w = AtomicFileWriter::Create(path);
    if (!w.ok() || !w->Write("half of a new version").ok()) ::_exit(2);
    ::raise(SIGTERM);
    ::_exit(3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(*child, &status, 0), *child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(File, TempFilesGoWithTheProcessOnASignalWhereAsked) {
  const std::string path = TestDir() + "/signalled.tok";
  ASSERT_TRUE(WriteFileAtomically(path, "good").ok());
  pid_t child = 0;
  WriteThenTerminate(path, /*remove_on_signals=*/true, &child);
  EXPECT_FALSE(FileExists(path + ".tmp." + std::to_string(child)));
  EXPECT_EQ(*ReadFile(path), "good");
  WriteThenTerminate(path, /*remove_on_signals=*/false, &child);
  EXPECT_TRUE(FileExists(path + ".tmp." + std::to_string(child))) << "the default: the signal leaves it";
  EXPECT_EQ(*ReadFile(path), "good");

  // A name at the filesystem's limit, whose temp file has a shortened name: removed all the same.
  const std::string dir = TestDir() + "/signalled_long";
  ASSERT_TRUE(MakeDirs(dir).ok());
  const std::string long_path = dir + "/" + std::string(NameMax(dir), 'x');
  ASSERT_TRUE(WriteFileAtomically(long_path, "good").ok());
  WriteThenTerminate(long_path, /*remove_on_signals=*/true, &child);
  EXPECT_TRUE(TempFilesIn(dir).empty());
  EXPECT_EQ(*ReadFile(long_path), "good");
}

// A signal the process started ignoring (nohup's SIGHUP) stays ignored: the program goes on.
TEST(File, SignalsIgnoredAtStartStayIgnored) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGHUP, SIG_IGN);
    RemoveTempFilesOnSignals();
    ::raise(SIGHUP);
    ::_exit(7);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

TEST(File, MakeDirsCreatesParents) {
  const std::string dir = TestDir() + "/x/y/z";
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_TRUE(MakeDirs(dir).ok());  // idempotent
  ASSERT_TRUE(WriteFileAtomically(dir + "/f", "1").ok());
  EXPECT_FALSE(MakeDirs(dir + "/f").ok());  // a file in the way
}

TEST(File, ListRemoveAndSyncFolders) {
  const std::string dir = TestDir() + "/flat";
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/b", "2").ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/a", "1").ok());
  auto names = ListFolder(dir);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(SyncFolder(dir).ok());
  ASSERT_TRUE(RemoveFlatFolder(dir).ok());
  EXPECT_FALSE(FileExists(dir));
  EXPECT_FALSE(ListFolder(dir).ok());
  EXPECT_NE(ListFolder(dir).status().message().find(dir), std::string::npos);
}

// One holder at a time, named in the refusal; released when the holder goes, and a holder that dies
// (a forked child exiting) leaves no stale lock.
TEST(File, FileLockIsExclusiveAndReleased) {
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/run.lock";
  char host[256] = {0};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  const std::string holder = "pid " + std::to_string(getpid()) + " on " + host;
  {
    absl::StatusOr<FileLock> held = FileLock::Acquire(path);
    ASSERT_TRUE(held.ok()) << held.status();
    const absl::StatusOr<FileLock> second = FileLock::Acquire(path);
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(second.status().message(), path + " is locked by another process (" + holder + ")");
    FileLock moved = std::move(*held);  // still held after a move
    EXPECT_FALSE(FileLock::Acquire(path).ok());
  }
  {
    // A holder between taking the lock and writing its pid (the file still empty) is still named.
    const std::string raw_path = path + ".raw";
    const int fd = open(raw_path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(flock(fd, LOCK_EX), 0);
    std::thread writer([fd] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      const std::string text = "pid 4242 on elsewhere\n";
      EXPECT_EQ(pwrite(fd, text.data(), text.size(), 0), static_cast<ssize_t>(text.size()));
    });
    const absl::StatusOr<FileLock> contended = FileLock::Acquire(raw_path);
    writer.join();
    close(fd);
    EXPECT_EQ(contended.status().message(),
              raw_path + " is locked by another process (pid 4242 on elsewhere)");
  }
  const pid_t child = fork();
  if (child == 0) {
    absl::StatusOr<FileLock> lock = FileLock::Acquire(path);
    _exit(lock.ok() ? 0 : 1);  // exits holding it
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(FileLock::Acquire(path).ok());
  EXPECT_EQ(FileLock::Acquire("/nonexistent_dir/x.lock").status().message(),
            "/nonexistent_dir/x.lock: open failed: No such file or directory");
  // Never through a symbolic link (taking the lock truncates and writes the file).
  const std::string target = std::string(getenv("TEST_TMPDIR")) + "/victim.txt", link = path + ".link";
  ASSERT_TRUE(WriteFileAtomically(target, "hello").ok());
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  const absl::StatusOr<FileLock> through_link = FileLock::Acquire(link);
  EXPECT_EQ(through_link.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(through_link.status().message(),
            link + " is a symbolic link; a lock file must be a plain file (remove the link)");
  EXPECT_EQ(*ReadFile(target), "hello");
}

TEST(CheckDeathTest, FailedCheckAbortsWithMessage) {
  EXPECT_DEATH(LMF_CHECK_EQ(1 + 1, 3) << "arithmetic", "check failed.*arithmetic");
}

// Relative paths are the user's: the folder ./bazelw was run in (LMF_WORKING_DIRECTORY, also outside the
// checkout), else the folder `bazel run` was started in, else the current folder.
TEST(UserPath, TakesRelativePathsFromTheFolderTheUserWasIn) {
  ::setenv("LMF_WORKING_DIRECTORY", "/home/me/data", 1);
  ::setenv("BUILD_WORKING_DIRECTORY", "/work/checkout", 1);
  EXPECT_EQ(UserPath("corpus.txt"), "/home/me/data/corpus.txt");
  EXPECT_EQ(UserPath("/abs/x.tok"), "/abs/x.tok");
  EXPECT_EQ(UserPath(""), "");
  ::unsetenv("LMF_WORKING_DIRECTORY");
  EXPECT_EQ(UserPath("corpus.txt"), "/work/checkout/corpus.txt");
  ::setenv("LMF_WORKING_DIRECTORY", "relative/not/a/folder", 1);  // ignored: not absolute
  EXPECT_EQ(UserWorkingDirectory(), "/work/checkout");
  ::unsetenv("LMF_WORKING_DIRECTORY");
  ::unsetenv("BUILD_WORKING_DIRECTORY");
  char cwd[PATH_MAX];
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  EXPECT_EQ(UserPath("a"), std::string(cwd) + "/a");
}

}  // namespace
}  // namespace lmf
