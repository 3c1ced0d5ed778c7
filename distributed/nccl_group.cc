// NcclGroup (see nccl_group.h): NCCL's non-blocking communicator, bootstrapped through the rendezvous store,
// each op's completion an event polled against its deadline.
#include "distributed/nccl_group.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "distributed/gloo_context.h"
#include "distributed/tcp_store.h"

namespace lmf::distributed {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kUniqueIdKey[] = "nccl.unique_id";
constexpr std::chrono::microseconds kPollInterval{50};

ncclDataType_t NcclType(DataType type) {
  switch (type) {
    case DataType::kF32: return ncclFloat32;
    case DataType::kF64: return ncclFloat64;
    case DataType::kBF16: return ncclBfloat16;
    case DataType::kI32: return ncclInt32;
    case DataType::kI64: return ncclInt64;
    case DataType::kU8: return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t NcclOp(ReduceOp op) { return op == ReduceOp::kMax ? ncclMax : ncclSum; }

// Waits for a non-blocking communicator's call that returned `result` to settle (ncclInProgress until then),
// up to `deadline`: its final result, or ncclInProgress when the deadline passed first.
ncclResult_t Settle(ncclComm_t comm, ncclResult_t result, Clock::time_point deadline) {
  while (result == ncclInProgress) {
    if (Clock::now() >= deadline) return ncclInProgress;
    std::this_thread::sleep_for(kPollInterval);
    if (ncclCommGetAsyncError(comm, &result) != ncclSuccess) return ncclSystemError;
  }
  return result;
}

std::string NcclText(ncclComm_t comm, ncclResult_t result) {
  const char* last = ncclGetLastError(comm);
  return absl::StrCat("NCCL: ", ncclGetErrorString(result), last != nullptr && last[0] != '\0' ? ": " : "",
                      last != nullptr ? last : "");
}

std::string CudaText(cudaError_t error) { return absl::StrCat("CUDA: ", cudaGetErrorString(error)); }

}  // namespace

class NcclGroupState {
 public:
  ncclComm_t comm = nullptr;
  int device = 0;
  int world_size = 1;
  cudaStream_t stream = nullptr;  // the group's own, for ops issued without CallOptions::stream
  int* barrier_value = nullptr;   // device: the barrier's all-reduced integer
  int64_t* counts = nullptr;      // device: world_size x world_size all-to-all counts
  OpenedStore store;              // the root group's (kept so that rank 0 serves it for the group's life)

  ~NcclGroupState() {
    ::cudaSetDevice(device);
    if (comm != nullptr) {
      bool aborted;
      {
        std::lock_guard<std::mutex> lock(mu_);
        aborted = aborted_;
      }
      if (!aborted) {
        const auto deadline = Clock::now() + std::chrono::seconds(10);
        if (Settle(comm, ncclCommFinalize(comm), deadline) == ncclSuccess) {
          ncclCommDestroy(comm);
        } else {
          ncclCommAbort(comm);
        }
      }
    }
    if (barrier_value != nullptr) ::cudaFree(barrier_value);
    if (counts != nullptr) ::cudaFree(counts);
    if (stream != nullptr) ::cudaStreamDestroy(stream);
  }

  // f(), a call on the communicator, under the lock: it cannot race with Fail's ncclCommAbort, which frees
  // the communicator. ncclInvalidUsage, without calling f, once the communicator was aborted.
  ncclResult_t WithComm(const std::function<ncclResult_t()>& f) {
    std::lock_guard<std::mutex> lock(mu_);
    if (comm == nullptr || aborted_) return ncclInvalidUsage;
    return f();
  }

  // Settle for a call on this communicator, each poll under the lock.
  ncclResult_t SettleCall(ncclResult_t result, Clock::time_point deadline) {
    while (result == ncclInProgress) {
      if (Clock::now() >= deadline) return ncclInProgress;
      std::this_thread::sleep_for(kPollInterval);
      if (WithComm([&] { return ncclCommGetAsyncError(comm, &result); }) != ncclSuccess) return ncclSystemError;
    }
    return result;
  }

  // OK, or why an op cannot run: the group failed earlier.
  absl::Status Usable(const std::string& context) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) return absl::OkStatus();
    return absl::Status(failure_.code(),
                        absl::StrCat(context, ": not run: the group failed earlier: ", failure_.message()));
  }

