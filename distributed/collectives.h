// The collectives interface that parallel training is written against: a process group is an object passed
// into single-device code from outside (never a global), and the code that uses it never names a transport.
// GlooGroup (CPU processes over TCP, gloo_group.h) and NcclGroup (GPU buffers, nccl_group.h) implement it.
//
// Memory: every op names its memory with Buffers (pointer, element count, data type, device). Ops come in two
// forms: XAsync issues the op and returns a Work at once; X is XAsync followed by Work::Wait. A buffer must
// stay valid, and an output must not be read, until the op's Wait has returned (a Work destroyed unwaited
// waits in its destructor).
//
// Order: every rank of a group issues the same collectives in the same order, with the same sizes (all-to-
// all: matching counts), and a group's ops run in the order they were issued (as NCCL and torch's
// ProcessGroupGloo do). Issue one group's ops from one thread; different groups are independent and may be
// used from different threads at once.
//
// Failure: every op has a timeout (the group's, or CallOptions::timeout), so that peers that never answer
// make it fail instead of hang. The first op that fails on a rank, for any reason (a bad argument, a
// timeout, a peer that died), makes the group unusable on that rank: its later ops fail at once with that
// first error, and the rank closes its connections so that its peers' pending ops fail too, without waiting
// for their own timeouts. Make a new group to go on. Every error names the backend, the group, this rank,
// the op and its sizes, and, where it is known, the peer that failed first (a dead peer; the peer of a send
// or recv; a rank that failed earlier and closed its connections).
#ifndef LMFORGE_DISTRIBUTED_COLLECTIVES_H_
#define LMFORGE_DISTRIBUTED_COLLECTIVES_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/core/dtype.h"
#include "kernels/core/tensor.h"

namespace lmf::distributed {

// What the elements of a buffer are. Its own enum, not kernels::DType: the trainer's sums need f64, which
// kernels::DType lacks.
enum class DataType : uint8_t {
  kF32,
  kF64,
  kBF16,  // raw 16-bit values (kernels::FloatToBF16); reductions compute in f32 and round to nearest even
  kI32,
  kI64,
  kU8,
};

size_t DataTypeSize(DataType type);
const char* DataTypeName(DataType type);  // "f32", "f64", "bf16", "i32", "i64", "u8"

// The DataType of a C++ element type: float, double, int32_t, int64_t, uint8_t (bf16 has no C++ type here:
// name it explicitly).
template <typename T>
constexpr DataType DataTypeOf() {
  using U = std::remove_const_t<T>;
  static_assert(std::is_same_v<U, float> || std::is_same_v<U, double> || std::is_same_v<U, int32_t> ||
                    std::is_same_v<U, int64_t> || std::is_same_v<U, uint8_t>,
                "no DataType for this element type");
  if constexpr (std::is_same_v<U, float>) return DataType::kF32;
  if constexpr (std::is_same_v<U, double>) return DataType::kF64;
  if constexpr (std::is_same_v<U, int32_t>) return DataType::kI32;
  if constexpr (std::is_same_v<U, int64_t>) return DataType::kI64;
  return DataType::kU8;
}

// `count` elements of `type` at `data` on `device`. An op's inputs are only read.
struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  DataType type = DataType::kF32;
  kernels::Device device = kernels::Device::Cpu();

  size_t bytes() const { return count * DataTypeSize(type); }

  // Host memory of a C++ element type (const for an input).
  template <typename T>
  static Buffer Host(T* data, size_t count) {
    return Buffer{const_cast<std::remove_const_t<T>*>(data), count, DataTypeOf<T>(), kernels::Device::Cpu()};
  }
  // The elements of an fp32 tensor where it lives (a GPU tensor's: for a group of device memory).
  static Buffer F32(const kernels::Tensor& tensor) {
    return Buffer{tensor.data(), static_cast<size_t>(tensor.numel()), DataType::kF32, tensor.device()};
  }
};

