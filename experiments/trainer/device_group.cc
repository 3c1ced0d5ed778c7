// The GPU and NCCL group of a CUDA data-parallel rank (see device_group.h).
#include "experiments/trainer/device_group.h"

#include "absl/strings/str_cat.h"

#if LMF_WITH_CUDA
#include "distributed/nccl_group.h"
#include "kernels/cuda/cuda_context.h"
#endif

namespace lmf::experiments {
namespace {

constexpr char kNoCuda[] =
    "this binary was built without the CUDA backend (under --config=nocuda, or where bazel found no CUDA "
    "toolkit); build it on a machine with the CUDA toolkit, e.g. ./bazelw build //experiments:train";

}  // namespace

absl::StatusOr<int> DataParallelCudaDevice(int local_rank) {
#if LMF_WITH_CUDA
  const int devices = kernels::cuda::CudaDeviceCount();
  if (devices < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("run.device=CUDA: data-parallel local rank ", local_rank, " sees no CUDA device"));
  }
  return local_rank % devices;
#else
  (void)local_rank;
  return absl::FailedPreconditionError(absl::StrCat("run.device=CUDA: ", kNoCuda));
#endif
}

absl::StatusOr<std::unique_ptr<distributed::Collectives>> ConnectDeviceGroup(
    const distributed::Collectives& host_group, const GroupStore& store, int device,
    std::chrono::milliseconds timeout, std::chrono::milliseconds connect_timeout) {
  if (store.empty()) {
    return absl::InvalidArgumentError(
        "run.device=CUDA with data parallelism: the caller gave no store where the ranks met "
        "(TrainOptions::store)");
  }
#if LMF_WITH_CUDA
  distributed::NcclGroupOptions options;
  options.name = host_group.name();
  options.rank = host_group.rank();
  options.world_size = host_group.world_size();
  options.device = device;
  options.rendezvous_dir = store.dir;
  options.store_host = store.host;
  options.store_port = store.port;
  options.timeout = timeout;
  options.connect_timeout = connect_timeout;
  // The host group's store: its rank 0 already serves the TCP one, and a folder needs no server.
  absl::StatusOr<std::unique_ptr<distributed::NcclGroup>> group =
      distributed::NcclGroup::ConnectThroughExistingStore(options);
  if (!group.ok()) return group.status();
  return std::unique_ptr<distributed::Collectives>(*std::move(group));
#else
  (void)host_group, (void)device, (void)timeout, (void)connect_timeout;
  return absl::FailedPreconditionError(absl::StrCat("run.device=CUDA: ", kNoCuda));
#endif
}

}  // namespace lmf::experiments
