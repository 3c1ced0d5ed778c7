// A CUDA data-parallel run's device side: which GPU each rank trains on, and the NCCL group (distributed/
// nccl_group.h) its gradients are summed over on the device. The NCCL group's ranks are the Gloo group's
// (the trainer's host-side group: losses, stop signals, checksums, checkpoints), and they meet where the Gloo
// ranks met: rank 0 publishes the NCCL unique id in that group's store (its rendezvous folder, or the TCP
// store its rank 0 serves at MASTER_ADDR:MASTER_PORT). Only binaries built with the CUDA backend
// (LMF_WITH_CUDA) can make the group; others say how to build one.
#ifndef LMFORGE_EXPERIMENTS_TRAINER_DEVICE_GROUP_H_
#define LMFORGE_EXPERIMENTS_TRAINER_DEVICE_GROUP_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "distributed/collectives.h"

namespace lmf::experiments {

// Where a group's ranks met: a folder they share, or else the TCP store at host:port that rank 0 serves.
struct GroupStore {
  std::string dir;
  std::string host;
  int port = 0;
  bool empty() const { return dir.empty() && host.empty(); }
};

// The CUDA device of a data-parallel rank: `local_rank` (its rank among this machine's ranks) modulo the
// devices visible, so that ranks on one machine spread over its GPUs. FailedPrecondition where none is
// visible or the binary has no CUDA backend.
absl::StatusOr<int> DataParallelCudaDevice(int local_rank);

// The NCCL group of `host_group`'s ranks on `device`, met through `store` (host_group's), each op bounded by
// `timeout`, the connection by `connect_timeout`.
absl::StatusOr<std::unique_ptr<distributed::Collectives>> ConnectDeviceGroup(
    const distributed::Collectives& host_group, const GroupStore& store, int device,
    std::chrono::milliseconds timeout, std::chrono::milliseconds connect_timeout);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_DEVICE_GROUP_H_