// kMax of floating types is C's fmax, as NCCL's max is on the GPU: a NaN is dropped unless every rank's
// element is NaN, whichever rank holds it. A NaN anywhere shows in a kSum (the way to check for one).
enum class ReduceOp : uint8_t { kSum, kMax };

struct CallOptions {
  // How long the op may wait for its peers; zero: the group's timeout. A queued op's time starts when the
  // ops issued before it on the group are done.
  std::chrono::milliseconds timeout{0};
  // The CUDA stream (cudaStream_t) a GPU backend enqueues the op on; ignored by CPU backends.
  void* stream = nullptr;
  // A CUDA stream whose work queued so far the op must follow, when it runs on another stream (`stream`, or
  // the group's own): e.g. the kernels that wrote its buffer on the model's stream, so that the op can run
  // beside the ones queued there after it (an event recorded here, waited for on the op's stream; the
  // host does not wait). Null: none; ignored by CPU backends.
  void* after = nullptr;
};

// An issued op. One destroyed before its op is done waits for it (the op may still use the buffers).
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the op is done on this rank or has failed; returns its result (the same on every call).
  virtual absl::Status Wait() = 0;
};

// A 64-bit hash of `text` that every process computes alike (FNV-1a): to compare arguments across ranks.
uint64_t Fingerprint(const std::string& text);

// Waits for each Work in turn; the first error, if any (every Work is waited for).
absl::Status WaitAll(std::vector<std::unique_ptr<Work>>& works);

class Collectives {
 public:
  virtual ~Collectives() = default;
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::string& name() const { return name_; }  // e.g. "world", "dp[pp=0,ep=1]"
  std::chrono::milliseconds timeout() const { return timeout_; }
  // "rank 2", or in a subgroup "rank 1 (world rank 3)".
  std::string PeerName(int rank) const;

  // In-place reduction over all ranks of `data`; every rank gets the result.
  std::unique_ptr<Work> AllReduceAsync(const Buffer& data, ReduceOp op, const CallOptions& options = {});
  // Copies rank `root`'s `data` into every rank's.
  std::unique_ptr<Work> BroadcastAsync(const Buffer& data, int root, const CallOptions& options = {});
  // Done when every rank has issued it.
  std::unique_ptr<Work> BarrierAsync(const CallOptions& options = {});
  // `input` is world_size() blocks of output.count elements; rank r's `output` gets block r reduced over the
  // ranks. In place when `output` is exactly this rank's block of `input`; no other overlap.
  std::unique_ptr<Work> ReduceScatterAsync(const Buffer& input, const Buffer& output, ReduceOp op,
                                           const CallOptions& options = {});
  // `output` is world_size() blocks of input.count elements; block r is rank r's `input`. In place when
  // `input` is exactly this rank's block of `output`; no other overlap.
  std::unique_ptr<Work> AllGatherAsync(const Buffer& input, const Buffer& output,
                                       const CallOptions& options = {});
  // Rank r's `input` is send_counts[0] elements for rank 0, then send_counts[1] for rank 1, ...; its
  // `output` receives recv_counts[0] elements from rank 0, then recv_counts[1] from rank 1, ... Both vectors
  // have world_size() entries, sum to the buffer's count, and may hold zeros; recv_counts[p] must equal rank
  // p's send_counts[r] (a mismatch fails on both ranks, naming them). The buffers must not overlap.
  std::unique_ptr<Work> AllToAllAsync(const Buffer& input, const std::vector<size_t>& send_counts,
                                      const Buffer& output, const std::vector<size_t>& recv_counts,
                                      const CallOptions& options = {});
  // Several all-reduces as one op: each buffer reduced in place with `op`. Every rank passes as many buffers,
  // with the same counts and types, in the same order; the buffers must not overlap. NCCL issues them in one
  // ncclGroupStart/End (one launch, one completion to wait for, instead of one per buffer: a model's
  // gradients, tensor by tensor, without packing them into a bucket); Gloo runs them one after another.
  std::unique_ptr<Work> AllReduceManyAsync(const std::vector<Buffer>& data, ReduceOp op,
                                           const CallOptions& options = {});
  // Several broadcasts as one op, buffer i from rank roots[i] (ZeRO-1's parameters from their owners), with
  // AllReduceManyAsync's rules and backends.
  std::unique_ptr<Work> BroadcastManyAsync(const std::vector<Buffer>& data, const std::vector<int>& roots,
                                           const CallOptions& options = {});
  // Point to point. A send to `peer` matches `peer`'s recv from this rank with the same tag, count and data
  // type; several with one tag match in issue order. Issue both sides in the same order: a backend without
  // tags (NCCL) matches by order alone. On Gloo sends and recvs do not wait for each other to be issued, so a
  // ring of SendAsync then RecvAsync on every rank completes; on NCCL a send beyond its buffers holds the
  // communicator until the peer's recv runs (nccl_group.h), so traffic both ways needs a group per way.
  // tag: 0 to kMaxTag.
  static constexpr int kMaxTag = (1 << 20) - 1;
  std::unique_ptr<Work> SendAsync(const Buffer& data, int peer, int tag, const CallOptions& options = {});
  std::unique_ptr<Work> RecvAsync(const Buffer& data, int peer, int tag, const CallOptions& options = {});