  // Makes `error` the group's failure if it is the first, and aborts the communicator (its pending work on
  // this rank ends). Returns `error`.
  absl::Status Fail(absl::Status error) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return error;
    failure_ = error;
    if (comm != nullptr && !aborted_) {
      ncclCommAbort(comm);
      aborted_ = true;
    }
    return error;
  }

 private:
  std::mutex mu_;
  absl::Status failure_;
  bool aborted_ = false;
};

namespace {

// An issued op: done when the event recorded after it on its stream has completed.
class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclGroupState> state, std::string context, std::chrono::milliseconds timeout,
           Clock::time_point deadline, cudaEvent_t event)
      : state_(std::move(state)), context_(std::move(context)), timeout_(timeout), deadline_(deadline),
        event_(event) {}
  ~NcclWork() override {
    (void)Wait();
    ::cudaEventDestroy(event_);
  }

  absl::Status Wait() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!result_.has_value()) result_ = Poll();
    return *result_;
  }

 private:
  absl::Status Poll() {
    for (;;) {
      const cudaError_t done = ::cudaEventQuery(event_);
      // Once the group failed its event says nothing: the abort ended the communicator's pending work, done
      // or not. The failure is recorded before the abort, so an event that completed through it is seen here.
      if (absl::Status usable = state_->Usable(context_); !usable.ok()) return usable;
      if (done == cudaSuccess) return absl::OkStatus();
      if (done != cudaErrorNotReady) {
        return state_->Fail(absl::InternalError(absl::StrCat(context_, ": ", CudaText(done))));
      }
      ncclResult_t async = ncclSuccess;
      if (state_->WithComm([&] { return ncclCommGetAsyncError(state_->comm, &async); }) == ncclSuccess &&
          async != ncclSuccess && async != ncclInProgress) {
        return state_->Fail(absl::UnavailableError(
            absl::StrCat(context_, ": ", NcclText(state_->comm, async), " (a peer failed or the network did)")));
      }
      if (Clock::now() >= deadline_) {
        return state_->Fail(absl::DeadlineExceededError(absl::StrCat(
            context_, ": timed out after ", timeout_.count(), " ms waiting for the other ranks (communicator aborted)")));
      }
      std::this_thread::sleep_for(kPollInterval);
    }
  }

  std::shared_ptr<NcclGroupState> state_;
  std::string context_;
  std::chrono::milliseconds timeout_;
  Clock::time_point deadline_;
  cudaEvent_t event_;
  std::mutex mu_;
  std::optional<absl::Status> result_;
};

// calls(i) for i in [0, n) between ncclGroupStart and ncclGroupEnd, stopping at the first that fails (the
// group is ended either way); the failure, else ncclGroupEnd's result.
ncclResult_t Grouped(size_t n, const std::function<ncclResult_t(size_t)>& calls) {
  ncclResult_t r = ncclGroupStart();
  for (size_t i = 0; i < n && (r == ncclSuccess || r == ncclInProgress); ++i) r = calls(i);
  const ncclResult_t ended = ncclGroupEnd();
  return r == ncclSuccess || r == ncclInProgress ? ended : r;
}

