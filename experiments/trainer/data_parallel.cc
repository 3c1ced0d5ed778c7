// Starting and joining the processes of a data-parallel run (see data_parallel.h).
#include "experiments/trainer/data_parallel.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/subprocess.h"
#include "base/thread_pool.h"
#include "config/loader.h"
#include "distributed/gloo_group.h"
#include "experiments/trainer/trainer.h"

namespace lmf::experiments {
namespace {

// "<rank> <world> <resume> <stop_after> <timeout_seconds> <rendezvous folder>" (the folder last: it may hold
// spaces). Set by Start for each worker; a worker reads it and clears it.
constexpr char kWorkerEnv[] = "LMF_DATA_PARALLEL_WORKER";
constexpr char kRendezvousPrefix[] = ".data_parallel-";
constexpr std::chrono::seconds kConnectTimeout{60};

std::string LogPath(const std::string& run_dir, int rank) {
  return absl::StrCat(run_dir, "/rank_", rank, ".log");
}

// How rank `rank` of `world` joins the group through `rendezvous` (rank 0 and the workers alike).
distributed::GlooGroupOptions GroupOptions(int rank, int world, const std::string& rendezvous,
                                           int timeout_seconds) {
  distributed::GlooGroupOptions options;
  options.rank = rank;
  options.world_size = world;
  options.rendezvous_dir = rendezvous;
  options.timeout = std::chrono::seconds(timeout_seconds);
  options.connect_timeout = kConnectTimeout;
  return options;
}

// The threads each rank of a run on `world` processes runs: LMF_NUM_THREADS when it is a thread count (at
// most ThreadPool::kMaxThreads, as ThreadPool::Default reads it), else an even share of the hardware threads.
int RankThreads(int world) {
  int threads = 0;
  if (const char* env = std::getenv("LMF_NUM_THREADS");
      env != nullptr && absl::SimpleAtoi(env, &threads) && threads > 0) {
    return std::min(threads, ThreadPool::kMaxThreads);
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world);
}

// The last `lines` lines of a file, for failure messages.
std::string Tail(const std::string& path, int lines) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return "";
  std::vector<std::string> all = absl::StrSplit(*text, '\n', absl::SkipWhitespace());
  if (static_cast<int>(all.size()) > lines) all.erase(all.begin(), all.end() - lines);
  return absl::StrJoin(all, " | ");
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataParallelLaunch>> DataParallelLaunch::Start(
    const config::Experiment& experiment, const TrainOptions& options) {
  const config::RunConfig& run = experiment.run();
  const int world = run.parallel().data();
  std::unique_ptr<DataParallelLaunch> launch(new DataParallelLaunch());
  launch->run_dir_ = run.output_dir();
  // Unique to this launch (a pid alone can recur, and a folder a killed launch left is not always removed).
  launch->rendezvous_dir_ = absl::StrCat(run.output_dir(), "/", kRendezvousPrefix, ::getpid(), "-",
                                         std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count());
  if (FileExists(launch->rendezvous_dir_)) {
    return absl::AlreadyExistsError(
        absl::StrCat("data parallel: ", launch->rendezvous_dir_, " exists already"));
  }
  if (absl::Status s = MakeDirs(launch->rendezvous_dir_); !s.ok()) return s;
  const std::string config_path = launch->rendezvous_dir_ + "/config.textproto";
  if (absl::Status s = WriteFileAtomically(config_path, config::ExperimentToText(experiment)); !s.ok()) {
    return s;
  }

  // The ranks share the cores, unless the user chose a thread count (then each rank gets it). Every rank runs
  // exactly that many threads, rank 0 too, whatever pool this process made before (a caller's, a test's): the
  // optimizer's kernels split their work by the thread count, and the ranks' copies of the weights stay
  // identical only if each rank updates them in the same pieces.
  const int threads = RankThreads(world);
  if (std::getenv("LMF_NUM_THREADS") == nullptr) {  // this process's pool, if made now, is the run's size
    ::setenv("LMF_NUM_THREADS", std::to_string(threads).c_str(), /*overwrite=*/1);
    ThreadPool::Default();
    ::unsetenv("LMF_NUM_THREADS");
  }
  launch->pool_ = &ThreadPool::Default();
  if (launch->pool_->num_threads() != threads) {
    launch->own_pool_ = std::make_unique<ThreadPool>(threads);
    launch->pool_ = launch->own_pool_.get();
  }
  std::vector<std::string> command = options.data_parallel_command;
  if (command.empty()) command = {"/proc/self/exe"};  // this very binary, even if rebuilt since
  for (int rank = 1; rank < world; ++rank) {
    ChildSpec child;
    child.argv = command;
    child.env = {
        {kWorkerEnv, absl::StrCat(rank, " ", world, " ", options.resume ? 1 : 0, " ", options.stop_after_step,
                                  " ", run.parallel().timeout_seconds(), " ", launch->rendezvous_dir_)},
        {"LMF_NUM_THREADS", std::to_string(threads)}};
    child.log_path = LogPath(run.output_dir(), rank);
    // Appended to: a resumed run's ranks add their lines below the earlier attempt's, after this line.
    child.log_header = LogStartLine(absl::StrCat("data parallel rank ", rank, " of ", world, " starts",
                                                 options.resume ? " (--resume)" : ""));
    // A rank 0 killed before it could stop them leaves no worker waiting.
    child.parent_death_signal = SIGKILL;
    absl::StatusOr<pid_t> pid = StartChild(child);
    if (!pid.ok()) return pid.status();
    launch->workers_.push_back(*pid);
    launch->exit_status_.push_back(0);
  }

  // Every worker says it is up (its config loaded) before the group connects: one that cannot start is
  // named at once instead of after the connect timeout.
  for (int waited_ms = 0;; waited_ms += 20) {
    bool all_ready = true;
    for (int rank = 1; rank < world; ++rank) {
      all_ready = all_ready && FileExists(absl::StrCat(launch->rendezvous_dir_, "/ready.", rank));
    }
    if (all_ready) break;
    if (const std::string dead = launch->DeadWorkers(/*grace_ms=*/0); !dead.empty()) {
      return absl::UnavailableError(absl::StrCat("run.parallel.data=", world, ": ", dead));
    }
    if (waited_ms >= static_cast<int>(std::chrono::milliseconds(kConnectTimeout).count())) {
      return absl::DeadlineExceededError(absl::StrCat("run.parallel.data=", world,
                                                      ": the workers did not start within ",
                                                      kConnectTimeout.count(), " s (see rank_<r>.log)"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // A worker that dies after saying it is up but before it has joined the group (its Gloo device fails, say,
  // or it dies between publishing its address and connecting) is named as soon as it exits, not after the
  // connect timeout.
  distributed::GlooGroupOptions group_options =
      GroupOptions(0, world, launch->rendezvous_dir_, run.parallel().timeout_seconds());
  bool aborted = false;
  group_options.abort_connect = [&launch, &aborted] {
    std::string dead = launch->DeadWorkers(/*grace_ms=*/0);
    aborted = !dead.empty();
    return dead;
  };
  absl::StatusOr<std::unique_ptr<distributed::GlooGroup>> group =
      distributed::GlooGroup::Connect(group_options);
  if (!group.ok()) {
    // Any other worker that died with the group (not already named by abort_connect) gets a second to exit.
    const std::string dead = launch->DeadWorkers(/*grace_ms=*/aborted ? 0 : 1000);
    return absl::Status(group.status().code(),
                        absl::StrCat("run.parallel.data=", world, ": ", group.status().message(),
                                     dead.empty() ? "" : absl::StrCat("; ", dead)));
  }
  launch->group_ = *std::move(group);
  return launch;
}

DataParallelLaunch::~DataParallelLaunch() {
  group_.reset();
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i] < 0) continue;
    ::kill(workers_[i], SIGTERM);
    int status = 0;
    // A worker stopped mid-collective exits at once; one in a long step gets a few seconds, then SIGKILL.
    for (int waited_ms = 0; ::waitpid(workers_[i], &status, WNOHANG) == 0; waited_ms += 50) {
      if (waited_ms == 5000) ::kill(workers_[i], SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (!rendezvous_dir_.empty()) (void)RemoveFlatFolder(rendezvous_dir_);
}

std::string DataParallelLaunch::Describe(int rank, int wait_status) const {
  const std::string how = WIFEXITED(wait_status)
                              ? absl::StrCat("exited with status ", WEXITSTATUS(wait_status))
                              : absl::StrCat("was killed by signal ", WTERMSIG(wait_status));
  const std::string log = LogPath(run_dir_, rank);
  return absl::StrCat("rank ", rank, " ", how, " (", log, ": ", Tail(log, 3), ")");
}

absl::Status DataParallelLaunch::Wait() {
  std::vector<std::string> failed;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i] >= 0) {
      int status = 0;
      while (::waitpid(workers_[i], &status, 0) < 0 && errno == EINTR) {
      }
      workers_[i] = -1;
      exit_status_[i] = status;
    }
    const int status = exit_status_[i];
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failed.push_back(Describe(static_cast<int>(i) + 1, status));
  }
  if (failed.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("data parallel: ", absl::StrJoin(failed, "; ")));
}

std::string DataParallelLaunch::DeadWorkers(int grace_ms) {
  std::vector<std::string> dead;
  for (int waited_ms = 0;; waited_ms += 50) {
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (workers_[i] < 0) continue;
      int status = 0;
      if (::waitpid(workers_[i], &status, WNOHANG) == workers_[i]) {
        workers_[i] = -1;
        exit_status_[i] = status;
        dead.push_back(Describe(static_cast<int>(i) + 1, status));
      }
    }
    if (!dead.empty() || waited_ms >= grace_ms) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::StrJoin(dead, "; ");
}

absl::Status RemoveStaleRendezvous(const std::string& run_dir) {
  absl::StatusOr<std::vector<std::string>> names = ListFolder(run_dir);
  if (!names.ok()) return absl::OkStatus();
  for (const std::string& name : *names) {
    if (!absl::StartsWith(name, kRendezvousPrefix)) continue;
    if (absl::Status s = RemoveFlatFolder(run_dir + "/" + name); !s.ok()) return s;
  }
  return absl::OkStatus();
}

bool IsDataParallelWorker() { return std::getenv(kWorkerEnv) != nullptr; }

int DataParallelWorkerMain() {
  const char* env = std::getenv(kWorkerEnv);
  if (env == nullptr) return 2;
  const std::string spec = env;
  ::unsetenv(kWorkerEnv);
  const std::vector<std::string> parts = absl::StrSplit(spec, absl::MaxSplits(' ', 5));
  int rank = 0, world = 0, resume = 0, timeout = 0;
  int64_t stop_after = 0;
  if (parts.size() != 6 || !absl::SimpleAtoi(parts[0], &rank) || !absl::SimpleAtoi(parts[1], &world) ||
      !absl::SimpleAtoi(parts[2], &resume) || !absl::SimpleAtoi(parts[3], &stop_after) ||
      !absl::SimpleAtoi(parts[4], &timeout)) {
    std::fprintf(stderr, "data parallel worker: %s=\"%s\" is not what the launching process writes\n",
                 kWorkerEnv, spec.c_str());
    return 2;
  }
  const std::string& rendezvous = parts[5];
  absl::StatusOr<config::Experiment> experiment =
      config::LoadExperiment(rendezvous + "/config.textproto", {});
  if (!experiment.ok()) {
    std::fprintf(stderr, "data parallel rank %d: %s\n", rank,
                 std::string(experiment.status().message()).c_str());
    return 1;
  }
  if (absl::Status s = WriteFileAtomically(absl::StrCat(rendezvous, "/ready.", rank), ""); !s.ok()) {
    std::fprintf(stderr, "data parallel rank %d: %s\n", rank, std::string(s.message()).c_str());
    return 1;
  }
  // Rank 0 publishes its address only once every worker is up, up to kConnectTimeout after this one was (a
  // slow last worker): this rank's wait for it spans that window and the connect's own. Rank 0 bounds the
  // whole start (it stops the workers when it gives up, and they die with it).
  distributed::GlooGroupOptions group_options = GroupOptions(rank, world, rendezvous, timeout);
  group_options.connect_timeout = 2 * kConnectTimeout;
  absl::StatusOr<std::unique_ptr<distributed::GlooGroup>> group =
      distributed::GlooGroup::Connect(group_options);
  if (!group.ok()) {
    std::fprintf(stderr, "data parallel rank %d: %s\n", rank, std::string(group.status().message()).c_str());
    return 1;
  }
  TrainOptions options;
  options.resume = resume != 0;
  options.stop_after_step = stop_after;
  options.checkpoint_on_signal = true;
  options.collectives = group->get();
  std::fprintf(stderr, "data parallel rank %d of %d, run folder %s\n", rank, world,
               experiment->run().output_dir().c_str());
  absl::StatusOr<TrainResult> result = Train(*experiment, options);
  if (!result.ok()) {
    std::fprintf(stderr, "data parallel rank %d: %s\n", rank, std::string(result.status().message()).c_str());
    if (result.status().code() == absl::StatusCode::kAborted) return 3;
    return result.status().code() == absl::StatusCode::kCancelled ? 4 : 1;
  }
  std::fprintf(stderr, "data parallel rank %d: %lld steps\n", rank, static_cast<long long>(result->steps));
  return 0;
}

}  // namespace lmf::experiments
