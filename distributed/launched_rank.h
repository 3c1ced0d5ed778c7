// The rank of a process that a launcher started with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT: //distributed:launch sets them, as torchrun does) or that Open
// MPI's mpirun started (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK and
// OMPI_COMM_WORLD_LOCAL_SIZE, with MASTER_ADDR and MASTER_PORT passed by the user: `mpirun -x MASTER_ADDR=..
// -x MASTER_PORT=..`), and joining the group of all such ranks: rank 0 serves a TCP store at
// MASTER_ADDR:MASTER_PORT (tcp_store.h) that every rank meets through, so the machines need share no folder.
// Each rank listens for its peers on the address it reaches MASTER_ADDR from (loopback when MASTER_ADDR is).
#ifndef LMFORGE_DISTRIBUTED_LAUNCHED_RANK_H_
#define LMFORGE_DISTRIBUTED_LAUNCHED_RANK_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "distributed/gloo_group.h"

namespace lmf::distributed {

struct LaunchedRank {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // the rank among this machine's ranks
  int local_world_size = 1;  // the ranks on this machine
  std::string master_addr;   // where rank 0 serves the store
  int master_port = 0;
  std::string launcher;  // names the variables' source in errors: "RANK/WORLD_SIZE" or "mpirun"
};

// This process's rank when RANK and WORLD_SIZE are set (a torchrun-style launcher), else when
// OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE are (mpirun); nullopt when neither is. A world of one is
// returned too (the caller checks it against what it expects). InvalidArgument naming the variable for a
// value missing (MASTER_ADDR, MASTER_PORT) or not a number in range.
absl::StatusOr<std::optional<LaunchedRank>> LaunchedRankFromEnvironment();

// The torchrun variables that describe `rank` (what //distributed:launch gives each worker).
std::vector<std::pair<std::string, std::string>> LaunchedRankEnvironment(const LaunchedRank& rank);

// Joins the group of all launched ranks through the TCP store at MASTER_ADDR:MASTER_PORT (rank 0 serves it),
// each op bounded by `timeout`; waits up to `connect_timeout` for the others.
absl::StatusOr<std::unique_ptr<GlooGroup>> JoinLaunchedGroup(const LaunchedRank& rank,
                                                             std::chrono::milliseconds timeout,
                                                             std::chrono::milliseconds connect_timeout);

// A TCP port on 127.0.0.1 that no process listens on now (the kernel's pick), for MASTER_PORT on one
// machine: rank 0 binds it a moment later (another process could take it in between, as with torchrun's).
absl::StatusOr<int> FreeLoopbackPort();

// The environment variable `name` as a whole number in [min, max]; `fallback` when unset, else
// InvalidArgument "<name> is not set<why_required>". Also an InvalidArgument naming it and the range for a
// value that is not such a number.
absl::StatusOr<int> IntFromEnvironment(const char* name, int min, int max, std::optional<int> fallback,
                                       const std::string& why_required);

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_LAUNCHED_RANK_H_