// Enqueues `call` on the op's stream (the group's own when the op names none) and returns its Work; a failed
// enqueue fails the group.
std::unique_ptr<Work> Issue(const std::shared_ptr<NcclGroupState>& state, const std::string& context, void* op_stream,
                            void* after, std::chrono::milliseconds timeout,
                            const std::function<ncclResult_t(cudaStream_t)>& call) {
  if (absl::Status usable = state->Usable(context); !usable.ok()) return DoneWork(usable);
  if (cudaError_t e = ::cudaSetDevice(state->device); e != cudaSuccess)
    return DoneWork(state->Fail(absl::InternalError(absl::StrCat(context, ": ", CudaText(e)))));
  cudaStream_t stream = op_stream != nullptr ? static_cast<cudaStream_t>(op_stream) : state->stream;
  if (after != nullptr && after != op_stream) {  // CallOptions::after: the op's stream waits for its work so far
    cudaEvent_t done = nullptr;
    cudaError_t e = ::cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    if (e == cudaSuccess) e = ::cudaEventRecord(done, static_cast<cudaStream_t>(after));
    if (e == cudaSuccess) e = ::cudaStreamWaitEvent(stream, done, 0);
    if (done != nullptr) ::cudaEventDestroy(done);  // released once the wait has passed it
    if (e != cudaSuccess)
      return DoneWork(state->Fail(absl::InternalError(absl::StrCat(context, ": waiting for CallOptions::after: ",
                                                                   CudaText(e)))));
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  const ncclResult_t result = state->SettleCall(state->WithComm([&] { return call(stream); }), deadline);
  if (result == ncclInProgress) {
    return DoneWork(state->Fail(absl::DeadlineExceededError(
        absl::StrCat(context, ": NCCL did not take the op within ", timeout.count(), " ms (communicator aborted)"))));
  }
  if (result != ncclSuccess) {
    return DoneWork(state->Fail(absl::InternalError(absl::StrCat(context, ": ", NcclText(state->comm, result)))));
  }
  cudaEvent_t event = nullptr;
  cudaError_t e = ::cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (e == cudaSuccess) e = ::cudaEventRecord(event, stream);
  if (e != cudaSuccess) {
    if (event != nullptr) ::cudaEventDestroy(event);
    return DoneWork(state->Fail(absl::InternalError(absl::StrCat(context, ": ", CudaText(e)))));
  }
  return std::make_unique<NcclWork>(state, context, timeout, deadline, event);
}

// Rank 0's NCCL unique id, published by rank 0 in the store and read by the others.
absl::StatusOr<ncclUniqueId> ShareUniqueId(RendezvousStore& store, int rank, std::chrono::milliseconds timeout) {
  ncclUniqueId id;
  try {
    if (rank == 0) {
      if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
        return absl::InternalError(absl::StrCat("ncclGetUniqueId: ", NcclText(nullptr, r)));
      store.set(kUniqueIdKey, std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
      return id;
    }
    store.wait({kUniqueIdKey}, timeout);
    const std::vector<char> bytes = store.get(kUniqueIdKey);
    if (bytes.size() != sizeof(id.internal))
      return absl::InternalError(absl::StrCat("the NCCL unique id in the store has ", bytes.size(), " bytes, not ",
                                              sizeof(id.internal)));
    std::memcpy(id.internal, bytes.data(), bytes.size());
    return id;
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("rank 0's NCCL unique id: ", e.what()));
  }
}

// The group's stream and device scratch, on `state.device`.
absl::Status AllocateDeviceState(NcclGroupState& state) {
  cudaError_t e = ::cudaSetDevice(state.device);
  if (e == cudaSuccess) e = ::cudaStreamCreateWithFlags(&state.stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = ::cudaMalloc(&state.barrier_value, sizeof(int));
  if (e == cudaSuccess) {
    e = ::cudaMalloc(&state.counts, sizeof(int64_t) * state.world_size * state.world_size);
  }
  if (e != cudaSuccess) return absl::InternalError(absl::StrCat("cuda:", state.device, ": ", CudaText(e)));
  return absl::OkStatus();
}

}  // namespace

NcclGroup::NcclGroup(const std::string& name, int rank, int world_size, std::chrono::milliseconds timeout,
                     std::vector<int> world_ranks, std::shared_ptr<NcclGroupState> state)
    : Collectives("nccl", name, rank, world_size, timeout, std::move(world_ranks)), state_(std::move(state)) {}

namespace {

std::string Who(const NcclGroupOptions& options) {
  return absl::StrCat("nccl group '", options.name, "' rank ", options.rank, " of ", options.world_size, " (cuda:",
                      options.device, ")");
}

absl::Status CheckRank(const NcclGroupOptions& options, const std::string& who) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": rank is not in [0, world_size)"));
  }
  return absl::OkStatus();
}

}  // namespace

