// SlurmTaskFromEnvironment and JoinSlurmStep (see slurm_task.h).
#include "distributed/slurm_task.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "distributed/launched_rank.h"

namespace lmf::distributed {
namespace {

constexpr char kWhyRequired[] = ", although SLURM_STEP_ID is (srun sets both)";

}  // namespace

absl::StatusOr<std::optional<SlurmTask>> SlurmTaskFromEnvironment() {
  const char* step = std::getenv("SLURM_STEP_ID");
  const char* job = std::getenv("SLURM_JOB_ID");
  if (step == nullptr || job == nullptr) return std::nullopt;
  const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS") != nullptr ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  absl::StatusOr<int> world = IntFromEnvironment(tasks, 1, INT_MAX, std::nullopt, kWhyRequired);
  if (!world.ok()) return world.status();
  if (*world == 1) return std::nullopt;
  SlurmTask task;
  task.world_size = *world;
  task.job_id = job;
  task.step_id = step;
  absl::StatusOr<int> rank = IntFromEnvironment("SLURM_PROCID", 0, *world - 1, std::nullopt, kWhyRequired);
  if (!rank.ok()) return rank.status();
  task.rank = *rank;
  absl::StatusOr<int> local = IntFromEnvironment("SLURM_LOCALID", 0, *world - 1, 0, kWhyRequired);
  if (!local.ok()) return local.status();
  task.local_rank = *local;
  absl::StatusOr<int> nodes = IntFromEnvironment("SLURM_STEP_NUM_NODES", 1, *world, 1, kWhyRequired);
  if (!nodes.ok()) return nodes.status();
  task.nodes = *nodes;
  absl::StatusOr<int> cpus = IntFromEnvironment("SLURM_CPUS_PER_TASK", 1, INT_MAX, 0, kWhyRequired);
  if (!cpus.ok()) return cpus.status();
  task.cpus_per_task = *cpus;
  return task;
}

std::string SlurmStepRendezvous(const SlurmTask& task, const std::string& parent) {
  return absl::StrCat(parent, "/.srun-", task.job_id, ".", task.step_id);
}

absl::StatusOr<std::unique_ptr<GlooGroup>> JoinSlurmStep(const SlurmTask& task, const std::string& parent,
                                                         std::chrono::milliseconds timeout,
                                                         std::chrono::milliseconds connect_timeout) {
  GlooGroupOptions options;
  options.name = absl::StrCat("srun step ", task.job_id, ".", task.step_id);
  options.rank = task.rank;
  options.world_size = task.world_size;
  options.rendezvous_dir = SlurmStepRendezvous(task, parent);
  options.timeout = timeout;
  options.connect_timeout = connect_timeout;
  if (task.nodes > 1) {
    char host[HOST_NAME_MAX + 1] = "";
    if (::gethostname(host, sizeof(host)) != 0 || host[0] == '\0')
      return absl::InternalError("srun task: gethostname failed: the other nodes' ranks cannot reach this one");
    options.hostname = host;
  }
  absl::StatusOr<std::unique_ptr<GlooGroup>> group = GlooGroup::Connect(options);
  if (!group.ok()) {
    return absl::Status(group.status().code(), absl::StrCat("srun task ", task.rank, " of ", task.world_size,
                                                            " (", options.rendezvous_dir, "): ",
                                                            group.status().message()));
  }
  return group;
}

}  // namespace lmf::distributed
