// A fake NCCL for the CUDA emulation (fake/nccl.h), written from NCCL's documentation: real collectives and
// point-to-point between emulated processes, with NCCL's semantics where the emulation can show them.
//
// - ncclGetUniqueId names a communicator ("<pid>-<random>"); its ranks connect through abstract Unix
//   sockets named after it (fake_nccl_wire.h), a socket per pair of ranks. ncclCommSplit names each child
//   after its parent, the split's index and the color, so every rank derives the same name.
// - Each communicator has its own thread (the "device" side): the ops issued on it run there one at a time,
//   in issue order. Each takes a ticket on its CUDA stream when issued and runs once the stream's earlier
//   work is done (the fake runtime, ../cublaslt/fake/cuda_runtime.h, orders copies, kernels and events
//   after it). Between ncclGroupStart and ncclGroupEnd the calls of a thread fuse: one job per communicator
//   whose messages all move at once, so a group of sends and receives between two ranks cannot deadlock.
// - Sends and receives match per peer in issue order, and so do collectives (NCCL has no tags); a message
//   whose op differs from the receiver's fails both sides, naming the sender's rank and op. A send completes
//   once its data sits in the connection (the socket buffer here, NCCL's buffers on a GPU): a ring of
//   unfused sends then receives completes for small messages, as on NCCL, and waits for larger ones. A test
//   makes messages "large" by shrinking the socket buffers (LMF_FAKE_NCCL_SOCKET_BYTES, fake_nccl_wire.cc).
// - Collectives move whole buffers directly between ranks (not NCCL's rings and trees) and reduce them in
//   rank order, each partial result rounded to the data type (bf16 computes in f32, rounds to nearest
//   even), so every rank gets the same bits. ncclAvg divides the sum by the rank count. Max and min of
//   floating types drop a NaN unless every rank's is NaN, as NCCL's fmaxf and __hmax do.
// - Failures: a peer that exits or aborts shows at once as the async error ncclRemoteError naming the peer
//   (ncclCommGetAsyncError, ncclGetLastError); the op then stays unfinished on its stream, as a GPU kernel
//   waiting for a dead peer does, until ncclCommAbort ends the communicator's pending ops. A peer that never
//   issues its side leaves the op waiting (as NCCL does) for the caller's timeout and abort.
// - Non-blocking communicators (ncclConfig_t::blocking = 0): initialisation, split and finalize return
//   ncclInProgress and finish in the background; collectives and point-to-point are enqueued at once and
//   return ncclSuccess. Buffers must be the fake runtime's device memory (else ncclInvalidArgument).
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/cuda/emulation/nccl/fake_nccl_wire.h"

namespace {

constexpr std::chrono::seconds kConnectLimit{120};
constexpr char kIdMagic[] = "lmf-fake-nccl-id:";

std::mutex last_error_mu;
std::string last_error;  // ncclGetLastError: NCCL documents its comm argument as unused

ncclResult_t Error(ncclResult_t code, const std::string& text) {
  std::lock_guard<std::mutex> lock(last_error_mu);
  last_error = text;
  std::fprintf(stderr, "fake NCCL [pid %d]: %s\n", static_cast<int>(::getpid()), text.c_str());
  return code;
}

size_t TypeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
  }
  return 0;
}
const char* TypeName(ncclDataType_t t) {
  static const char* const names[] = {"i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16"};
  return t >= 0 && t <= ncclBfloat16 ? names[t] : "?";
}
const char* OpName(ncclRedOp_t op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op <= ncclAvg ? names[op] : "?";
}

// One NCCL call.
struct Task {
  enum Kind { kAllReduce, kBroadcast, kReduceScatter, kAllGather, kSend, kRecv } kind;
  const char* send = nullptr;
  char* recv = nullptr;
  size_t count = 0;  // NCCL's count argument: per rank for reduce-scatter and all-gather
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int peer = 0;  // the root of a broadcast, the peer of a send or receive
  cudaStream_t stream = nullptr;