NcclGroup::~NcclGroup() = default;  // each Work waited for its op; the state goes with the last of them

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::Connect(const NcclGroupOptions& options) {
  const std::string who = Who(options);
  if (absl::Status s = CheckRank(options, who); !s.ok()) return s;
  absl::StatusOr<OpenedStore> store = OpenRendezvousStore(options.rendezvous_dir, options.store_host,
                                                          options.store_port, options.rank, options.connect_timeout, {});
  if (!store.ok()) return absl::Status(store.status().code(), absl::StrCat(who, ": ", store.status().message()));
  return ConnectThrough(options, *std::move(store));
}

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::ConnectThroughExistingStore(const NcclGroupOptions& options) {
  const std::string who = Who(options);
  if (absl::Status s = CheckRank(options, who); !s.ok()) return s;
  OpenedStore opened;
  if (!options.store_host.empty()) {
    absl::StatusOr<std::unique_ptr<TcpRendezvousStore>> client =
        TcpRendezvousStore::Connect(options.store_host, options.store_port, options.connect_timeout, {});
    if (!client.ok()) return absl::Status(client.status().code(), absl::StrCat(who, ": ", client.status().message()));
    opened.store = *std::move(client);
  } else if (!options.rendezvous_dir.empty()) {
    opened.store = std::make_shared<FileRendezvousStore>(options.rendezvous_dir, nullptr);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(who, ": rendezvous_dir and store_host are empty"));
  }
  return ConnectThrough(options, std::move(opened));
}

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::ConnectThrough(const NcclGroupOptions& options,
                                                                     OpenedStore opened) {
  const std::string who = Who(options);
  auto state = std::make_shared<NcclGroupState>();
  state->device = options.device;
  state->world_size = options.world_size;
  state->store = std::move(opened);
  if (absl::Status s = AllocateDeviceState(*state); !s.ok()) return absl::Status(s.code(), absl::StrCat(who, ": ", s.message()));
  absl::StatusOr<ncclUniqueId> id = ShareUniqueId(*state->store.store, options.rank, options.connect_timeout);
  if (!id.ok()) return absl::Status(id.status().code(), absl::StrCat(who, ": ", id.status().message()));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t started = ncclCommInitRankConfig(&state->comm, options.world_size, *id, options.rank, &config);
  const ncclResult_t result = state->comm != nullptr
                                  ? Settle(state->comm, started, Clock::now() + options.connect_timeout)
                                  : started;
  if (result != ncclSuccess) {
    const std::string why = result == ncclInProgress
                                ? absl::StrCat("the other ranks did not join within ", options.connect_timeout.count(), " ms")
                                : NcclText(state->comm, result);
    if (state->comm != nullptr) (void)state->Fail(absl::UnavailableError(why));
    return absl::UnavailableError(absl::StrCat(who, ": ncclCommInitRankConfig via ",
                                               RendezvousStoreName(options.rendezvous_dir, options.store_host,
                                                                   options.store_port),
                                               ": ", why));
  }
  return std::unique_ptr<NcclGroup>(
      new NcclGroup(options.name, options.rank, options.world_size, options.timeout, {}, std::move(state)));
}

std::unique_ptr<Work> NcclGroup::StartAllReduce(const Op& op, const Buffer& data, ReduceOp reduce) {
  return Issue(state_, op.context, op.stream, op.after, op.timeout, [&](cudaStream_t s) {
    return ncclAllReduce(data.data, data.data, data.count, NcclType(data.type), NcclOp(reduce), state_->comm, s);
  });
}

std::unique_ptr<Work> NcclGroup::StartAllReduceMany(const Op& op, const std::vector<Buffer>& data,
                                                     ReduceOp reduce) {
  return Issue(state_, op.context, op.stream, op.after, op.timeout, [&](cudaStream_t s) {
    return Grouped(data.size(), [&](size_t i) {
      return ncclAllReduce(data[i].data, data[i].data, data[i].count, NcclType(data[i].type), NcclOp(reduce),
                           state_->comm, s);
    });
  });
}

std::unique_ptr<Work> NcclGroup::StartBroadcastMany(const Op& op, const std::vector<Buffer>& data,
                                                     const std::vector<int>& roots) {
  return Issue(state_, op.context, op.stream, op.after, op.timeout, [&](cudaStream_t s) {
    return Grouped(data.size(), [&](size_t i) {
      return ncclBroadcast(data[i].data, data[i].data, data[i].count, NcclType(data[i].type), roots[i],
                           state_->comm, s);
    });
  });
}

std::unique_ptr<Work> NcclGroup::StartBroadcast(const Op& op, const Buffer& data, int root) {
  return Issue(state_, op.context, op.stream, op.after, op.timeout, [&](cudaStream_t s) {
    return ncclBroadcast(data.data, data.data, data.count, NcclType(data.type), root, state_->comm, s);
  });
}

std::unique_ptr<Work> NcclGroup::StartBarrier(const Op& op) {
  return Issue(state_, op.context, op.stream, op.after, op.timeout, [&](cudaStream_t s) {
    return ncclAllReduce(state_->barrier_value, state_->barrier_value, 1, ncclInt32, ncclSum, state_->comm, s);
  });
}

