// StopSignals: while alive, SIGINT and SIGTERM ask a training run to stop at the next step boundary (and
// write a checkpoint) instead of killing the process; a second signal of either kind ends the process at
// once, with the default action of that signal.
//
//   const StopSignals signals(/*enabled=*/true);
//   ... if (signals.received() != 0) { checkpoint; stop; }
//
// How: the constructing thread blocks both signals (the kernels' pool workers block them already, see
// base/thread_pool.h) and a watcher thread takes them with sigtimedwait, so no signal handler ever runs on
// a thread that is inside a kernel. That is required, not just tidy: Debian's oneDNN (2.6) points rsp into
// a heap workspace inside its JIT GEMM kernels, and a signal frame pushed there corrupts the heap (oneDNN
// issue #4845); a plain sigaction handler crashed the trainer's SIGTERM test about one run in ten.
// A handler stays installed for threads that do not block the signals (a caller's own threads, or the CUDA
// driver's, started when the device is opened): it records the first signal and ends the process on a second.
// One StopSignals at a time per process.
#ifndef LMFORGE_EXPERIMENTS_TRAINER_STOP_SIGNALS_H_
#define LMFORGE_EXPERIMENTS_TRAINER_STOP_SIGNALS_H_

#include <signal.h>

#include <atomic>
#include <thread>

namespace lmf::experiments {

class StopSignals {
 public:
  // enabled = false: does nothing; the signals keep their disposition (by default they end the process).
  explicit StopSignals(bool enabled);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // 0 until the first SIGINT or SIGTERM, then that signal's number.
  int received() const;

 private:
  void Watch();

  bool enabled_;
  std::atomic<bool> stop_{false};
  sigset_t signals_;
  sigset_t previous_mask_;
  struct sigaction previous_int_ = {};
  struct sigaction previous_term_ = {};
  std::thread watcher_;
};

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_STOP_SIGNALS_H_