  std::string What() const {
    static const char* const names[] = {"all-reduce", "broadcast", "reduce-scatter",
                                        "all-gather", "send",      "receive"};
    std::string what = names[kind];
    if (kind == kAllReduce || kind == kReduceScatter) what += std::string(" (") + OpName(op) + ")";
    what += " of " + std::to_string(count) + " x " + TypeName(type);
    if (kind == kBroadcast) what += " from rank " + std::to_string(peer);
    return what;
  }
  // What the sending side's op is called on the wire: a receive expects a send.
  std::string Sent() const {
    Task sent = *this;
    if (sent.kind == kRecv) sent.kind = kSend;
    return sent.What();
  }
};

// A unit of the communicator thread's work.
struct Job {
  enum Kind { kOps, kSplit, kFinalize } kind = kOps;
  std::vector<Task> tasks;  // kOps: one call, or a group's calls on this communicator
  cudaStream_t stream = nullptr;
  uint64_t ticket = 0;
  int color = 0, key = 0;  // kSplit
  ncclComm* child = nullptr;
  std::string child_name;
};

}  // namespace

struct ncclComm {
  std::string name;
  int rank = 0, nranks = 0;
  bool blocking = true;
  std::atomic<int> async{ncclInProgress};
  std::atomic<bool> aborting{false};
  std::mutex mu;
  std::condition_variable wake;
  std::deque<Job> jobs;  // under mu
  bool closing = false;  // under mu: ncclCommDestroy waits for the jobs, then the thread ends
  int splits = 0;        // the calling thread's: names the children
  fake_nccl::Mesh mesh;
  std::thread thread;

  bool Stopped() const { return aborting.load(); }
  void Push(Job job) {
    std::lock_guard<std::mutex> lock(mu);
    jobs.push_back(std::move(job));
    wake.notify_all();
  }
};

namespace {

// ---- Reductions: acc = acc (op) x, element by element, in the data type.

float BF16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t FloatToBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);  // round to nearest even
}

// Max and min of floating types are C's fmax and fmin, as NCCL's own (src/device/reduce_kernel.h: fmaxf,
// fmin, and __hmax/__hmin for bf16, which return the other operand): a NaN is dropped unless both are NaN,
// whichever rank holds it.
template <typename T>
T Combine(T a, T b, ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
    case ncclAvg:
      return static_cast<T>(a + b);
    case ncclProd:
      return static_cast<T>(a * b);
    case ncclMax:
      if constexpr (std::is_floating_point_v<T>) return std::fmax(a, b);
      return a < b ? b : a;
    case ncclMin:
      if constexpr (std::is_floating_point_v<T>) return std::fmin(a, b);
      return b < a ? b : a;
  }
  return a;
}

template <typename T>
void ReduceAs(char* acc, const char* x, size_t count, ncclRedOp_t op, int divide_by) {
  for (size_t i = 0; i < count; ++i) {
    T a, b;
    std::memcpy(&a, acc + i * sizeof(T), sizeof(T));
    if (x != nullptr) std::memcpy(&b, x + i * sizeof(T), sizeof(T));
    a = x != nullptr ? Combine(a, b, op) : static_cast<T>(a / divide_by);
    std::memcpy(acc + i * sizeof(T), &a, sizeof(T));
  }
}
void ReduceBF16(char* acc, const char* x, size_t count, ncclRedOp_t op, int divide_by) {
  for (size_t i = 0; i < count; ++i) {
    uint16_t a, b = 0;
    std::memcpy(&a, acc + 2 * i, 2);
    if (x != nullptr) std::memcpy(&b, x + 2 * i, 2);
    const float r = x != nullptr ? Combine(BF16ToFloat(a), BF16ToFloat(b), op) : BF16ToFloat(a) / divide_by;
    a = FloatToBF16(r);
    std::memcpy(acc + 2 * i, &a, 2);
  }
}