std::unique_ptr<Work> NcclGroup::StartReduceScatter(const Op& op, const Buffer& input, const Buffer& output,
                                                    ReduceOp reduce) {
  return Issue(state_, op.context, op.stream, op.after, op.timeout, [&](cudaStream_t s) {
    return ncclReduceScatter(input.data, output.data, output.count, NcclType(input.type), NcclOp(reduce),
                             state_->comm, s);
  });
}

std::unique_ptr<Work> NcclGroup::StartAllGather(const Op& op, const Buffer& input, const Buffer& output) {
  return Issue(state_, op.context, op.stream, op.after, op.timeout, [&](cudaStream_t s) {
    return ncclAllGather(input.data, output.data, input.count, NcclType(input.type), state_->comm, s);
  });
}

std::unique_ptr<Work> NcclGroup::StartAllToAll(const Op& op, const Buffer& input,
                                               const std::vector<size_t>& send_counts, const Buffer& output,
                                               const std::vector<size_t>& recv_counts) {
  // The counts first: every rank's send counts to every rank, so that a rank whose recv_counts disagree
  // fails (as do its peers) instead of receiving the wrong number of bytes.
  const int world = world_size(), me = rank();
  std::vector<int64_t> table(static_cast<size_t>(world) * world);
  std::copy(send_counts.begin(), send_counts.end(), table.begin() + static_cast<size_t>(me) * world);
  int64_t* row = state_->counts + static_cast<size_t>(me) * world;
  std::unique_ptr<Work> exchange = Issue(state_, op.context + " (its counts)", op.stream, op.after, op.timeout, [&](cudaStream_t s) {
    if (::cudaMemcpyAsync(row, table.data() + static_cast<size_t>(me) * world, sizeof(int64_t) * world,
                          cudaMemcpyHostToDevice, s) != cudaSuccess)
      return ncclUnhandledCudaError;
    return ncclAllGather(row, state_->counts, world, ncclInt64, state_->comm, s);
  });
  if (absl::Status s = exchange->Wait(); !s.ok()) return DoneWork(s);
  // The all-gather is done: a plain copy reads its result.
  if (cudaError_t e = ::cudaMemcpy(table.data(), state_->counts, sizeof(int64_t) * table.size(), cudaMemcpyDeviceToHost);
      e != cudaSuccess) {
    return DoneWork(state_->Fail(absl::InternalError(absl::StrCat(op.context, ": ", CudaText(e)))));
  }
  std::vector<std::string> disagree;
  for (int peer = 0; peer < world; ++peer) {
    const int64_t sent = table[static_cast<size_t>(peer) * world + me];
    if (sent != static_cast<int64_t>(recv_counts[peer])) {
      disagree.push_back(absl::StrCat(PeerName(peer), " sends ", sent, " elements, recv_counts[", peer, "] is ",
                                      recv_counts[peer]));
    }
  }
  if (!disagree.empty()) {
    return DoneWork(state_->Fail(
        absl::InvalidArgumentError(absl::StrCat(op.context, ": the counts disagree: ", absl::StrJoin(disagree, "; ")))));
  }
  const size_t element = DataTypeSize(input.type);
  return Issue(state_, op.context, op.stream, op.after, op.timeout, [&](cudaStream_t s) {
    size_t sent = 0, received = 0;  // elements before peer's
    return Grouped(static_cast<size_t>(world), [&](size_t peer) {
      ncclResult_t r = ncclSuccess;
      if (send_counts[peer] > 0)
        r = ncclSend(static_cast<char*>(input.data) + sent * element, send_counts[peer], NcclType(input.type),
                     static_cast<int>(peer), state_->comm, s);
      if ((r == ncclSuccess || r == ncclInProgress) && recv_counts[peer] > 0)
        r = ncclRecv(static_cast<char*>(output.data) + received * element, recv_counts[peer], NcclType(output.type),
                     static_cast<int>(peer), state_->comm, s);
      sent += send_counts[peer];
      received += recv_counts[peer];
      return r;
    });
  });
}

std::unique_ptr<Work> NcclGroup::StartSend(const Op& op, const Buffer& data, int peer, int /*tag: by order*/) {
  return Issue(state_, op.context, op.stream, op.after, op.timeout, [&](cudaStream_t s) {
    return ncclSend(data.data, data.count, NcclType(data.type), peer, state_->comm, s);
  });
}

