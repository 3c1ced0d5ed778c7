// StopSignals (see stop_signals.h): a watcher thread takes SIGINT/SIGTERM with sigtimedwait while the
// training thread and the pool's workers block them.
#include "experiments/trainer/stop_signals.h"

#include <pthread.h>
#include <time.h>

#include <cerrno>

#include "base/check.h"

namespace lmf::experiments {
namespace {

std::atomic<int> g_received{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");

// For threads that leave the signals open (not the trainer's own: a caller's threads, or threads a library
// started before the mask was set, such as the CUDA driver's, which the kernel may pick for a
// process-directed signal): record the first; a second ends the process with the signal's default action,
// as the watcher does. The signal stays blocked while its handler runs, so the raised one is delivered, with
// the default action, when the handler returns. sigaction and raise are async-signal-safe, and so is the
// lock-free atomic.
void RecordSignal(int signal_number) {
  int expected = 0;
  if (g_received.compare_exchange_strong(expected, signal_number)) return;
  struct sigaction fallback = {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  ::sigaction(signal_number, &fallback, nullptr);
  ::raise(signal_number);
}

}  // namespace

StopSignals::StopSignals(bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  g_received.store(0);
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGTERM);
  LMF_CHECK_EQ(pthread_sigmask(SIG_BLOCK, &signals_, &previous_mask_), 0);
  struct sigaction action = {};
  action.sa_handler = RecordSignal;
  sigemptyset(&action.sa_mask);
  LMF_CHECK_EQ(::sigaction(SIGINT, &action, &previous_int_), 0);
  LMF_CHECK_EQ(::sigaction(SIGTERM, &action, &previous_term_), 0);
  watcher_ = std::thread([this] { Watch(); });  // inherits the blocked mask, as sigtimedwait requires
}

StopSignals::~StopSignals() {
  if (!enabled_) return;
  stop_.store(true);
  watcher_.join();
  ::sigaction(SIGINT, &previous_int_, nullptr);
  ::sigaction(SIGTERM, &previous_term_, nullptr);
  // A signal still pending now is delivered with the restored disposition when the mask opens.
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

int StopSignals::received() const { return enabled_ ? g_received.load() : 0; }

void StopSignals::Watch() {
  const timespec poll = {0, 50 * 1000 * 1000};  // how soon the destructor's stop request is seen
  while (!stop_.load()) {
    const int sig = sigtimedwait(&signals_, nullptr, &poll);
    if (sig <= 0) continue;  // timeout or EINTR
    int expected = 0;
    if (g_received.compare_exchange_strong(expected, sig)) continue;
    // A second signal: the user insists. End the process with the signal's default action.
    struct sigaction fallback = {};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    ::sigaction(sig, &fallback, nullptr);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, sig);
    pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
    pthread_kill(pthread_self(), sig);
  }
}

}  // namespace lmf::experiments