// acc = acc (op) x; with x null, acc = acc / divide_by (ncclAvg's last step).
void Reduce(char* acc, const char* x, size_t count, ncclDataType_t type, ncclRedOp_t op, int divide_by = 1) {
  switch (type) {
    case ncclInt8:
      return ReduceAs<int8_t>(acc, x, count, op, divide_by);
    case ncclUint8:
      return ReduceAs<uint8_t>(acc, x, count, op, divide_by);
    case ncclInt32:
      return ReduceAs<int32_t>(acc, x, count, op, divide_by);
    case ncclUint32:
      return ReduceAs<uint32_t>(acc, x, count, op, divide_by);
    case ncclInt64:
      return ReduceAs<int64_t>(acc, x, count, op, divide_by);
    case ncclUint64:
      return ReduceAs<uint64_t>(acc, x, count, op, divide_by);
    case ncclFloat32:
      return ReduceAs<float>(acc, x, count, op, divide_by);
    case ncclFloat64:
      return ReduceAs<double>(acc, x, count, op, divide_by);
    case ncclBfloat16:
      return ReduceBF16(acc, x, count, op, divide_by);
    case ncclFloat16:
      return;  // refused when issued
  }
}

// ---- Running a job's tasks: stage the sends out of device memory, exchange, write the results back.

// What one task sends and receives, staged in host memory (device memory is fenced off from the host, and
// the socket I/O must not hold the device while it waits on peers).
struct Staged {
  std::vector<char> mine;               // this rank's contribution (its send buffer)
  std::vector<std::vector<char>> from;  // per peer: what it sent (reductions, gathers, receives)
};

// The task's messages (appended to `transfers`) and its staging; self sends and receives of the job go
// through `to_self` in issue order.
void Plan(const ncclComm& c, const Task& t, Staged& s, std::vector<fake_nccl::Transfer>& transfers) {
  const size_t unit = TypeSize(t.type), bytes = t.count * unit;
  const size_t block = t.kind == Task::kReduceScatter ? bytes : 0;
  s.from.assign(c.nranks, {});
  const std::string what = t.Sent();
  auto send = [&](int peer, const char* data, size_t n) {
    transfers.push_back({peer, true, what, data, nullptr, n});
  };
  auto receive = [&](int peer, size_t n) {
    s.from[peer].resize(n);
    transfers.push_back({peer, false, what, nullptr, s.from[peer].data(), n});
  };
  switch (t.kind) {
    case Task::kAllReduce:
    case Task::kAllGather:
      for (int p = 0; p < c.nranks; ++p)
        if (p != c.rank) send(p, s.mine.data(), bytes), receive(p, bytes);
      break;
    case Task::kReduceScatter:
      for (int p = 0; p < c.nranks; ++p)
        if (p != c.rank) send(p, s.mine.data() + p * block, block), receive(p, block);
      break;
    case Task::kBroadcast:
      if (c.rank == t.peer) {
        for (int p = 0; p < c.nranks; ++p)
          if (p != c.rank) send(p, s.mine.data(), bytes);
      } else {
        receive(t.peer, bytes);
      }
      break;
    case Task::kSend:
      if (t.peer != c.rank) send(t.peer, s.mine.data(), bytes);
      break;
    case Task::kRecv:
      if (t.peer != c.rank) receive(t.peer, bytes);
      break;
  }
}

// Writes the task's result into its receive buffer (inside cuemu::DeviceWork); `to_self` holds the job's
// sends to this rank itself, in issue order.
void Finish(const ncclComm& c, const Task& t, Staged& s, std::deque<const std::vector<char>*>& to_self) {
  const size_t unit = TypeSize(t.type), bytes = t.count * unit;
  switch (t.kind) {
    case Task::kAllReduce:
    case Task::kReduceScatter: {
      const size_t offset = t.kind == Task::kReduceScatter ? c.rank * bytes : 0;
      std::vector<char> acc;
      for (int p = 0; p < c.nranks; ++p) {  // in rank order: every rank gets the same bits
        const char* x = p == c.rank ? s.mine.data() + offset : s.from[p].data();
        if (p == 0)
          acc.assign(x, x + bytes);
        else
          Reduce(acc.data(), x, t.count, t.type, t.op);
      }
      if (t.op == ncclAvg) Reduce(acc.data(), nullptr, t.count, t.type, t.op, c.nranks);
      std::memcpy(t.recv, acc.data(), bytes);
      break;
    }
    case Task::kAllGather:
      for (int p = 0; p < c.nranks; ++p)
        std::memcpy(t.recv + p * bytes, p == c.rank ? s.mine.data() : s.from[p].data(), bytes);
      break;
    case Task::kBroadcast:
      std::memcpy(t.recv, c.rank == t.peer ? s.mine.data() : s.from[t.peer].data(), bytes);
      break;
    case Task::kSend:
      break;
    case Task::kRecv:
      if (t.peer == c.rank) {
        std::memcpy(t.recv, to_self.front()->data(), bytes);
        to_self.pop_front();
      } else {
        std::memcpy(t.recv, s.from[t.peer].data(), bytes);
      }
      break;
  }
}

