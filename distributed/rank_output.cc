// RankOutput (see rank_output.h).
#include "distributed/rank_output.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace lmf::distributed {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Writes all of `text` to `fd` (a short write continues; EINTR retries). Output that cannot be written
// (the reader went away) is dropped: the workers must not stall on it.
void WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

RankOutput::~RankOutput() { Finish(kFinishGrace); }

absl::StatusOr<RankOutput::WriteEnds> RankOutput::AddRank(int rank) {
  WriteEnds ends{-1, -1};
  for (const int destination : {STDOUT_FILENO, STDERR_FILENO}) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      return absl::InternalError(absl::StrCat("a pipe for rank ", rank, "'s output: ", std::strerror(errno)));
    }
    streams_.push_back(Stream{rank, fds[0], fds[1], destination, absl::StrCat("[rank ", rank, "] "), ""});
    (destination == STDOUT_FILENO ? ends.out : ends.err) = fds[1];
  }
  return ends;
}

void RankOutput::Start() {
  for (Stream& s : streams_) {
    if (s.write_fd >= 0) ::close(s.write_fd);
    s.write_fd = -1;
  }
  thread_ = std::thread([this] { Forward(); });
}

void RankOutput::Finish(std::chrono::milliseconds grace) {
  if (thread_.joinable()) {
    stop_at_ns_.store(NowNs() + std::chrono::duration_cast<std::chrono::nanoseconds>(grace).count());
    thread_.join();
  }
  for (Stream& s : streams_) {
    if (s.write_fd >= 0) ::close(s.write_fd);
    if (s.read_fd >= 0) ::close(s.read_fd);
    s.write_fd = s.read_fd = -1;
  }
}

void RankOutput::WriteLines(Stream& s, bool all) {
  size_t start = 0;
  for (;;) {
    const size_t newline = s.pending.find('\n', start);
    const size_t left = s.pending.size() - start;
    // Wait for more unless a line is complete, known to be longer than kMaxLine, or the pipe ended. (A
    // line of exactly kMaxLine bytes must wait for its newline: cut there, it would leave an empty line.)
    if (newline == std::string::npos && left <= kMaxLine && !(all && left > 0)) break;
    // A whole line with its newline; else a piece of at most kMaxLine bytes, given a newline.
    const size_t end = newline != std::string::npos && newline - start <= kMaxLine
                           ? newline + 1
                           : start + std::min(left, kMaxLine);
    std::string line = absl::StrCat(s.prefix, absl::string_view(s.pending).substr(start, end - start));
    if (line.back() != '\n') line.push_back('\n');
    WriteAll(s.destination, line);
    start = end;
  }
  s.pending.erase(0, start);
}

void RankOutput::Forward() {
  std::vector<char> buffer(kMaxLine);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Stream*> open;
    for (Stream& s : streams_) {
      if (s.read_fd < 0) continue;
      fds.push_back(pollfd{s.read_fd, POLLIN, 0});
      open.push_back(&s);
    }
    const int64_t stop_at = stop_at_ns_.load();
    if (open.empty() || (stop_at != 0 && NowNs() >= stop_at)) break;
    if (::poll(fds.data(), fds.size(), /*timeout_ms=*/50) < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Stream& s = *open[i];
      const ssize_t n = ::read(s.read_fd, buffer.data(), buffer.size());
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n > 0) {
        s.pending.append(buffer.data(), static_cast<size_t>(n));
        WriteLines(s, /*all=*/false);
        continue;
      }
      WriteLines(s, /*all=*/true);  // the pipe ended (its worker and every copy of its end are gone)
      ::close(s.read_fd);
      s.read_fd = -1;
    }
  }
  for (Stream& s : streams_) WriteLines(s, /*all=*/true);  // stopped with pipes still open: what was read
}

}  // namespace lmf::distributed
