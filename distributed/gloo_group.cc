// GlooGroup (see gloo_group.h): Gloo's TCP device and file-store rendezvous, each op as Gloo calls on the
// group's thread, and Gloo's exceptions turned into errors that name the group, the rank, the op and the
// peer that failed first.
#include "distributed/gloo_group.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "distributed/gloo_context.h"
#include "distributed/reduce_functions.h"
#include "distributed/tcp_store.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/alltoallv.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"

#if defined(LMF_SANITIZER_BUILD)
// ThreadSanitizer (--config=tsan) sees only instrumented code: Gloo is the system library, built without it,
// and its transport threads drop their references to a buffer (an atomic decrement TSan cannot see) that the
// process then deletes. Races inside Gloo are not this project's to check; everything else stays checked.
// Here rather than in a test, so that every binary with Gloo has it: the trainer's data-parallel ranks are
// the `train` or `sweep` binary. (Defined but never called under --config=asan.)
extern "C" const char* __tsan_default_suppressions() { return "race:libgloo.so\n"; }
#endif

namespace lmf::distributed {

// What a failure message needs to know about an op.
struct GlooOpFacts {
  std::string context;  // "gloo group 'world' rank 0 of 3: all-reduce (sum) of 1000 x f32"
  std::chrono::milliseconds timeout;
  std::string awaited;  // what it waits for: "its peers (...)", "rank 1's matching recv (...)"
};

namespace {

// Gloo writes to its sockets with writev, which raises SIGPIPE on a connection its peer closed (a rank that
// failed, or died): by default that kills this process before the op can fail naming the peer. A handler
// that does nothing turns it into the EPIPE error Gloo reports (and, unlike SIG_IGN, is not inherited by a
// program this process executes). Installed once per process, and only over the default disposition.
void SurviveClosedPeers() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
    struct sigaction quiet {};
    quiet.sa_handler = [](int) {};
    sigemptyset(&quiet.sa_mask);
    ::sigaction(SIGPIPE, &quiet, nullptr);
  });
}

constexpr char kFailureNotePrefix[] = "failed.";
constexpr uint64_t kPointToPointSlotPrefix = 0x50;

std::string Key(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : absl::StrCat(prefix, "/", key);
}

bool Contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

// A send's or recv's Gloo slot: [8 bits prefix][4 data type][20 tag][32 element count], so that only a
// send and a recv that agree on all three match.
uint64_t PointToPointSlot(const Buffer& data, int tag) {
  return (kPointToPointSlotPrefix << 56) | (uint64_t{static_cast<uint8_t>(data.type)} << 52) |
         (static_cast<uint64_t>(tag) << 32) | static_cast<uint64_t>(data.count);
}

// A collective's Gloo tag: ranks that issue different ops or sizes do not match.
uint32_t CollectiveTag(const std::string& signature) { return static_cast<uint32_t>(Fingerprint(signature)); }

// A pointer Gloo may be handed for a buffer (an empty one's may be null: Gloo copies zero bytes at it).
void* DataOrEmpty(const Buffer& buffer) {
  static char empty;
  return buffer.bytes() > 0 ? buffer.data : &empty;
}

void RunAllReduce(const std::shared_ptr<gloo::Context>& context, void* data, size_t count, DataType type,
                  ReduceOp reduce, uint32_t tag, std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions opts(context);
  // Gloo's typed setters only use the element size: an unsigned integer of the same width.
  switch (DataTypeSize(type)) {
    case 1:
      opts.setOutput(static_cast<uint8_t*>(data), count);
      break;
    case 2:
      opts.setOutput(static_cast<uint16_t*>(data), count);
      break;
    case 4:
      opts.setOutput(static_cast<uint32_t*>(data), count);
      break;
    default:
      opts.setOutput(static_cast<uint64_t*>(data), count);
      break;
  }
  opts.setReduceFunction(HostReduce(type, reduce));
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

// A collective's Work: the status its task on the group's thread sets.
class QueuedWork : public Work {
 public:
  explicit QueuedWork(std::shared_ptr<OpResult> result) : result_(std::move(result)) {}
  ~QueuedWork() override { (void)result_->Wait(); }  // the op may still use the caller's buffers
  absl::Status Wait() override { return result_->Wait(); }

 private:
  std::shared_ptr<OpResult> result_;
};

}  // namespace