// A self send and receive must pair up within the job, in order and with equal sizes (NCCL needs both in
// one group).
ncclResult_t CheckSelfPairs(const ncclComm& c, const std::vector<Task>& tasks, std::string* error) {
  std::vector<size_t> sends, receives;
  for (const Task& t : tasks)
    if ((t.kind == Task::kSend || t.kind == Task::kRecv) && t.peer == c.rank)
      (t.kind == Task::kSend ? sends : receives).push_back(t.count * TypeSize(t.type));
  if (sends == receives) return ncclSuccess;
  *error = "rank " + std::to_string(c.rank) +
           "'s sends to itself and receives from itself do not pair up in " + "one group (" +
           std::to_string(sends.size()) + " sends, " + std::to_string(receives.size()) +
           " receives, or their sizes differ)";
  return ncclInvalidUsage;
}

ncclResult_t FromWire(fake_nccl::WireError e) {
  switch (e) {
    case fake_nccl::WireError::kNone:
      return ncclSuccess;
    case fake_nccl::WireError::kPeerGone:
      return ncclRemoteError;
    case fake_nccl::WireError::kMismatch:
      return ncclInvalidUsage;
    case fake_nccl::WireError::kSystem:
    case fake_nccl::WireError::kStopped:
      return ncclSystemError;
  }
  return ncclInternalError;
}

ncclResult_t RunTasks(ncclComm& c, const std::vector<Task>& tasks, std::string* error) {
  if (ncclResult_t r = CheckSelfPairs(c, tasks, error); r != ncclSuccess) return r;
  std::vector<Staged> staged(tasks.size());
  {
    ::cuemu::DeviceWork device;  // the device reads the send buffers
    for (size_t i = 0; i < tasks.size(); ++i) {
      const Task& t = tasks[i];
      size_t bytes = t.count * TypeSize(t.type);
      if (t.kind == Task::kReduceScatter) bytes *= c.nranks;
      if (t.kind == Task::kRecv || (t.kind == Task::kBroadcast && t.peer != c.rank)) bytes = 0;
      staged[i].mine.assign(t.send, t.send + bytes);
    }
  }
  std::vector<fake_nccl::Transfer> transfers;
  for (size_t i = 0; i < tasks.size(); ++i) Plan(c, tasks[i], staged[i], transfers);
  const fake_nccl::WireError e = c.mesh.Exchange(
      transfers, [&] { return c.Stopped(); }, error);
  if (e != fake_nccl::WireError::kNone) return FromWire(e);
  ::cuemu::DeviceWork device;  // the device writes the receive buffers
  std::deque<const std::vector<char>*> to_self;
  for (size_t i = 0; i < tasks.size(); ++i)
    if (tasks[i].kind == Task::kSend && tasks[i].peer == c.rank) to_self.push_back(&staged[i].mine);
  for (size_t i = 0; i < tasks.size(); ++i) Finish(c, tasks[i], staged[i], to_self);
  return ncclSuccess;
}

// ---- The communicator's thread.

void Fail(ncclComm& c, ncclResult_t code, const std::string& text) {
  c.async = Error(code, "communicator " + c.name + " rank " + std::to_string(c.rank) + " of " +
                            std::to_string(c.nranks) + ": " + text);
}

void Run(ncclComm* comm);
// Starts the communicator's thread (under its lock: End takes the thread from under it).
void StartThread(ncclComm* c) {
  std::lock_guard<std::mutex> lock(c->mu);
  c->thread = std::thread(Run, c);
}

