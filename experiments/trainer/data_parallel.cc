// Starting and joining the processes of a data-parallel run (see data_parallel.h).
#include "experiments/trainer/data_parallel.h"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/subprocess.h"
#include "base/thread_pool.h"
#include "config/loader.h"
#include "config/parallel_layout.h"
#include "distributed/gloo_group.h"
#include "experiments/trainer/trainer.h"

namespace lmf::experiments {
namespace {

// "<rank> <world> <resume> <stop_after> <timeout_seconds> <rendezvous folder>" (the folder last: it may hold
// spaces). Set by Start for each worker; a worker reads it and clears it.
constexpr char kWorkerEnv[] = "LMF_DATA_PARALLEL_WORKER";
constexpr char kRendezvousPrefix[] = ".data_parallel-";
constexpr std::chrono::seconds kConnectTimeout{60};

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

}  // namespace

absl::StatusOr<std::unique_ptr<DataParallelLaunch>> DataParallelLaunch::Start(
    const config::Experiment& experiment, const TrainOptions& options) {
  const config::RunConfig& run = experiment.run();
  const int world = config::ProcessCount(run.parallel());  // every rank of the mesh
  std::unique_ptr<DataParallelLaunch> launch(new DataParallelLaunch());
  absl::StatusOr<std::unique_ptr<distributed::RendezvousFolder>> rendezvous =
      distributed::RendezvousFolder::Create(run.output_dir(), kRendezvousPrefix);
  if (!rendezvous.ok()) {
    if (rendezvous.status().code() != absl::StatusCode::kAlreadyExists) return rendezvous.status();
    return absl::AlreadyExistsError(absl::StrCat("data parallel: ", rendezvous.status().message()));
  }
  launch->rendezvous_ = *std::move(rendezvous);
  const std::string rendezvous_dir = launch->rendezvous_->path();
  const std::string config_path = rendezvous_dir + "/config.textproto";
  if (absl::Status s = WriteFileAtomically(config_path, config::ExperimentToText(experiment)); !s.ok()) return s;

  // The ranks share the cores, unless the user chose a thread count (then each rank gets it). Every rank runs
  // exactly that many threads, rank 0 too, whatever pool this process made before (a caller's, a test's): the
  // optimizer's kernels split their work by the thread count, and the ranks' copies of the weights stay
  // identical only if each rank updates them in the same pieces.
  const int threads = distributed::ThreadsPerRank(world);
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
  distributed::LaunchOptions workers;
  workers.command = options.data_parallel_command;
  if (workers.command.empty())
    workers.command = {"/proc/self/exe"};  // this very binary, even if rebuilt since
  workers.world_size = world;
  workers.first_rank = 1;
  workers.log_dir = run.output_dir();
  workers.environment = [world, threads, rendezvous_dir, resume = options.resume ? 1 : 0,
                         stop_after = options.stop_after_step,
                         timeout = run.parallel().timeout_seconds()](int rank) {
    return std::vector<std::pair<std::string, std::string>>{
        {kWorkerEnv,
         absl::StrCat(rank, " ", world, " ", resume, " ", stop_after, " ", timeout, " ", rendezvous_dir)},
        {"LMF_NUM_THREADS", std::to_string(threads)}};
  };
  // Appended to: a resumed run's ranks add their lines below the earlier attempt's, after this line.
  workers.log_header = [world, resume = options.resume](int rank) {
    return LogStartLine(
        absl::StrCat("data parallel rank ", rank, " of ", world, " starts", resume ? " (--resume)" : ""));
  };
  workers.parent_death_signal =
      SIGKILL;  // a rank 0 killed before it could stop them leaves no worker waiting
  absl::StatusOr<std::unique_ptr<distributed::WorkerProcesses>> started =
      distributed::WorkerProcesses::Start(workers);
  if (!started.ok()) return started.status();
  launch->workers_ = *std::move(started);

  // Every worker says it is up (its config loaded) before the group connects: one that cannot start is
  // named at once instead of after the connect timeout.
  if (absl::Status s = launch->workers_->WaitUntilReady(rendezvous_dir, kConnectTimeout); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("run.parallel.data=", world, ": ", s.message()));
  }
  // A worker that dies after saying it is up but before it has joined the group (its Gloo device fails, say,
  // or it dies between publishing its address and connecting) is named as soon as it exits, not after the
  // connect timeout.
  distributed::GlooGroupOptions group_options =
      GroupOptions(0, world, rendezvous_dir, run.parallel().timeout_seconds());
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
  workers_.reset();  // stops (SIGTERM, then SIGKILL) and reaps the workers still running
  rendezvous_.reset();
}

absl::Status DataParallelLaunch::Wait() {
  if (absl::Status s = workers_->Wait(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("data parallel: ", s.message()));
  }
  return absl::OkStatus();
}

std::string DataParallelLaunch::DeadWorkers(int grace_ms) {
  return workers_->DeadWorkers(std::chrono::milliseconds(grace_ms));
}

absl::Status RemoveStaleRendezvous(const std::string& run_dir) {
  return distributed::RemoveStaleRendezvousFolders(run_dir, kRendezvousPrefix);
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
  if (absl::Status s = distributed::MarkReady(rendezvous, rank); !s.ok()) {
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
  options.store.dir = rendezvous;  // a CUDA run's NCCL group meets there too
  options.local_rank = rank;       // every rank on this machine
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