class GlooGroupState {
 public:
  std::shared_ptr<MeshContext> context;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<RendezvousStore> store;
  std::shared_ptr<TcpStoreServer> store_server;  // rank 0's, when the group meets through a TCP store
  std::string key_prefix;  // the group's keys in the store: "" for the root group, "sub0", "sub0/sub2"
  std::string store_name;  // where the ranks meet, for errors: the folder, or "the TCP store at host:port"
  std::chrono::milliseconds connect_timeout{0};
  int rank = 0;
  std::vector<std::string> peer_names;  // Collectives::PeerName of each rank

  // OK, or why `op` cannot run: the group failed earlier.
  absl::Status Usable(const GlooOpFacts& op) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) return absl::OkStatus();
    return absl::Status(
        failure_.code(),
        absl::StrCat(op.context, ": not run: the group failed earlier: ", failure_.message()));
  }

  // `op` failed with Gloo's exception `gloo_error`: the error, naming the peer that failed first where Gloo
  // (a closed connection) or that peer's failure note tells which.
  absl::Status Failed(const GlooOpFacts& op, const std::string& gloo_error) {
    if (std::optional<absl::Status> earlier = EarlierFailure(op)) return *earlier;
    if (Contains(gloo_error, "Timed out waiting")) {
      return Fail(absl::DeadlineExceededError(absl::StrCat(
          op.context, ": timed out after ", op.timeout.count(), " ms waiting for ", op.awaited)));
    }
    if (const int peer = context->PeerNamedIn(gloo_error); peer >= 0) {
      if (std::optional<std::string> note = WaitForNote(peer)) {
        return Fail(
            absl::UnavailableError(absl::StrCat(op.context, ": ", peer_names[peer],
                                                " closed its connection after failing first: ", *note)),
            *note);
      }
      return Fail(
          absl::UnavailableError(absl::StrCat(op.context, ": ", peer_names[peer],
                                              " closed its connection without reporting an error: its "
                                              "process died or exited")));
    }
    if (Contains(gloo_error, "Application timeout caused pair closure")) {
      // Another op of this group (a send or recv waited for on another thread) timed out and Gloo closed the
      // group's connections: that failure, recorded in a moment, is the group's.
      const auto deadline = std::chrono::steady_clock::now() + GlooGroup::kFailureNoteGrace;
      while (std::chrono::steady_clock::now() < deadline) {
        if (std::optional<absl::Status> earlier = EarlierFailure(op)) return *earlier;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    return Fail(absl::InternalError(absl::StrCat(op.context, ": gloo: ", gloo_error)));
  }

  // Makes `error` the group's failure if it is the first: writes the failure note (`note`, else the error's
  // message) for the peers, then closes every connection. Returns `error`.
  absl::Status Fail(absl::Status error, std::string note = "") {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failure_.ok()) return error;  // another failure came first and closed the group
      failure_ = CopyForThread(error);   // read by every thread that uses the group
    }
    if (note.empty()) note = std::string(error.message());
    try {
      store->set(Key(key_prefix, absl::StrCat(kFailureNotePrefix, rank)),
                 std::vector<char>(note.begin(), note.end()));
    } catch (const std::exception&) {
      // The rendezvous folder is gone or unwritable: the peers will name this rank as dead instead.
    }
    context->CloseAll();
    return error;
  }

 private:
  std::optional<absl::Status> EarlierFailure(const GlooOpFacts& op) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) return std::nullopt;
    return absl::Status(
        failure_.code(),
        absl::StrCat(op.context, ": stopped by the group's earlier failure: ", failure_.message()));
  }

  // The failure note of `peer`, waiting up to kFailureNoteGrace for it (a peer writes it right after it
  // fails; Gloo closes the connections of a rank whose op times out before that rank can write it).
  std::optional<std::string> WaitForNote(int peer) {
    const std::string key = Key(key_prefix, absl::StrCat(kFailureNotePrefix, peer));
    const auto deadline = std::chrono::steady_clock::now() + GlooGroup::kFailureNoteGrace;
    for (;;) {
      try {
        if (store->Has(key)) {
          const std::vector<char> bytes = store->get(key);
          return std::string(bytes.begin(), bytes.end());
        }
      } catch (const std::exception&) {
        return std::nullopt;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  std::mutex mu_;
  absl::Status failure_;  // the first; OK until then
};

namespace {

// A send or recv: posted on the group's thread, then waited for by its Work.
struct PointToPointOp {
  OpResult posted;
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;  // set before `posted`
  std::chrono::steady_clock::time_point deadline;          // the post time plus the op's timeout
};

class PointToPointWork : public Work {
 public:
  PointToPointWork(std::shared_ptr<GlooGroupState> state, GlooOpFacts facts, bool send,
                   std::shared_ptr<PointToPointOp> op)
      : state_(std::move(state)), facts_(std::move(facts)), send_(send), op_(std::move(op)) {}
  ~PointToPointWork() override { (void)Wait(); }  // the op may still use the caller's buffer

  absl::Status Wait() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (result_.has_value()) return CopyForThread(*result_);
    absl::Status status = op_->posted.Wait();
    if (status.ok()) {
      const auto left =
          std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                     op_->deadline - std::chrono::steady_clock::now()));
      try {
        const bool done = send_ ? op_->buffer->waitSend(left) : op_->buffer->waitRecv(left);
        if (!done) status = state_->Failed(facts_, "the wait was aborted");
      } catch (const std::exception& e) {
        status = state_->Failed(facts_, e.what());
      }
    }
    result_ = CopyForThread(status);
    return status;
  }

 private:
  std::shared_ptr<GlooGroupState> state_;
  GlooOpFacts facts_;
  bool send_;
  std::shared_ptr<PointToPointOp> op_;
  std::mutex mu_;
  std::optional<absl::Status> result_;
};

}  // namespace