// ncclCommSplit on the parent's thread: every rank's color and key, then this rank's child, if any.
void RunSplit(ncclComm& c, Job& job) {
  std::vector<int32_t> mine = {job.color, job.key};
  std::vector<std::vector<int32_t>> theirs(c.nranks, std::vector<int32_t>(2));
  std::vector<fake_nccl::Transfer> transfers;
  for (int p = 0; p < c.nranks; ++p) {
    if (p == c.rank) continue;
    transfers.push_back({p, true, "comm split", reinterpret_cast<const char*>(mine.data()), nullptr, 8});
    transfers.push_back({p, false, "comm split", nullptr, reinterpret_cast<char*>(theirs[p].data()), 8});
  }
  theirs[c.rank] = mine;
  std::string error;
  const fake_nccl::WireError e = c.mesh.Exchange(
      transfers, [&] { return c.Stopped(); }, &error);
  if (e != fake_nccl::WireError::kNone) {
    Fail(c, FromWire(e), "ncclCommSplit: " + error);
    if (job.child != nullptr) job.child->async = ncclRemoteError;
    return;
  }
  if (job.child == nullptr) return;
  // The child's ranks: the parent's ranks of this color, ordered by key, then by parent rank.
  std::vector<std::pair<int32_t, int>> members;
  for (int p = 0; p < c.nranks; ++p)
    if (theirs[p][0] == job.color) members.push_back({theirs[p][1], p});
  std::sort(members.begin(), members.end());
  job.child->nranks = static_cast<int>(members.size());
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].second == c.rank) job.child->rank = static_cast<int>(i);
  job.child->name = job.child_name;
  StartThread(job.child);
}

// Waits for a job, or for the end: nullopt when aborting, or when closing with no job left.
bool NextJob(ncclComm& c, Job* job) {
  std::unique_lock<std::mutex> lock(c.mu);
  c.wake.wait(lock, [&] { return c.Stopped() || c.closing || !c.jobs.empty(); });
  if (c.Stopped() || c.jobs.empty()) return false;
  *job = std::move(c.jobs.front());
  c.jobs.pop_front();
  return true;
}

// After a failure the communicator's work stays where it is, as a GPU kernel waiting on a dead peer does,
// until ncclCommAbort (or ncclCommDestroy, which a failed communicator should not get).
void StallUntilEnd(ncclComm& c) {
  std::unique_lock<std::mutex> lock(c.mu);
  c.wake.wait(lock, [&] { return c.Stopped() || c.closing; });
}

void Run(ncclComm* comm) {
  ncclComm& c = *comm;
  std::string error;
  const fake_nccl::WireError e = c.mesh.Connect(
      c.name, c.rank, c.nranks, kConnectLimit, [&] { return c.Stopped(); }, &error);
  if (e != fake_nccl::WireError::kNone) {
    if (!c.Stopped()) Fail(c, FromWire(e), "initialisation: " + error);
    StallUntilEnd(c);
  } else {
    c.async = ncclSuccess;
  }
  Job job;
  while (c.async == ncclSuccess || c.async == ncclInProgress) {
    if (!NextJob(c, &job)) break;
    if (job.kind == Job::kFinalize) {
      c.async = ncclSuccess;
      continue;
    }
    if (job.kind == Job::kSplit) {
      RunSplit(c, job);
      continue;
    }
    while (!fake_cuda::StreamTurnReached(job.stream, job.ticket, std::chrono::milliseconds(20)))
      if (c.Stopped()) break;
    const ncclResult_t r = c.Stopped() ? ncclSystemError : RunTasks(c, job.tasks, &error);
    if (r != ncclSuccess) {
      if (!c.Stopped())
        Fail(c, r, job.tasks.size() == 1 ? job.tasks[0].What() + ": " + error : "a group: " + error);
      StallUntilEnd(c);
    }
    fake_cuda::StreamFinish(job.stream, job.ticket);
  }
  // Aborted or failed: the pending work ends, and its streams go on.
  std::lock_guard<std::mutex> lock(c.mu);
  for (Job& rest : c.jobs) {
    if (rest.kind == Job::kOps) fake_cuda::StreamFinish(rest.stream, rest.ticket);
    if (rest.kind == Job::kSplit && rest.child != nullptr) rest.child->async = ncclSystemError;
  }
  c.jobs.clear();
}

