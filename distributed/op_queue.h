// A process group's ops in issue order: OpQueue runs tasks one at a time, in the order they were added, on a
// thread of its own (a CPU backend's calls block, and a group's ops must run in issue order while the caller
// goes on); OpResult is the status one task reports and its Work waits for.
#ifndef LMFORGE_DISTRIBUTED_OP_QUEUE_H_
#define LMFORGE_DISTRIBUTED_OP_QUEUE_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/status/status.h"

namespace lmf::distributed {

class OpQueue {
 public:
  OpQueue();
  // Runs the tasks already added, then stops the thread.
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Thread-safe. Tasks must not throw.
  void Add(std::function<void()> task);

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable added_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

// A status set once and waited for by any number of threads.
class OpResult {
 public:
  // Only the first call counts.
  void Set(const absl::Status& status);
  // Each caller gets a copy of its own (see CopyForThread).
  absl::Status Wait();

 private:
  std::mutex mu_;
  std::condition_variable set_;
  std::optional<absl::Status> status_;
};

// A copy of `status` that shares nothing with it (its payloads dropped), for a status that another thread
// will hold: copies of one absl::Status share a reference count kept by the Abseil library, which is built
// without ThreadSanitizer, so two threads dropping their copies would be reported as a race on its message.
absl::Status CopyForThread(const absl::Status& status);

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_OP_QUEUE_H_