GlooGroup::GlooGroup(const std::string& name, int rank, int world_size, std::chrono::milliseconds timeout,
                     std::vector<int> world_ranks, std::shared_ptr<GlooGroupState> state)
    : Collectives("gloo", name, rank, world_size, timeout, std::move(world_ranks)), state_(std::move(state)) {
  state_->rank = rank;
  for (int r = 0; r < world_size; ++r) state_->peer_names.push_back(PeerName(r));
  queue_ = std::make_unique<OpQueue>();
}

GlooGroup::~GlooGroup() { queue_.reset(); }

absl::StatusOr<std::unique_ptr<GlooGroup>> GlooGroup::Connect(const GlooGroupOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("gloo group: rank ", options.rank,
                                                   " is not in [0, world_size=", options.world_size, ")"));
  }
  SurviveClosedPeers();
  auto state = std::make_shared<GlooGroupState>();
  absl::StatusOr<OpenedStore> opened =
      OpenRendezvousStore(options.rendezvous_dir, options.store_host, options.store_port, options.rank,
                          options.connect_timeout, options.abort_connect);
  if (!opened.ok()) {
    return absl::Status(opened.status().code(), absl::StrCat("gloo group: rank ", options.rank, " of ",
                                                             options.world_size, ": ", opened.status().message()));
  }
  state->store = std::move(opened->store);
  state->store_server = std::move(opened->server);
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    state->device = gloo::transport::tcp::CreateDevice(attr);
    state->context = std::make_shared<MeshContext>(options.rank, options.world_size);
    state->context->setTimeout(options.connect_timeout);
    state->context->ConnectFullMesh(*state->store, state->device, options.abort_connect);
    state->store->StopAsking();
    state->context->setTimeout(options.timeout);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("gloo group: rank ", options.rank, " of ", options.world_size,
                                               " could not connect via ", RendezvousStoreName(options.rendezvous_dir, options.store_host, options.store_port), ": ", e.what()));
  }
  state->store_name = RendezvousStoreName(options.rendezvous_dir, options.store_host, options.store_port);
  state->connect_timeout = options.connect_timeout;
  return std::unique_ptr<GlooGroup>(
      new GlooGroup(options.name, options.rank, options.world_size, options.timeout, {}, std::move(state)));
}

absl::StatusOr<std::unique_ptr<Collectives>> GlooGroup::MakeSubgroup(const std::vector<int>& ranks,
                                                                     const std::string& name) {
  const std::string key_prefix = Key(state_->key_prefix, absl::StrCat("sub", subgroups_made_++));
  const auto member = std::find(ranks.begin(), ranks.end(), rank());
  if (member == ranks.end()) return std::unique_ptr<Collectives>();
  const int subrank = static_cast<int>(member - ranks.begin());
  const int size = static_cast<int>(ranks.size());
  std::vector<int> sub_world_ranks;
  for (int r : ranks) sub_world_ranks.push_back(world_ranks().empty() ? r : world_ranks()[r]);
  auto state = std::make_shared<GlooGroupState>();
  state->device = state_->device;
  state->store = state_->store;
  state->store_server = state_->store_server;
  state->key_prefix = key_prefix;
  state->store_name = state_->store_name;
  state->connect_timeout = state_->connect_timeout;
  try {
    state->context = std::make_shared<MeshContext>(subrank, size);
    state->context->setTimeout(state_->connect_timeout);
    gloo::rendezvous::PrefixStore store(key_prefix, *state_->store);
    state->context->ConnectFullMesh(store, state_->device, nullptr);
    state->context->setTimeout(timeout());
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "gloo group '", name, "' of group '", this->name(), "': ", PeerName(rank()), " (rank ", subrank,
        " of ", size, ") could not connect via ", state_->store_name, ": ", e.what()));
  }
  return std::unique_ptr<Collectives>(
      new GlooGroup(name, subrank, size, timeout(), std::move(sub_world_ranks), std::move(state)));
}