// Waits for a blocking communicator's call to settle; a non-blocking one's returns ncclInProgress.
ncclResult_t Settle(ncclComm* c) {
  if (!c->blocking) return ncclInProgress;
  while (c->async == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return static_cast<ncclResult_t>(c->async.load());
}

bool IsBlocking(const ncclConfig_t* config) {
  return config == nullptr || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
}

// The calls of the open ncclGroupStart, per communicator in the order first used (this thread's).
thread_local int group_depth = 0;
thread_local std::vector<std::pair<ncclComm*, std::vector<Task>>> group_tasks;

void Submit(ncclComm* c, std::vector<Task> tasks) {
  Job job;
  job.tasks = std::move(tasks);
  job.stream = job.tasks.front().stream;
  job.ticket = fake_cuda::StreamEnqueue(job.stream);
  c->Push(std::move(job));
}

bool InDevice(const void* p, size_t bytes) {
  return bytes == 0 ||
         (fake_cuda::IsDevice(p) && fake_cuda::IsDevice(static_cast<const char*>(p) + bytes - 1));
}

// Checks a call and enqueues it (or adds it to the open group).
ncclResult_t Issue(ncclComm* c, Task t, size_t send_bytes, size_t recv_bytes) {
  const std::string what = std::string("fake NCCL: ") + t.What();
  if (c == nullptr) return Error(ncclInvalidArgument, what + ": null communicator");
  if (c->Stopped()) return Error(ncclInvalidUsage, what + ": the communicator was aborted");
  const int async = c->async;
  if (async != ncclSuccess && async != ncclInProgress) return static_cast<ncclResult_t>(async);
  if (TypeSize(t.type) == 0 || t.type == ncclFloat16)
    return Error(ncclInvalidArgument, what + ": data type " + std::to_string(t.type) + " is not emulated");
  if (t.op < ncclSum || t.op > ncclAvg) return Error(ncclInvalidArgument, what + ": unknown reduction");
  if ((t.kind == Task::kBroadcast || t.kind == Task::kSend || t.kind == Task::kRecv) &&
      (t.peer < 0 || t.peer >= c->nranks))
    return Error(ncclInvalidArgument, what + ": rank " + std::to_string(t.peer) + " is not in [0, " +
                                          std::to_string(c->nranks) + ")");
  if (!InDevice(t.send, send_bytes) || !InDevice(t.recv, recv_bytes))
    return Error(ncclInvalidArgument, what + ": a buffer is not device memory (send " +
                                          std::to_string(reinterpret_cast<uintptr_t>(t.send)) + ", receive " +
                                          std::to_string(reinterpret_cast<uintptr_t>(t.recv)) + ")");
  if (group_depth == 0) {
    Submit(c, {t});
    return ncclSuccess;
  }
  for (auto& [comm, tasks] : group_tasks) {
    if (comm != c) continue;
    if (tasks.front().stream != t.stream)
      return Error(ncclInvalidUsage, what + ": one group's calls on a communicator use two streams");
    tasks.push_back(t);
    return ncclSuccess;
  }
  group_tasks.push_back({c, {t}});
  return ncclSuccess;
}

}  // namespace