  // The blocking forms: the async op, then Wait.
  absl::Status AllReduce(const Buffer& data, ReduceOp op, const CallOptions& options = {});
  absl::Status Broadcast(const Buffer& data, int root, const CallOptions& options = {});
  absl::Status Barrier(const CallOptions& options = {});
  absl::Status ReduceScatter(const Buffer& input, const Buffer& output, ReduceOp op,
                             const CallOptions& options = {});
  absl::Status AllGather(const Buffer& input, const Buffer& output, const CallOptions& options = {});
  absl::Status AllToAll(const Buffer& input, const std::vector<size_t>& send_counts, const Buffer& output,
                        const std::vector<size_t>& recv_counts, const CallOptions& options = {});
  absl::Status Send(const Buffer& data, int peer, int tag, const CallOptions& options = {});
  absl::Status Recv(const Buffer& data, int peer, int tag, const CallOptions& options = {});

  // Host-memory conveniences (data-parallel training's): sums, and rank root's weights to every rank.
  absl::Status AllReduceSum(float* data, size_t n);
  absl::Status AllReduceSum(double* data, size_t n);
  absl::Status Broadcast(float* data, size_t n, int root);

  // A group of some of this group's ranks: collective over this group (every rank calls it, in the same
  // order as its other ops and NewSubgroup calls, with the same arguments: an all-gather checks that, and
  // ranks that disagree fail alike, naming each other). Rank i of the new group is this group's rank
  // ranks[i]. A member gets the new group; a rank not in `ranks` gets nullptr. `name` names it in errors
  // ("ep[1]"). Bad arguments or a disagreement leave this group usable (every rank fails alike).
  absl::StatusOr<std::unique_ptr<Collectives>> NewSubgroup(const std::vector<int>& ranks,
                                                           const std::string& name);

 protected:
  // `world_ranks`: each rank's rank in the root group it was split from (empty: this is the root).
  Collectives(std::string backend, std::string name, int rank, int world_size,
              std::chrono::milliseconds timeout, std::vector<int> world_ranks);

  // An op whose arguments were checked: what it is, for errors and for backends.
  struct Op {
    std::string description;  // "all-reduce (sum) of 1000 x f32": the op and its sizes
    std::string context;      // "gloo group 'world' rank 0 of 3: all-reduce (sum) of 1000 x f32"
    std::chrono::milliseconds timeout;
    void* stream = nullptr;
    void* after = nullptr;
  };

