// Forwarding worker processes' stdout and stderr to this process's with each line prefixed by its rank
// ("[rank 2] "), as torchrun's --tee with its line prefix does, so that the lines of several ranks on one
// terminal can be told apart. The workers write into pipes; one thread here reads every pipe and writes each
// whole line with one write() call, so lines of different ranks never mix however a worker splits its
// writes. A line longer than kMaxLine bytes goes out in kMaxLine-byte pieces, each on its own prefixed line;
// a last line without a newline gets one when its pipe ends. Every pipe is read until it ends (a worker that
// dies closes its end at once), so no worker ever blocks on a full pipe.
#ifndef LMFORGE_DISTRIBUTED_RANK_OUTPUT_H_
#define LMFORGE_DISTRIBUTED_RANK_OUTPUT_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace lmf::distributed {

class RankOutput {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  RankOutput() = default;
  RankOutput(const RankOutput&) = delete;
  RankOutput& operator=(const RankOutput&) = delete;
  // Finish(kFinishGrace).
  ~RankOutput();

  // Pipes for rank `rank`'s stdout and stderr, forwarded to this process's stdout and stderr. Returns their
  // write ends, for the child (ChildSpec::stdout_fd, stderr_fd); before Start only.
  struct WriteEnds {
    int out;
    int err;
  };
  absl::StatusOr<WriteEnds> AddRank(int rank);
  // Once the children hold the write ends: closes this process's copies (so that a pipe ends when its
  // worker does) and starts forwarding on a thread of its own.
  void Start();
  // Forwards what is left until every pipe has ended, but at most `grace` from now (a worker's own child
  // may hold a pipe open), then stops and closes the pipes. Idempotent.
  void Finish(std::chrono::milliseconds grace);

  static constexpr std::chrono::milliseconds kFinishGrace{2000};

 private:
  struct Stream {
    int rank;
    int read_fd;
    int write_fd;  // -1 once closed here
    int destination;  // STDOUT_FILENO or STDERR_FILENO
    std::string prefix;
    std::string pending;  // read, not yet forwarded: an unfinished line
  };
  void Forward();
  // Writes the whole lines of `s.pending` (and, with `all`, the rest, ended with a newline).
  static void WriteLines(Stream& s, bool all);

  std::vector<Stream> streams_;
  std::thread thread_;
  // Steady-clock nanoseconds after which Forward stops; 0: not asked to.
  std::atomic<int64_t> stop_at_ns_{0};
};

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_RANK_OUTPUT_H_