// ---- The API.

ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::random_device random;
  const std::string name =
      std::to_string(::getpid()) + "-" + std::to_string(random()) + std::to_string(random());
  std::memset(id->internal, 0, sizeof(id->internal));
  std::snprintf(id->internal, sizeof(id->internal), "%s%s", kIdMagic, name.c_str());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  if (comm == nullptr) return Error(ncclInvalidArgument, "ncclCommInitRank: null communicator pointer");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return Error(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " +
                                          std::to_string(nranks) + " (expected 0 <= rank < nranks)");
  if (std::strncmp(id.internal, kIdMagic, sizeof(kIdMagic) - 1) != 0 ||
      strnlen(id.internal, sizeof(id.internal)) == sizeof(id.internal))
    return Error(ncclInvalidArgument, "ncclCommInitRank: the unique id was not made by ncclGetUniqueId");
  ncclComm* c = new ncclComm;
  c->name = id.internal + sizeof(kIdMagic) - 1;
  c->rank = rank, c->nranks = nranks, c->blocking = IsBlocking(config);
  StartThread(c);
  *comm = c;
  return Settle(c);
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (comm == nullptr || newcomm == nullptr)
    return Error(ncclInvalidArgument, "ncclCommSplit: null argument");
  const int async = comm->async;
  if (async != ncclSuccess)
    return static_cast<ncclResult_t>(async == ncclInProgress ? ncclInvalidUsage : async);
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return Error(ncclInvalidArgument, "ncclCommSplit: color " + std::to_string(color) + " (expected >= 0)");
  Job job;
  job.kind = Job::kSplit;
  job.color = color, job.key = key;
  job.child_name = comm->name + "/s" + std::to_string(comm->splits++) + "c" + std::to_string(color);
  *newcomm = nullptr;
  if (color != NCCL_SPLIT_NOCOLOR) {
    job.child = new ncclComm;
    job.child->blocking = config != nullptr ? IsBlocking(config) : comm->blocking;
    *newcomm = job.child;
  }
  ncclComm* child = job.child;
  const bool blocking = child != nullptr ? child->blocking : comm->blocking;
  comm->Push(std::move(job));
  if (child == nullptr || !blocking) return child == nullptr ? ncclSuccess : ncclInProgress;
  return Settle(child);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return Error(ncclInvalidArgument, "ncclCommFinalize: null communicator");
  int expected = ncclSuccess;
  if (!comm->async.compare_exchange_strong(expected, ncclInProgress) && expected != ncclInProgress)
    return static_cast<ncclResult_t>(expected);
  Job job;
  job.kind = Job::kFinalize;
  comm->Push(std::move(job));
  return Settle(comm);
}

namespace {
ncclResult_t End(ncclComm_t comm, bool abort) {
  if (comm == nullptr) return ncclSuccess;
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    if (abort) comm->aborting = true;
    comm->closing = true;
    comm->wake.notify_all();
    thread = std::move(comm->thread);
  }
  if (thread.joinable()) thread.join();
  delete comm;  // the handle is gone, as NCCL's is
  return ncclSuccess;
}
}  // namespace

ncclResult_t ncclCommDestroy(ncclComm_t comm) { return End(comm, false); }
ncclResult_t ncclCommAbort(ncclComm_t comm) { return End(comm, true); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr) return ncclInvalidArgument;
  *async_error = static_cast<ncclResult_t>(comm->async.load());
  return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  *count = comm->nranks;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  *rank = comm->rank;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t) {
  thread_local std::string copy;  // stays valid while this thread makes no other call
  std::lock_guard<std::mutex> lock(last_error_mu);
  copy = last_error;
  return copy.c_str();
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * TypeSize(datatype);
  return Issue(comm,
               {Task::kAllReduce, static_cast<const char*>(sendbuff), static_cast<char*>(recvbuff), count,
                datatype, op, 0, stream},
               bytes, bytes);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * TypeSize(datatype);
  const bool root_here = comm != nullptr && comm->rank == root;
  return Issue(comm,
               {Task::kBroadcast, static_cast<const char*>(sendbuff), static_cast<char*>(recvbuff), count,
                datatype, ncclSum, root, stream},
               root_here ? bytes : 0, bytes);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  const size_t bytes = recvcount * TypeSize(datatype);
  return Issue(comm,
               {Task::kReduceScatter, static_cast<const char*>(sendbuff), static_cast<char*>(recvbuff),
                recvcount, datatype, op, 0, stream},
               comm != nullptr ? bytes * comm->nranks : 0, bytes);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = sendcount * TypeSize(datatype);
  return Issue(comm,
               {Task::kAllGather, static_cast<const char*>(sendbuff), static_cast<char*>(recvbuff), sendcount,
                datatype, ncclSum, 0, stream},
               bytes, comm != nullptr ? bytes * comm->nranks : 0);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return Issue(
      comm,
      {Task::kSend, static_cast<const char*>(sendbuff), nullptr, count, datatype, ncclSum, peer, stream},
      count * TypeSize(datatype), 0);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return Issue(comm,
               {Task::kRecv, nullptr, static_cast<char*>(recvbuff), count, datatype, ncclSum, peer, stream},
               0, count * TypeSize(datatype));
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return Error(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  std::vector<std::pair<ncclComm*, std::vector<Task>>> groups;
  groups.swap(group_tasks);
  for (auto& [comm, tasks] : groups) Submit(comm, std::move(tasks));
  return ncclSuccess;
}