absl::Status GlooGroup::CheckDevice(const kernels::Device& device) const {
  if (device.is_cpu()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("a buffer is on cuda:", device.index,
                                                 ", but the Gloo backend moves host memory only (GPU buffers "
                                                 "need the NCCL backend)"));
}

void GlooGroup::FailAfterIssuedOps(const absl::Status& error) {
  queue_->Add([state = state_, error = CopyForThread(error)] { (void)state->Fail(error); });
}

std::unique_ptr<Work> GlooGroup::Enqueue(const Op& op, std::function<absl::Status()> body) {
  GlooOpFacts facts{
      op.context, op.timeout,
      "its peers (one is slow, hung or dead, or issued another op, or this one with other sizes)"};
  auto result = std::make_shared<OpResult>();
  queue_->Add([state = state_, facts = std::move(facts), body = std::move(body), result] {
    absl::Status status = state->Usable(facts);
    if (status.ok()) {
      try {
        status = body();
        if (!status.ok()) status = state->Fail(status);
      } catch (const std::exception& e) {
        status = state->Failed(facts, e.what());
      }
    }
    result->Set(status);
  });
  return std::make_unique<QueuedWork>(std::move(result));
}

std::unique_ptr<Work> GlooGroup::StartAllReduce(const Op& op, const Buffer& data, ReduceOp reduce) {
  return Enqueue(op, [context = state_->context, data, reduce, tag = CollectiveTag(op.description),
                      timeout = op.timeout] {
    if (data.count > 0) RunAllReduce(context, data.data, data.count, data.type, reduce, tag, timeout);
    return absl::OkStatus();
  });
}

std::unique_ptr<Work> GlooGroup::StartBroadcast(const Op& op, const Buffer& data, int root) {
  return Enqueue(
      op, [context = state_->context, data, root, tag = CollectiveTag(op.description), timeout = op.timeout] {
        if (data.count == 0) return absl::OkStatus();
        gloo::BroadcastOptions opts(context);
        opts.setOutput(static_cast<uint8_t*>(data.data), data.bytes());
        opts.setRoot(root);
        opts.setTag(tag);
        opts.setTimeout(timeout);
        gloo::broadcast(opts);
        return absl::OkStatus();
      });
}

std::unique_ptr<Work> GlooGroup::StartBarrier(const Op& op) {
  return Enqueue(op, [context = state_->context, tag = CollectiveTag(op.description), timeout = op.timeout] {
    gloo::BarrierOptions opts(context);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::barrier(opts);
    return absl::OkStatus();
  });
}

std::unique_ptr<Work> GlooGroup::StartReduceScatter(const Op& op, const Buffer& input, const Buffer& output,
                                                    ReduceOp reduce) {
  return Enqueue(op, [context = state_->context, input, output, reduce, rank = rank(),
                      tag = CollectiveTag(op.description), timeout = op.timeout] {
    if (output.count == 0) return absl::OkStatus();
    std::vector<char> all(input.bytes());  // a copy: the input is only read, and may hold the output
    std::memcpy(all.data(), input.data, all.size());
    RunAllReduce(context, all.data(), input.count, input.type, reduce, tag, timeout);
    std::memcpy(output.data, all.data() + rank * output.bytes(), output.bytes());
    return absl::OkStatus();
  });
}

std::unique_ptr<Work> GlooGroup::StartAllGather(const Op& op, const Buffer& input, const Buffer& output) {
  return Enqueue(op, [context = state_->context, input, output, rank = rank(),
                      tag = CollectiveTag(op.description), timeout = op.timeout] {
    if (input.count == 0) return absl::OkStatus();
    gloo::AllgatherOptions opts(context);
    if (input.data != static_cast<char*>(output.data) + rank * input.bytes()) {  // else in place
      opts.setInput(static_cast<uint8_t*>(input.data), input.bytes());
    }
    opts.setOutput(static_cast<uint8_t*>(output.data), output.bytes());
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::allgather(opts);
    return absl::OkStatus();
  });
}

