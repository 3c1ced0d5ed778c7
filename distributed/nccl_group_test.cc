// NcclGroup on GPUs (tag gpu; skips, saying so, with fewer CUDA devices than a case needs). Each case forks
// one process per rank (rank r on cuda:r), meeting through a rendezvous folder, and checks exact values:
// a group of one runs every op and refuses a host buffer, naming it; groups of 2, 3 and 4 run every op (each
// data type NcclGroup maps, a max with NaNs, every broadcast root, async ops waited for in reverse order);
// subgroups of a group of 3 sum among their members only; a rank whose peer never issues the all-reduce
// fails within the op's timeout with DeadlineExceeded naming its group and rank; a rank whose peer was
// killed fails within the op's timeout naming its group and rank, as do ranks that issue different ops;
// after a failure the next op fails at once with the first error.
// Runs on hardware, and in CI on the CUDA emulation with its fake NCCL (nccl_group_test_emulated, 4 emulated
// devices).
#include "distributed/nccl_group.h"

#include <cuda_runtime.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace lmf::distributed {
namespace {

// Runs body(rank) in `n` forked processes; each one's exit code (128 + signal if killed; ranks still running
// after `deadline` are killed). This process never touches CUDA (a child forked after its parent initialised
// CUDA cannot use it).
std::vector<int> InProcesses(int n, const std::function<int(int rank)>& body,
                             std::chrono::seconds deadline = std::chrono::seconds(120)) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(body(rank));
    pids.push_back(pid);
  }
  std::vector<int> codes(n, -1);
  const auto end = std::chrono::steady_clock::now() + deadline;
  for (int left = n; left > 0;) {
    for (int rank = 0; rank < n; ++rank) {
      int status = 0;
      if (codes[rank] != -1 || ::waitpid(pids[rank], &status, WNOHANG) != pids[rank]) continue;
      codes[rank] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      --left;
    }
    if (left > 0 && std::chrono::steady_clock::now() > end) {
      for (int rank = 0; rank < n; ++rank)
        if (codes[rank] == -1) ::kill(pids[rank], SIGKILL);
      ADD_FAILURE() << "ranks still running after " << deadline.count() << " s were killed";
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return codes;
}

int Devices() {
  return InProcesses(1, [](int) {
    int count = 0;
    return ::cudaGetDeviceCount(&count) == cudaSuccess ? std::min(count, 100) : 0;
  })[0];
}

// Device memory holding `values` (elements of T; bf16 as raw uint16_t), and reading it back.
template <typename T>
struct DeviceArray {
  DeviceArray(const std::vector<T>& values, DataType type, int device)
      : count(values.size()), type(type), device(device) {
    EXPECT_EQ(::cudaMalloc(&data, sizeof(T) * std::max<size_t>(count, 1)), cudaSuccess);
    EXPECT_EQ(::cudaMemcpy(data, values.data(), sizeof(T) * count, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceArray() { ::cudaFree(data); }
  std::vector<T> Read() const {
    std::vector<T> out(count);
    EXPECT_EQ(::cudaMemcpy(out.data(), data, sizeof(T) * count, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  Buffer buffer() const { return Buffer{data, count, type, kernels::Device::Cuda(device)}; }
  T* data = nullptr;
  size_t count;
  DataType type;
  int device;
};
struct DeviceFloats : DeviceArray<float> {
  DeviceFloats(const std::vector<float>& values, int device) : DeviceArray(values, DataType::kF32, device) {}
};

// The bf16 bits of a value bf16 holds exactly (its f32 bits' top half).
uint16_t Bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

NcclGroupOptions Options(int rank, int world, const std::string& folder) {
  NcclGroupOptions options;
  options.rank = rank;
  options.world_size = world;
  options.device = rank;
  options.rendezvous_dir = folder;
  options.timeout = std::chrono::seconds(20);
  options.connect_timeout = std::chrono::seconds(60);
  return options;
}

std::string Folder(const std::string& name) { return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name); }

TEST(NcclGroup, OneRankRunsEveryOpAndRefusesHostMemory) {
  if (Devices() < 1) GTEST_SKIP() << "no CUDA device: the NCCL backend is only compiled here";
  const std::string folder = Folder("one");
  const std::vector<int> codes = InProcesses(1, [&](int) {
    absl::StatusOr<std::unique_ptr<NcclGroup>> group = NcclGroup::Connect(Options(0, 1, folder));
    if (!group.ok()) return 10;
    DeviceFloats a({1, 2, 3, 4}, 0), b({0, 0, 0, 0}, 0);
    if (!(*group)->AllReduce(a.buffer(), ReduceOp::kSum).ok() || a.Read() != std::vector<float>{1, 2, 3, 4})
      return 11;
    if (!(*group)->Broadcast(a.buffer(), 0).ok() || !(*group)->Barrier().ok()) return 12;
    if (!(*group)->AllGather(a.buffer(), b.buffer()).ok() || b.Read() != std::vector<float>{1, 2, 3, 4})
      return 13;
    DeviceFloats c({0, 0, 0, 0}, 0);
    if (!(*group)->AllToAll(a.buffer(), {4}, c.buffer(), {4}).ok() ||
        c.Read() != std::vector<float>{1, 2, 3, 4})
      return 14;
    std::vector<float> host = {1};
    const absl::Status refused = (*group)->AllReduce(Buffer::Host(host.data(), 1), ReduceOp::kSum);
    if (!absl::StrContains(refused.message(),
                           "in host memory, but this NCCL group's rank moves memory on cuda:0"))
      return 15;
    return 0;
  });
  EXPECT_EQ(codes, std::vector<int>{0}) << "10: connect, 11-14: an op's result, 15: the host buffer's error";
}

// The max of f32, f64 and bf16 with a NaN on rank 0 (element 0), on the last rank (element 1) and on every
// rank (element 2): NCCL's fmaxf and __hmax drop a NaN unless all are NaN (collectives.h). 0, or 18.
int MaxOfNans(Collectives& group, int rank, int world) {
  const float r = float(rank), nan = std::numeric_limits<float>::quiet_NaN();
  const auto with_nans = [&](auto of) {
    return std::vector<decltype(of(r))>{of(rank == 0 ? nan : r), of(rank == world - 1 ? nan : r), of(nan)};
  };
  const auto expected = [&](auto values, auto to_float) {
    return to_float(values[0]) == world - 1 && to_float(values[1]) == world - 2 && std::isnan(to_float(values[2]));
  };
  const auto same = [](auto x) { return x; };
  const auto bf16_value = [](uint16_t h) {
    const uint32_t bits = uint32_t{h} << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  };
  DeviceFloats f32(with_nans(same), rank);
  DeviceArray<double> f64(with_nans([](float x) { return double(x); }), DataType::kF64, rank);
  DeviceArray<uint16_t> bf16(with_nans(Bf16), DataType::kBF16, rank);
  for (const Buffer& b : {f32.buffer(), f64.buffer(), bf16.buffer()})
    if (!group.AllReduce(b, ReduceOp::kMax).ok()) return 18;
  const bool ok = expected(f32.Read(), same) && expected(f64.Read(), same) && expected(bf16.Read(), bf16_value);
  return ok ? 0 : 18;
}

// Every op of collectives.h on rank `rank` of `world`, each result exact; 0, or the number of the first
// failed check.
int EveryOp(Collectives& group, int rank, int world) {
  const float r = float(rank);
  // All-reduce: sum and max of f32, and sum of f64, bf16, i32 and i64 (1 + 2 + ... + world).
  const float total = float(world * (world + 1) / 2);
  DeviceFloats x({r + 1, 10 * (r + 1)}, rank), m({r, -r}, rank);
  if (!group.AllReduce(x.buffer(), ReduceOp::kSum).ok() || x.Read() != std::vector<float>{total, 10 * total})
    return 11;
  if (!group.AllReduce(m.buffer(), ReduceOp::kMax).ok() ||
      m.Read() != std::vector<float>{float(world - 1), 0})
    return 12;
  if (const int failed = MaxOfNans(group, rank, world); failed != 0) return failed;
  DeviceArray<double> f64({r + 1}, DataType::kF64, rank);
  DeviceArray<uint16_t> bf16({Bf16(r + 1)}, DataType::kBF16, rank);
  DeviceArray<int32_t> i32({rank + 1, -(rank + 1)}, DataType::kI32, rank);
  DeviceArray<int64_t> i64({(int64_t{1} << 40) * (rank + 1)}, DataType::kI64, rank);
  if (!group.AllReduce(f64.buffer(), ReduceOp::kSum).ok() || f64.Read()[0] != total) return 13;
  if (!group.AllReduce(bf16.buffer(), ReduceOp::kSum).ok() || bf16.Read()[0] != Bf16(total)) return 14;
  if (!group.AllReduce(i32.buffer(), ReduceOp::kSum).ok() ||
      i32.Read() != std::vector<int32_t>{int32_t(total), -int32_t(total)})
    return 15;
  if (!group.AllReduce(i64.buffer(), ReduceOp::kSum).ok() ||
      i64.Read()[0] != (int64_t{1} << 40) * int64_t(total))
    return 16;
  // A buffer far larger than a socket or NCCL buffer holds (4 MiB), so the ranks' transfers must overlap.
  DeviceFloats large(std::vector<float>(size_t{1} << 20, r + 1), rank);
  if (!group.AllReduce(large.buffer(), ReduceOp::kSum).ok() ||
      large.Read() != std::vector<float>(size_t{1} << 20, total))
    return 17;
  // Several all-reduces as one op (one NCCL group): f32 of 2 and of 2^20 elements, bf16, i64.
  {
    DeviceFloats a({r + 1, -(r + 1)}, rank), b(std::vector<float>(size_t{1} << 20, 2 * (r + 1)), rank);
    DeviceArray<uint16_t> c({Bf16(r + 1)}, DataType::kBF16, rank);
    DeviceArray<int64_t> d({rank + 1}, DataType::kI64, rank);
    if (!group.AllReduceManyAsync({a.buffer(), b.buffer(), c.buffer(), d.buffer()}, ReduceOp::kSum)->Wait().ok() ||
        a.Read() != std::vector<float>{total, -total} ||
        b.Read() != std::vector<float>(size_t{1} << 20, 2 * total) || c.Read()[0] != Bf16(total) ||
        d.Read()[0] != int64_t(total))
      return 19;
  }
  // Several broadcasts as one op: buffer i from rank i % world.
  {
    std::vector<std::unique_ptr<DeviceFloats>> values;
    std::vector<Buffer> buffers;
    std::vector<int> roots;
    for (int i = 0; i < 2 * world; ++i) {
      values.push_back(std::make_unique<DeviceFloats>(std::vector<float>(2 + i, 100 * r + i), rank));
      buffers.push_back(values.back()->buffer());
      roots.push_back(i % world);
    }
    if (!group.BroadcastManyAsync(buffers, roots)->Wait().ok()) return 25;
    for (int i = 0; i < 2 * world; ++i) {
      if (values[i]->Read() != std::vector<float>(2 + i, 100.f * (i % world) + i)) return 25;
    }
  }
  // Broadcast from every root.
  for (int root = 0; root < world; ++root) {
    DeviceFloats b({100 * r, 100 * r + 1}, rank);
    if (!group.Broadcast(b.buffer(), root).ok() ||
        b.Read() != std::vector<float>{100.f * root, 100.f * root + 1})
      return 20 + root;
  }
  // Reduce-scatter then all-gather: rank r's block p is 10 p + r; block p summed is 10 p world + total -
  // world.
  std::vector<float> blocks;
  for (int p = 0; p < world; ++p) blocks.insert(blocks.end(), {10.f * p + r, 1});
  DeviceFloats input(blocks, rank), mine({0, 0}, rank), gathered(std::vector<float>(2 * world, -1), rank);
  if (!group.ReduceScatter(input.buffer(), mine.buffer(), ReduceOp::kSum).ok() ||
      mine.Read() != std::vector<float>{10.f * rank * world + total - world, float(world)})
    return 30;
  if (!group.AllGather(mine.buffer(), gathered.buffer()).ok()) return 31;
  std::vector<float> expected;
  for (int p = 0; p < world; ++p)
    expected.insert(expected.end(), {10.f * p * world + total - world, float(world)});
  if (gathered.Read() != expected) return 32;
  // All-to-all: rank r sends r + 1 elements (each 100 r + p) to each rank p.
  std::vector<float> send;
  std::vector<size_t> send_counts(world, rank + 1), recv_counts;
  for (int p = 0; p < world; ++p) send.insert(send.end(), rank + 1, 100.f * rank + p);
  expected.clear();
  for (int p = 0; p < world; ++p) {
    recv_counts.push_back(p + 1);
    expected.insert(expected.end(), p + 1, 100.f * p + rank);
  }
  DeviceFloats sent(send, rank), received(std::vector<float>(expected.size(), -1), rank);
  if (!group.AllToAll(sent.buffer(), send_counts, received.buffer(), recv_counts).ok() ||
      received.Read() != expected)
    return 40;
  // A ring of async sends then receives, waited for in reverse order, then a barrier.
  DeviceFloats out({r, r + 0.5f}, rank), in({-1, -1}, rank);
  const int next = (rank + 1) % world, previous = (rank + world - 1) % world;
  std::unique_ptr<Work> sending = group.SendAsync(out.buffer(), next, 7);
  std::unique_ptr<Work> receiving = group.RecvAsync(in.buffer(), previous, 7);
  if (!receiving->Wait().ok() || !sending->Wait().ok()) return 50;
  if (in.Read() != std::vector<float>{float(previous), previous + 0.5f}) return 51;
  if (!group.Barrier().ok()) return 52;
  return 0;
}

class NcclGroupOfSize : public ::testing::TestWithParam<int> {};

TEST_P(NcclGroupOfSize, RunsEveryOpWithExactValues) {
  const int world = GetParam();
  if (Devices() < world) GTEST_SKIP() << "fewer than " << world << " CUDA devices";
  const std::string folder = Folder(absl::StrCat("every_op_", world));
  const std::vector<int> codes = InProcesses(world, [&](int rank) {
    absl::StatusOr<std::unique_ptr<NcclGroup>> group = NcclGroup::Connect(Options(rank, world, folder));
    if (!group.ok()) return 10;
    ::cudaSetDevice(rank);
    return EveryOp(**group, rank, world);
  });
  EXPECT_EQ(codes, std::vector<int>(world, 0))
      << "10: connect, 11-18: all-reduce (f32 sum, f32 max, f64, bf16, i32, i64, 4 MiB, max with NaNs), 19: several "
         "all-reduces as one, 20+root: broadcast, 25: several broadcasts as one, "
         "30-32: "
         "reduce-scatter and all-gather, 40: all-to-all, 50-52: send, recv and barrier";
}

INSTANTIATE_TEST_SUITE_P(TwoToFourRanks, NcclGroupOfSize, ::testing::Values(2, 3, 4));

TEST(NcclGroup, SubgroupsSumAmongTheirMembersOnly) {
  if (Devices() < 3) GTEST_SKIP() << "fewer than 3 CUDA devices";
  const std::string folder = Folder("subgroups");
  const std::vector<int> codes = InProcesses(3, [&](int rank) {
    absl::StatusOr<std::unique_ptr<NcclGroup>> group = NcclGroup::Connect(Options(rank, 3, folder));
    if (!group.ok()) return 10;
    ::cudaSetDevice(rank);
    // {2, 0}: its rank 0 is world rank 2. Rank 1 is in none of the first and alone in the second.
    absl::StatusOr<std::unique_ptr<Collectives>> pair = (*group)->NewSubgroup({2, 0}, "pair");
    absl::StatusOr<std::unique_ptr<Collectives>> single = (*group)->NewSubgroup({1}, "single");
    if (!pair.ok() || !single.ok()) return 11;
    if ((*pair == nullptr) != (rank == 1) || (*single == nullptr) != (rank != 1)) return 12;
    DeviceFloats x({float(rank + 1)}, rank);
    if (rank != 1) {
      if ((*pair)->rank() != (rank == 2 ? 0 : 1) || (*pair)->world_size() != 2) return 13;
      if (!(*pair)->AllReduce(x.buffer(), ReduceOp::kSum).ok() || x.Read()[0] != 4) return 14;  // 1 + 3
      DeviceFloats b({float(rank)}, rank);
      if (!(*pair)->Broadcast(b.buffer(), 0).ok() || b.Read()[0] != 2) return 15;  // from world rank 2
    } else {
      if (!(*single)->AllReduce(x.buffer(), ReduceOp::kSum).ok() || x.Read()[0] != 2) return 16;
    }
    // The world group still works after the splits.
    DeviceFloats y({1}, rank);
    if (!(*group)->AllReduce(y.buffer(), ReduceOp::kSum).ok() || y.Read()[0] != 3) return 17;
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}))
      << "10: connect, 11: a split failed, 12: wrong membership, 13: subgroup rank, 14-16: a subgroup's op, "
         "17: the world's op after the splits";
}

// CallOptions::after: an all-reduce on the group's own stream follows the work queued on another stream
// before it (a memset of its buffer there), as the overlapped gradient sums follow the backward's kernels on
// the model's stream; the host does not wait for that stream.
TEST(NcclGroup, AnOpAfterAnotherStreamSeesItsWrites) {
  if (Devices() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  const std::string folder = Folder("after");
  const std::vector<int> codes = InProcesses(2, [&](int rank) {
    absl::StatusOr<std::unique_ptr<NcclGroup>> group = NcclGroup::Connect(Options(rank, 2, folder));
    if (!group.ok()) return 10;
    ::cudaSetDevice(rank);
    cudaStream_t compute = nullptr;
    if (::cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) != cudaSuccess) return 11;
    DeviceFloats x({7, 7, 7}, rank);
    std::vector<float> ones(3, 1.0f);
    // The buffer zeroed, then set to ones, both on `compute`; the sum must see the ones.
    if (::cudaMemsetAsync(x.data, 0, 3 * sizeof(float), compute) != cudaSuccess) return 12;
    if (::cudaMemcpyAsync(x.data, ones.data(), 3 * sizeof(float), cudaMemcpyHostToDevice, compute) != cudaSuccess) {
      return 12;
    }
    CallOptions after;
    after.after = compute;
    if (!(*group)->AllReduceAsync(x.buffer(), ReduceOp::kSum, after)->Wait().ok()) return 13;
    if (x.Read() != std::vector<float>{2, 2, 2}) return 14;
    ::cudaStreamSynchronize(compute);
    ::cudaStreamDestroy(compute);
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}))
      << "10: connect, 11: stream, 12: the writes on the other stream, 13: the op, 14: it missed the writes";
}

TEST(NcclGroup, APeerThatNeverIssuesTheOpTimesOutNamingTheRank) {
  if (Devices() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  const std::string folder = Folder("stall");
  const std::vector<int> codes = InProcesses(2, [&](int rank) {
    absl::StatusOr<std::unique_ptr<NcclGroup>> group = NcclGroup::Connect(Options(rank, 2, folder));
    if (!group.ok()) return 10;
    if (rank == 1) {
      ::sleep(4);  // past rank 0's 2 s timeout, never issuing the all-reduce
      return 0;
    }
    ::cudaSetDevice(0);
    DeviceFloats x({1}, 0);
    CallOptions options;
    options.timeout = std::chrono::seconds(2);
    DeviceFloats y({1}, 0);
    std::unique_ptr<Work> first = (*group)->AllReduceAsync(x.buffer(), ReduceOp::kSum, options);
    std::unique_ptr<Work> second = (*group)->AllReduceAsync(y.buffer(), ReduceOp::kSum, options);
    const absl::Status s = first->Wait();
    if (s.code() != absl::StatusCode::kDeadlineExceeded) return 20;
    if (!absl::StrContains(s.message(), "nccl group 'world' rank 0 of 2")) return 21;
    if (!absl::StrContains(s.message(), "timed out after 2000 ms")) return 22;
    // The abort ended the second all-reduce too, unrun: its Work fails with the first error.
    if (!absl::StrContains(second->Wait().message(), "failed earlier")) return 23;
    const absl::Status next = (*group)->Barrier();
    if (next.code() != absl::StatusCode::kDeadlineExceeded ||
        !absl::StrContains(next.message(), "failed earlier"))
      return 24;
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}))
      << "20: not DeadlineExceeded, 21: no group and rank, 22: no timeout, "
         "23: the pending op's Work did not fail, 24: the next op did not "
         "fail at once";
}

// NCCL notices a dead peer where its transport does (a socket closing: the fake NCCL of the emulation, the
// network between nodes): Unavailable at once, with NCCL's remote-error text; where it cannot (a peer on the
// same node), the op's timeout ends the wait. Either way within the timeout, naming the group and rank.
TEST(NcclGroup, AKilledPeerFailsTheOpWithinItsTimeoutNamingTheRank) {
  if (Devices() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  const std::string folder = Folder("killed");
  const std::vector<int> codes = InProcesses(2, [&](int rank) {
    absl::StatusOr<std::unique_ptr<NcclGroup>> group = NcclGroup::Connect(Options(rank, 2, folder));
    if (!group.ok()) return 10;
    ::cudaSetDevice(rank);
    DeviceFloats x({1}, rank);
    if (!(*group)->AllReduce(x.buffer(), ReduceOp::kSum).ok()) return 11;
    if (rank == 1) ::raise(SIGKILL);  // dies with its communicator open
    CallOptions options;
    options.timeout = std::chrono::seconds(5);
    const auto start = std::chrono::steady_clock::now();
    const absl::Status s = (*group)->AllReduce(x.buffer(), ReduceOp::kSum, options);
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(8)) return 20;
    const bool noticed = s.code() == absl::StatusCode::kUnavailable &&
                         absl::StrContains(s.message(), "remote process exited or there was a network error");
    if (!noticed && s.code() != absl::StatusCode::kDeadlineExceeded) return 21;
    if (!absl::StrContains(s.message(), "nccl group 'world' rank 0 of 2: all-reduce")) return 22;
    if (!absl::StrContains((*group)->Barrier().message(), "failed earlier")) return 23;
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 128 + SIGKILL}))
      << "11: the first all-reduce, 20: past the timeout, 21: neither NCCL's remote error nor the timeout, "
         "22: "
         "does not name the group, rank and op, 23: the next op did not fail with the first error";
}

// Ranks that issue different ops (NCCL has no tags to tell them apart) fail within the op's timeout, each
// naming its group, rank and op: the emulation's fake NCCL sees the sender's op on the wire and fails both at
// once; on hardware the ops wait for each other until the timeout.
TEST(NcclGroup, RanksIssuingDifferentOpsFailWithinTheTimeout) {
  if (Devices() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  const std::string folder = Folder("different_ops");
  const std::vector<int> codes = InProcesses(2, [&](int rank) {
    absl::StatusOr<std::unique_ptr<NcclGroup>> group = NcclGroup::Connect(Options(rank, 2, folder));
    if (!group.ok()) return 10;
    ::cudaSetDevice(rank);
    DeviceFloats x({1, 2}, rank), one({3}, rank);
    CallOptions options;
    options.timeout = std::chrono::seconds(5);
    const auto start = std::chrono::steady_clock::now();
    // Both ops wait for data from the other rank (the root of a broadcast would not: its sends complete).
    const absl::Status s = rank == 0 ? (*group)->AllReduce(x.buffer(), ReduceOp::kSum, options)
                                     : (*group)->AllGather(one.buffer(), x.buffer(), options);
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(8)) return 20;
    if (s.code() != absl::StatusCode::kUnavailable && s.code() != absl::StatusCode::kDeadlineExceeded)
      return 21;
    const std::string op = rank == 0 ? "all-reduce" : "all-gather";
    if (!absl::StrContains(s.message(), absl::StrCat("nccl group 'world' rank ", rank, " of 2: ", op)))
      return 22;
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0})) << "20: past the timeout, 21: neither Unavailable nor "
                                                "DeadlineExceeded, 22: does not name group, rank, op";
}

}  // namespace
}  // namespace lmf::distributed
