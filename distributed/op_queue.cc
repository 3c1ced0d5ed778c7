// OpQueue and OpResult (see op_queue.h).
#include "distributed/op_queue.h"

#include <utility>

namespace lmf::distributed {

OpQueue::OpQueue() : thread_([this] { Loop(); }) {}

OpQueue::~OpQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  added_.notify_one();
  thread_.join();
}

void OpQueue::Add(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  added_.notify_one();
}

void OpQueue::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      added_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and everything added has run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void OpResult::Set(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.has_value()) return;
    status_ = CopyForThread(status);
  }
  set_.notify_all();
}

absl::Status OpResult::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  set_.wait(lock, [this] { return status_.has_value(); });
  return CopyForThread(*status_);
}

absl::Status CopyForThread(const absl::Status& status) {
  return status.ok() ? absl::OkStatus() : absl::Status(status.code(), status.message());
}

}  // namespace lmf::distributed
