// A GPU process group over NCCL with every op of collectives.h, for buffers on this rank's CUDA device (a
// host buffer, or one on another device, is refused). Built only where the CUDA toolkit is found
// (cuda_compatible()); the CPU backend is GlooGroup (gloo_group.h), whose results the GPU test compares with.
//
// Bootstrap: the ranks meet through the same rendezvous store as GlooGroup's (a shared folder, or the TCP
// store rank 0 serves at MASTER_ADDR:MASTER_PORT, tcp_store.h): rank 0 makes the NCCL unique id and publishes
// it there, the others read it, and all initialise a non-blocking communicator (ncclConfig_t::blocking = 0)
// within connect_timeout.
//
// How each op maps onto NCCL: all-reduce, broadcast, reduce-scatter and all-gather are NCCL's own (in place
// where collectives.h allows it); several all-reduces or broadcasts (AllReduceManyAsync, BroadcastManyAsync) one
// ncclGroupStart/End of them; barrier is an all-reduce of one device integer; all-to-all exchanges the
// counts first (an all-gather, checked as GlooGroup checks them, so ranks whose counts disagree fail naming
// each other), then one ncclGroupStart/End of ncclSend and ncclRecv per peer; send and recv are ncclSend and
// ncclRecv, matched by issue order (NCCL has no tags: collectives.h asks callers to issue both sides in the
// same order); a send larger than NCCL's buffers holds the communicator (its later ops wait) until the
// peer's receive runs, so two ranks that each send then receive over one group wait on each other: the
// pipeline sends each way over a group of its own (pipeline/pipeline_stage.h). Each op runs on
// CallOptions::stream, else the group's own stream.
//
// Timeouts: an op's Work waits for an event recorded after it on its stream, polling it and the
// communicator's asynchronous error; past the op's timeout it aborts the communicator (ncclCommAbort, which
// ends this rank's pending NCCL work) and fails with DeadlineExceeded naming the group, rank and op. The first
// failure makes the group unusable on this rank (collectives.h): later ops fail at once with it. A peer whose
// communicator was aborted fails its own pending ops at its own timeout, not at once (NCCL does not tell it).
#ifndef LMFORGE_DISTRIBUTED_NCCL_GROUP_H_
#define LMFORGE_DISTRIBUTED_NCCL_GROUP_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "distributed/collectives.h"
#include "distributed/group_options.h"
#include "distributed/tcp_store.h"

namespace lmf::distributed {

// GroupOptions (group_options.h; connect_timeout: for the unique id and the communicator's initialisation,
// 60 s unless set), and this rank's CUDA device.
struct NcclGroupOptions : GroupOptions {
  NcclGroupOptions() { connect_timeout = std::chrono::milliseconds(60000); }
  int device = 0;
};

// The communicator, its device, streams and first failure, shared with its Works (nccl_group.cc).
class NcclGroupState;

class NcclGroup : public Collectives {
 public:
  static absl::StatusOr<std::unique_ptr<NcclGroup>> Connect(const NcclGroupOptions& options);
  // The same through a store that a GlooGroup of the same ranks met through and still holds: its folder, or
  // the TCP store at store_host:store_port that its rank 0 serves (every rank here, rank 0 too, connects to
  // it as a client), so that the unique id travels where the Gloo ranks met.
  static absl::StatusOr<std::unique_ptr<NcclGroup>> ConnectThroughExistingStore(const NcclGroupOptions& options);
  // Waits (each within its timeout) for the ops issued, then destroys the communicator.
  ~NcclGroup() override;

 protected:
  std::unique_ptr<Work> StartAllReduce(const Op& op, const Buffer& data, ReduceOp reduce) override;
  std::unique_ptr<Work> StartAllReduceMany(const Op& op, const std::vector<Buffer>& data, ReduceOp reduce) override;
  std::unique_ptr<Work> StartBroadcastMany(const Op& op, const std::vector<Buffer>& data,
                                           const std::vector<int>& roots) override;
  std::unique_ptr<Work> StartBroadcast(const Op& op, const Buffer& data, int root) override;
  std::unique_ptr<Work> StartBarrier(const Op& op) override;
  std::unique_ptr<Work> StartReduceScatter(const Op& op, const Buffer& input, const Buffer& output,
                                           ReduceOp reduce) override;
  std::unique_ptr<Work> StartAllGather(const Op& op, const Buffer& input, const Buffer& output) override;
  std::unique_ptr<Work> StartAllToAll(const Op& op, const Buffer& input, const std::vector<size_t>& send_counts,
                                      const Buffer& output, const std::vector<size_t>& recv_counts) override;
  std::unique_ptr<Work> StartSend(const Op& op, const Buffer& data, int peer, int tag) override;
  std::unique_ptr<Work> StartRecv(const Op& op, const Buffer& data, int peer, int tag) override;
  absl::Status AllGatherHostValue(int64_t value, std::vector<int64_t>& all) override;
  void FailAfterIssuedOps(const absl::Status& error) override;
  absl::StatusOr<std::unique_ptr<Collectives>> MakeSubgroup(const std::vector<int>& ranks,
                                                            const std::string& name) override;
  absl::Status CheckDevice(const kernels::Device& device) const override;

 private:
  NcclGroup(const std::string& name, int rank, int world_size, std::chrono::milliseconds timeout,
            std::vector<int> world_ranks, std::shared_ptr<NcclGroupState> state);
  static absl::StatusOr<std::unique_ptr<NcclGroup>> ConnectThrough(const NcclGroupOptions& options,
                                                                   OpenedStore opened);

  std::shared_ptr<NcclGroupState> state_;
};

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_NCCL_GROUP_H_