std::unique_ptr<Work> GlooGroup::StartAllToAll(const Op& op, const Buffer& input,
                                               const std::vector<size_t>& send_counts, const Buffer& output,
                                               const std::vector<size_t>& recv_counts) {
  return Enqueue(op, [state = state_, input, output, send_counts, recv_counts, rank = rank(),
                      context = op.context, counts_tag = CollectiveTag("all-to-all counts"),
                      tag = CollectiveTag(absl::StrCat("all-to-all of ", DataTypeName(input.type))),
                      timeout = op.timeout] {
    const int world = state->context->size;
    // First what each rank sends to and expects from each other: [2p] sends to p, [2p + 1] expects from p.
    std::vector<int64_t> mine(2 * world), theirs(2 * world);
    for (int p = 0; p < world; ++p) {
      mine[2 * p] = static_cast<int64_t>(send_counts[p]);
      mine[2 * p + 1] = static_cast<int64_t>(recv_counts[p]);
    }
    gloo::AlltoallvOptions counts(state->context);
    counts.setInput(mine.data(), std::vector<int64_t>(world, 2));
    counts.setOutput(theirs.data(), std::vector<int64_t>(world, 2));
    counts.setTag(counts_tag);
    counts.setTimeout(timeout);
    gloo::alltoallv(counts);
    std::vector<std::string> disagree;
    for (int p = 0; p < world; ++p) {
      if (p == rank) continue;
      if (theirs[2 * p] != mine[2 * p + 1]) {
        disagree.push_back(absl::StrCat(state->peer_names[p], " sends ", theirs[2 * p],
                                        " elements to this rank, which expects ", mine[2 * p + 1]));
      }
      if (theirs[2 * p + 1] != mine[2 * p]) {
        disagree.push_back(absl::StrCat("this rank sends ", mine[2 * p], " elements to ",
                                        state->peer_names[p], ", which expects ", theirs[2 * p + 1]));
      }
    }
    if (!disagree.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": the ranks' counts disagree: ", absl::StrJoin(disagree, "; "),
                       " (rank r's recv_counts[p] must equal rank p's send_counts[r])"));
    }
    const int64_t size = static_cast<int64_t>(DataTypeSize(input.type));
    std::vector<int64_t> send_bytes(world), recv_bytes(world);
    for (int p = 0; p < world; ++p) {
      send_bytes[p] = mine[2 * p] * size;
      recv_bytes[p] = mine[2 * p + 1] * size;
    }
    gloo::AlltoallvOptions opts(state->context);
    opts.setInput(static_cast<uint8_t*>(DataOrEmpty(input)), send_bytes);
    opts.setOutput(static_cast<uint8_t*>(DataOrEmpty(output)), recv_bytes);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::alltoallv(opts);
    return absl::OkStatus();
  });
}

std::unique_ptr<Work> GlooGroup::StartSend(const Op& op, const Buffer& data, int peer, int tag) {
  return StartPointToPoint(op, data, peer, tag, /*send=*/true);
}

std::unique_ptr<Work> GlooGroup::StartRecv(const Op& op, const Buffer& data, int peer, int tag) {
  return StartPointToPoint(op, data, peer, tag, /*send=*/false);
}

std::unique_ptr<Work> GlooGroup::StartPointToPoint(const Op& op, const Buffer& data, int peer, int tag,
                                                   bool send) {
  if (data.count > kMaxPointToPointElements) {
    const absl::Status error = absl::InvalidArgumentError(
        absl::StrCat(op.context, ": the Gloo backend moves at most ", kMaxPointToPointElements,
                     " elements in one ", send ? "send" : "recv"));
    FailAfterIssuedOps(error);
    return DoneWork(error);
  }
  GlooOpFacts facts{op.context, op.timeout,
                    absl::StrCat(PeerName(peer), "'s matching ", send ? "recv" : "send",
                                 " (the same tag, count and data type)")};
  auto p2p = std::make_shared<PointToPointOp>();
  queue_->Add([state = state_, facts, p2p, data, peer, slot = PointToPointSlot(data, tag), send,
               timeout = op.timeout] {
    absl::Status status = state->Usable(facts);
    if (status.ok()) {
      try {
        p2p->buffer = state->context->createUnboundBuffer(DataOrEmpty(data), data.bytes());
        if (send) {
          p2p->buffer->send(peer, slot);
        } else {
          p2p->buffer->recv(peer, slot);
        }
        p2p->deadline = std::chrono::steady_clock::now() + timeout;
      } catch (const std::exception& e) {
        status = state->Failed(facts, e.what());
      }
    }
    p2p->posted.Set(status);
  });
  return std::make_unique<PointToPointWork>(state_, std::move(facts), send, std::move(p2p));
}

}  // namespace lmf::distributed
