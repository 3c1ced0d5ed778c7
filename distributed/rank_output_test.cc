// RankOutput: what reaches this process's stdout and stderr from the ranks' pipes. This process's stdout and
// stderr are pointed at files for the duration of each forward (and put back before any check), so the test
// reads exactly what RankOutput wrote.
//   - lines of two ranks written in pieces that interleave come out whole, each with its rank's prefix;
//   - stdout and stderr go to their own destinations;
//   - a line longer than kMaxLine goes out in kMaxLine-byte pieces, each prefixed on its own line, and a
//     line of exactly kMaxLine bytes before its newline is one line;
//   - a last line without a newline gets one when its pipe ends.
#include "distributed/rank_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace lmf::distributed {
namespace {

void WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    ASSERT_GT(n, 0);
    done += static_cast<size_t>(n);
  }
}

std::string ReadFile(const std::string& path) {
  std::string text;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return text;
  char buffer[65536];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) text.append(buffer, n);
  std::fclose(f);
  return text;
}

struct Captured {
  std::string out;
  std::string err;
};

// Runs a RankOutput of `ranks` with this process's stdout and stderr pointed at files; `write(rank, out,
// err)` writes through copies of rank's write ends (closed after it returns), one thread per rank.
template <typename Write>
Captured Forward(const std::vector<int>& ranks, Write write) {
  const std::string dir = std::getenv("TEST_TMPDIR") != nullptr ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string out_path = dir + "/rank_output_stdout", err_path = dir + "/rank_output_stderr";
  std::fflush(stdout);
  std::fflush(stderr);
  const int saved_out = ::dup(STDOUT_FILENO), saved_err = ::dup(STDERR_FILENO);
  const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(out, STDOUT_FILENO);
  ::dup2(err, STDERR_FILENO);
  ::close(out);
  ::close(err);
  {
    RankOutput output;
    std::vector<RankOutput::WriteEnds> ends;
    for (const int rank : ranks) {
      absl::StatusOr<RankOutput::WriteEnds> added = output.AddRank(rank);
      if (!added.ok()) std::abort();
      // Copies for the writers below: Start closes the originals, as the launcher's copies once its children
      // hold theirs.
      ends.push_back(RankOutput::WriteEnds{::dup(added->out), ::dup(added->err)});
    }
    output.Start();
    std::vector<std::thread> writers;
    for (size_t i = 0; i < ranks.size(); ++i) {
      writers.emplace_back([&, i] {
        write(ranks[i], ends[i].out, ends[i].err);
        ::close(ends[i].out);
        ::close(ends[i].err);
      });
    }
    for (std::thread& t : writers) t.join();
    output.Finish(RankOutput::kFinishGrace);  // every pipe has ended: returns once all is forwarded
  }
  ::dup2(saved_out, STDOUT_FILENO);
  ::dup2(saved_err, STDERR_FILENO);
  ::close(saved_out);
  ::close(saved_err);
  return Captured{ReadFile(out_path), ReadFile(err_path)};
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  EXPECT_EQ(lines.back(), "") << "the output must end with a newline";
  lines.pop_back();
  return lines;
}

TEST(RankOutput, LinesWrittenInInterleavedPiecesComeOutWholeAndPrefixed) {
  constexpr int kLines = 200;
  const Captured got = Forward({0, 7}, [](int rank, int out, int err) {
    for (int i = 0; i < kLines; ++i) {
      // Each line in three writes, so that the ranks' pieces interleave in time.
      WriteAll(out, absl::StrCat("line ", i));
      std::this_thread::yield();
      WriteAll(out, absl::StrCat(" of rank ", rank));
      WriteAll(out, "\n");
      if (i % 50 == 0) WriteAll(err, absl::StrCat("warning ", i, " of rank ", rank, "\n"));
    }
  });
  std::vector<int> next(8, 0), next_err(8, 0);
  for (const std::string& line : Lines(got.out)) {
    int rank = -1, i = -1, again = -1;
    ASSERT_EQ(std::sscanf(line.c_str(), "[rank %d] line %d of rank %d", &rank, &i, &again), 3) << line;
    ASSERT_TRUE(rank == 0 || rank == 7) << line;
    EXPECT_EQ(again, rank) << line;
    EXPECT_EQ(i, next[rank]++) << line;  // each rank's lines in its order
    EXPECT_EQ(line, absl::StrCat("[rank ", rank, "] line ", i, " of rank ", rank)) << "mixed pieces";
  }
  EXPECT_EQ(next[0], kLines);
  EXPECT_EQ(next[7], kLines);
  for (const std::string& line : Lines(got.err)) {
    int rank = -1, i = -1, again = -1;
    ASSERT_EQ(std::sscanf(line.c_str(), "[rank %d] warning %d of rank %d", &rank, &i, &again), 3) << line;
    EXPECT_EQ(again, rank);
    EXPECT_EQ(i, 50 * next_err[rank]++);
  }
  EXPECT_EQ(next_err[0], kLines / 50);
  EXPECT_EQ(next_err[7], kLines / 50);
}

TEST(RankOutput, LongLinesGoOutInPiecesAndALastLineGetsItsNewline) {
  constexpr size_t kMax = RankOutput::kMaxLine;
  const std::string long_line = std::string(2 * kMax, 'a') + std::string(1000, 'b');
  const std::string exact(kMax, 'c');
  const Captured got = Forward({3}, [&](int, int out, int err) {
    WriteAll(out, long_line + "\n");
    WriteAll(out, exact + "\n");
    WriteAll(out, "short\n");
    WriteAll(out, "no newline at the end");
    WriteAll(err, "error without a newline");
  });
  const std::vector<std::string> lines = Lines(got.out);
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0], "[rank 3] " + std::string(kMax, 'a'));
  EXPECT_EQ(lines[1], "[rank 3] " + std::string(kMax, 'a'));
  EXPECT_EQ(lines[2], "[rank 3] " + std::string(1000, 'b'));
  EXPECT_EQ(lines[3], "[rank 3] " + exact) << "a line of kMaxLine bytes is one line, with no empty one after";
  EXPECT_EQ(lines[4], "[rank 3] short");
  EXPECT_EQ(lines[5], "[rank 3] no newline at the end");
  EXPECT_EQ(got.err, "[rank 3] error without a newline\n");
}

}  // namespace
}  // namespace lmf::distributed
