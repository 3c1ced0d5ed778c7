// A CPU process group over Gloo (TCP transport) with every op of collectives.h, for host memory (a buffer on
// a GPU is refused). Processes meet through a file store (a folder every rank can see), so no coordinator
// process is needed, or through a TCP store that rank 0 serves (for machines that share no folder). The group is an object passed into the code that uses it, never a global.
//
// How each op maps onto this Gloo (Debian's libgloo 0.0~git20220518):
//   all-reduce       gloo::allreduce (ring) with the reductions of reduce_functions.h
//   broadcast        gloo::broadcast;  barrier: gloo::barrier;  all-gather: gloo::allgather
//   reduce-scatter   an all-reduce of a copy of the input, then a copy of this rank's block. This Gloo's only
//                    reduce-scatter, ReduceScatterHalvingDoubling (reduce_scatter.h), is an algorithm of its
//                    older API whose waits use each connection's connect-time timeout, not the op's, and
//                    whose counts are int; so: correct and bounded by the op's timeout, with world_size times
//                    the traffic of a true reduce-scatter (NCCL has a native one).
//   all-to-all       an exchange of the counts first (Gloo kills a receiver sent more bytes than it posted
//   and
//                    leaves a short receive unnoticed; so ranks whose counts disagree fail, naming each
//                    other), then gloo::alltoallv
//   send, recv       Gloo's unbound buffers. Each message's slot encodes its tag, data type and element
//   count,
//                    so a send and a recv that disagree never match: the recv times out naming its peer.
// Each collective's Gloo tag is a hash of its description (op, data type, sizes, root), so ranks that issue
// different collectives, or one with other sizes, time out instead of exchanging mismatched messages.
//
// Threads: a group's ops run on a thread of its own (OpQueue), in issue order; a send or recv is posted
// there, and its Work waits for it to complete. Subgroups get their own Gloo context (over the parent's
// device and store, their keys under a prefix) and thread.
//
// Failures: a rank whose op fails writes its error into the store (a failure note) and then closes every
// connection of the group, which fails the ops pending at its peers. A rank that sees a peer's connection
// close reads that peer's note (waiting up to kFailureNoteGrace): so every rank's error names the rank that
// failed first, and a peer that closed without a note is named as dead. Connect makes a write to a closed
// connection fail instead of killing the process (a SIGPIPE handler that does nothing, installed over the
// default disposition only).
#ifndef LMFORGE_DISTRIBUTED_GLOO_GROUP_H_
#define LMFORGE_DISTRIBUTED_GLOO_GROUP_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "distributed/collectives.h"
#include "distributed/group_options.h"
#include "distributed/op_queue.h"

namespace lmf::distributed {

// GroupOptions (group_options.h; the ranks' failure notes go to the store too; connect_timeout: for each
// other rank's address, and for each connection), and:
struct GlooGroupOptions : GroupOptions {
  std::string hostname = "127.0.0.1";  // the address this rank listens on
  // Asked about every 100 ms while this rank waits for the others, both to publish their addresses and to
  // connect to it (a rank that dies in between never connects); a non-empty answer ends Connect at once with
  // that text in its error (a launcher that sees a rank's process exit says so instead of waiting out
  // connect_timeout). Not asked after Connect returns. Unset: wait the whole timeout.
  std::function<std::string()> abort_connect;
};

// A group's Gloo context, store and first failure, shared with its queued ops and its Works (gloo_group.cc).
class GlooGroupState;

class GlooGroup : public Collectives {
 public:
  // How long a rank whose peer's connection closed waits for that peer's failure note before naming it dead.
  static constexpr std::chrono::milliseconds kFailureNoteGrace{2000};
  // The most elements one send or recv moves (the count is part of its Gloo slot).
  static constexpr uint64_t kMaxPointToPointElements = (uint64_t{1} << 32) - 1;

  // Connects all ranks (blocks until every rank has joined or connect_timeout passes).
  static absl::StatusOr<std::unique_ptr<GlooGroup>> Connect(const GlooGroupOptions& options);
  // Runs the ops already issued, then closes the group's connections.
  ~GlooGroup() override;

 protected:
  std::unique_ptr<Work> StartAllReduce(const Op& op, const Buffer& data, ReduceOp reduce) override;
  std::unique_ptr<Work> StartBroadcast(const Op& op, const Buffer& data, int root) override;
  std::unique_ptr<Work> StartBarrier(const Op& op) override;
  std::unique_ptr<Work> StartReduceScatter(const Op& op, const Buffer& input, const Buffer& output,
                                           ReduceOp reduce) override;
  std::unique_ptr<Work> StartAllGather(const Op& op, const Buffer& input, const Buffer& output) override;
  std::unique_ptr<Work> StartAllToAll(const Op& op, const Buffer& input,
                                      const std::vector<size_t>& send_counts, const Buffer& output,
                                      const std::vector<size_t>& recv_counts) override;
  std::unique_ptr<Work> StartSend(const Op& op, const Buffer& data, int peer, int tag) override;
  std::unique_ptr<Work> StartRecv(const Op& op, const Buffer& data, int peer, int tag) override;
  void FailAfterIssuedOps(const absl::Status& error) override;
  absl::StatusOr<std::unique_ptr<Collectives>> MakeSubgroup(const std::vector<int>& ranks,
                                                            const std::string& name) override;
  absl::Status CheckDevice(const kernels::Device& device) const override;

 private:
  GlooGroup(const std::string& name, int rank, int world_size, std::chrono::milliseconds timeout,
            std::vector<int> world_ranks, std::shared_ptr<GlooGroupState> state);
  // Runs `body` (Gloo calls, which may throw; an error it returns fails the group) on the group's thread.
  std::unique_ptr<Work> Enqueue(const Op& op, std::function<absl::Status()> body);
  std::unique_ptr<Work> StartPointToPoint(const Op& op, const Buffer& data, int peer, int tag, bool send);

  std::shared_ptr<GlooGroupState> state_;
  int subgroups_made_ = 0;
  std::unique_ptr<OpQueue> queue_;  // last: stopped (its issued ops run) before the rest goes
};

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_GLOO_GROUP_H_