std::unique_ptr<Work> NcclGroup::StartRecv(const Op& op, const Buffer& data, int peer, int /*tag: by order*/) {
  return Issue(state_, op.context, op.stream, op.after, op.timeout, [&](cudaStream_t s) {
    return ncclRecv(data.data, data.count, NcclType(data.type), peer, state_->comm, s);
  });
}

absl::Status NcclGroup::AllGatherHostValue(int64_t value, std::vector<int64_t>& all) {
  // Through the all-to-all's device table (world_size x world_size entries; its first row here).
  const std::string context = absl::StrCat(GroupContext(), ": all-gather of 1 x i64 from host memory");
  int64_t* mine = state_->counts + rank();
  std::unique_ptr<Work> gather = Issue(state_, context, nullptr, nullptr, timeout(), [&](cudaStream_t s) {
    if (::cudaMemcpyAsync(mine, &value, sizeof(int64_t), cudaMemcpyHostToDevice, s) != cudaSuccess)
      return ncclUnhandledCudaError;
    return ncclAllGather(mine, state_->counts, 1, ncclInt64, state_->comm, s);
  });
  if (absl::Status s = gather->Wait(); !s.ok()) return s;
  all.resize(world_size());
  if (cudaError_t e = ::cudaMemcpy(all.data(), state_->counts, sizeof(int64_t) * all.size(), cudaMemcpyDeviceToHost);
      e != cudaSuccess) {
    return state_->Fail(absl::InternalError(absl::StrCat(context, ": ", CudaText(e))));
  }
  return absl::OkStatus();
}

void NcclGroup::FailAfterIssuedOps(const absl::Status& error) {
  // The ops issued before are on the stream ahead of any later one; waiting for them here would block the
  // caller up to their timeouts, so the group fails now and their Works report what they find.
  (void)state_->Fail(error);
}

absl::StatusOr<std::unique_ptr<Collectives>> NcclGroup::MakeSubgroup(const std::vector<int>& ranks,
                                                                     const std::string& name) {
  const auto member = std::find(ranks.begin(), ranks.end(), rank());
  const int subrank = member != ranks.end() ? static_cast<int>(member - ranks.begin()) : -1;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t split = nullptr;
  const std::string context = absl::StrCat(GroupContext(), ": subgroup '", name, "'");
  if (absl::Status usable = state_->Usable(context); !usable.ok()) return usable;
  ::cudaSetDevice(state_->device);
  ncclResult_t result = state_->WithComm([&] {
    return ncclCommSplit(state_->comm, subrank >= 0 ? 0 : NCCL_SPLIT_NOCOLOR, std::max(subrank, 0), &split, &config);
  });
  result = state_->SettleCall(result, Clock::now() + timeout());
  if (result == ncclSuccess && split != nullptr) result = Settle(split, ncclInProgress, Clock::now() + timeout());
  if (result != ncclSuccess) {
    return state_->Fail(absl::UnavailableError(absl::StrCat(context, ": ncclCommSplit: ",
                                                            result == ncclInProgress ? "timed out"
                                                                                     : NcclText(state_->comm, result))));
  }
  if (subrank < 0) return std::unique_ptr<Collectives>();
  auto state = std::make_shared<NcclGroupState>();
  state->comm = split;
  state->device = state_->device;
  state->world_size = static_cast<int>(ranks.size());
  if (absl::Status s = AllocateDeviceState(*state); !s.ok()) return state->Fail(s);
  std::vector<int> sub_world_ranks;
  for (int r : ranks) sub_world_ranks.push_back(world_ranks().empty() ? r : world_ranks()[r]);
  return std::unique_ptr<Collectives>(new NcclGroup(name, subrank, static_cast<int>(ranks.size()), timeout(),
                                                    std::move(sub_world_ranks), std::move(state)));
}

absl::Status NcclGroup::CheckDevice(const kernels::Device& device) const {
  if (device.is_cuda() && device.index == state_->device) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "a buffer is ", device.is_cuda() ? absl::StrCat("on cuda:", device.index) : std::string("in host memory"),
      ", but this NCCL group's rank moves memory on cuda:", state_->device, " only"));
}

}  // namespace lmf::distributed
