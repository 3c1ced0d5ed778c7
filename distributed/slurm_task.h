// The rank of a process that Slurm's srun started as one task of a job step, so that a multi-process
// program runs under `srun --ntasks=P` with no launcher of its own: the rank, world size and rank on its node
// come from SLURM_PROCID, SLURM_STEP_NUM_TASKS (else SLURM_NTASKS) and SLURM_LOCALID, and the step's tasks
// meet in a rendezvous folder named after SLURM_JOB_ID and SLURM_STEP_ID (a file store on the file system the
// nodes share, as the launcher's is: no rendezvous host or port to agree on). On one node every rank listens
// on loopback; a step over several nodes (SLURM_STEP_NUM_NODES > 1) listens on each node's host name.
#ifndef LMFORGE_DISTRIBUTED_SLURM_TASK_H_
#define LMFORGE_DISTRIBUTED_SLURM_TASK_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "distributed/gloo_group.h"

namespace lmf::distributed {

struct SlurmTask {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;      // the rank among the step's tasks on this node
  int nodes = 1;           // the nodes the step spans
  std::string job_id;      // SLURM_JOB_ID
  std::string step_id;     // SLURM_STEP_ID
  int cpus_per_task = 0;   // SLURM_CPUS_PER_TASK; 0 when Slurm does not say
};

// This process's task, when srun started it in a step of two tasks or more; nullopt otherwise (no
// SLURM_STEP_ID: not under srun, or the batch script's own process, which has SLURM_PROCID 0 and the job's
// task count but no peers started with it; or a step of one task). InvalidArgument naming the variable for
// a value that is not a number in range.
absl::StatusOr<std::optional<SlurmTask>> SlurmTaskFromEnvironment();

// The rendezvous folder of the task's step inside `parent`: <parent>/.srun-<job>.<step>.
std::string SlurmStepRendezvous(const SlurmTask& task, const std::string& parent);

// Joins the group of the step's tasks through SlurmStepRendezvous(task, parent), each op bounded by
// `timeout`; waits up to `connect_timeout` for the others (srun starts them together).
absl::StatusOr<std::unique_ptr<GlooGroup>> JoinSlurmStep(const SlurmTask& task, const std::string& parent,
                                                         std::chrono::milliseconds timeout,
                                                         std::chrono::milliseconds connect_timeout);

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_SLURM_TASK_H_