  // The backend's side. Each gets checked arguments and returns the issued op's Work; an op issued after the
  // group failed fails with the group's first error.
  virtual std::unique_ptr<Work> StartAllReduce(const Op& op, const Buffer& data, ReduceOp reduce) = 0;
  // The default: StartAllReduce of each buffer, one Work waiting for them all.
  virtual std::unique_ptr<Work> StartAllReduceMany(const Op& op, const std::vector<Buffer>& data, ReduceOp reduce);
  // The default: StartBroadcast of each buffer, one Work waiting for them all.
  virtual std::unique_ptr<Work> StartBroadcastMany(const Op& op, const std::vector<Buffer>& data,
                                                   const std::vector<int>& roots);
  virtual std::unique_ptr<Work> StartBroadcast(const Op& op, const Buffer& data, int root) = 0;
  virtual std::unique_ptr<Work> StartBarrier(const Op& op) = 0;
  virtual std::unique_ptr<Work> StartReduceScatter(const Op& op, const Buffer& input, const Buffer& output,
                                                   ReduceOp reduce) = 0;
  virtual std::unique_ptr<Work> StartAllGather(const Op& op, const Buffer& input, const Buffer& output) = 0;
  virtual std::unique_ptr<Work> StartAllToAll(const Op& op, const Buffer& input,
                                              const std::vector<size_t>& send_counts, const Buffer& output,
                                              const std::vector<size_t>& recv_counts) = 0;
  virtual std::unique_ptr<Work> StartSend(const Op& op, const Buffer& data, int peer, int tag) = 0;
  virtual std::unique_ptr<Work> StartRecv(const Op& op, const Buffer& data, int peer, int tag) = 0;
  // The op was rejected before it was issued (`error`): the group becomes unusable on this rank once the ops
  // issued before it are done (its peers' next op cannot match any more).
  virtual void FailAfterIssuedOps(const absl::Status& error) = 0;
  // NewSubgroup after every rank has checked that they all passed these arguments and that they are valid:
  // the member's group, or nullptr.
  virtual absl::StatusOr<std::unique_ptr<Collectives>> MakeSubgroup(const std::vector<int>& ranks,
                                                                    const std::string& name) = 0;
  // Every rank's `value` into `all`, in rank order (NewSubgroup's check of its arguments). This all-gathers
  // host memory; a backend that moves device memory only (NCCL) stages it through its device.
  virtual absl::Status AllGatherHostValue(int64_t value, std::vector<int64_t>& all);
  // Whether the backend moves memory on `device` (an error naming what it supports, if not).
  virtual absl::Status CheckDevice(const kernels::Device& device) const = 0;

  // "gloo group 'world' rank 0 of 3".
  std::string GroupContext() const;
  const std::vector<int>& world_ranks() const { return world_ranks_; }

 private:
  Op MakeOp(std::string description, const CallOptions& options) const;
  // One op of several issued as one (`whole`: its timeout and streams), described as `description`.
  Op PartOf(const Op& whole, std::string description) const;
  // Checks what every op needs (timeout, buffers); an error names `op`.
  absl::Status CheckCommon(const Op& op, const CallOptions& options,
                           std::initializer_list<const Buffer*> buffers) const;
  // What reduce-scatter and all-gather check: one buffer (the "whole") is world_size() blocks of the other,
  // of one type, and they overlap only as this rank's block of the whole.
  absl::Status CheckBlocks(const Op& op, const Buffer& input, const Buffer& output,
                           bool input_is_whole) const;
  // What several ops as one check: each buffer (CheckCommon, naming it by index), and that none overlap.
  absl::Status CheckMany(const Op& op, const CallOptions& options, const std::vector<Buffer>& data) const;
  // A send's or recv's peer and tag.
  absl::Status CheckPeer(const Op& op, int peer, int tag) const;
  std::unique_ptr<Work> Reject(const absl::Status& error);

  std::string backend_;
  std::string name_;
  int rank_;
  int world_size_;
  std::chrono::milliseconds timeout_;
  std::vector<int> world_ranks_;
};

// A Work that is already done, with `status`.
std::unique_ptr<Work> DoneWork(absl::Status status);

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_COLLECTIVES_H_
