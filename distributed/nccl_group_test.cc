// NcclGroup on GPUs (tag gpu; skips, saying so, where no CUDA device is present): on one device, a group of
// one rank runs every op with exact results and refuses a host buffer, naming it; on two devices or more,
// two processes (rank r on cuda:r) meeting through a rendezvous folder sum, gather and exchange with exact
// values, and a rank whose peer never issues the all-reduce fails within the op's timeout with
// DeadlineExceeded naming its group and rank.
#include "distributed/nccl_group.h"

#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace lmf::distributed {
namespace {

// Runs body(rank) in `n` forked processes; each one's exit code. This process never touches CUDA (a child
// forked after its parent initialised CUDA cannot use it).
std::vector<int> InProcesses(int n, const std::function<int(int rank)>& body) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(body(rank));
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

int Devices() {
  return InProcesses(1, [](int) {
    int count = 0;
    return ::cudaGetDeviceCount(&count) == cudaSuccess ? std::min(count, 100) : 0;
  })[0];
}

// Device memory holding `values`, and reading it back.
struct DeviceFloats {
  explicit DeviceFloats(const std::vector<float>& values) : count(values.size()) {
    EXPECT_EQ(::cudaMalloc(&data, sizeof(float) * count), cudaSuccess);
    EXPECT_EQ(::cudaMemcpy(data, values.data(), sizeof(float) * count, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceFloats() { ::cudaFree(data); }
  std::vector<float> Read() const {
    std::vector<float> out(count);
    EXPECT_EQ(::cudaMemcpy(out.data(), data, sizeof(float) * count, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  Buffer On(int device) const { return Buffer{data, count, DataType::kF32, kernels::Device::Cuda(device)}; }
  float* data = nullptr;
  size_t count;
};

NcclGroupOptions Options(int rank, int world, const std::string& folder) {
  NcclGroupOptions options;
  options.rank = rank;
  options.world_size = world;
  options.device = rank;
  options.rendezvous_dir = folder;
  options.timeout = std::chrono::seconds(5);
  options.connect_timeout = std::chrono::seconds(60);
  return options;
}

TEST(NcclGroup, OneRankRunsEveryOpAndRefusesHostMemory) {
  if (Devices() < 1) GTEST_SKIP() << "no CUDA device: the NCCL backend is only compiled here";
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/one");
  const std::vector<int> codes = InProcesses(1, [&](int) {
    absl::StatusOr<std::unique_ptr<NcclGroup>> group = NcclGroup::Connect(Options(0, 1, folder));
    if (!group.ok()) return 10;
    DeviceFloats a({1, 2, 3, 4}), b({0, 0, 0, 0});
    if (!(*group)->AllReduce(a.On(0), ReduceOp::kSum).ok() || a.Read() != std::vector<float>{1, 2, 3, 4}) return 11;
    if (!(*group)->Broadcast(a.On(0), 0).ok() || !(*group)->Barrier().ok()) return 12;
    if (!(*group)->AllGather(a.On(0), b.On(0)).ok() || b.Read() != std::vector<float>{1, 2, 3, 4}) return 13;
    DeviceFloats c({0, 0, 0, 0});
    if (!(*group)->AllToAll(a.On(0), {4}, c.On(0), {4}).ok() || c.Read() != std::vector<float>{1, 2, 3, 4}) return 14;
    std::vector<float> host = {1};
    const absl::Status refused = (*group)->AllReduce(Buffer::Host(host.data(), 1), ReduceOp::kSum);
    if (!absl::StrContains(refused.message(), "in host memory, but this NCCL group's rank moves memory on cuda:0"))
      return 15;
    return 0;
  });
  EXPECT_EQ(codes, std::vector<int>{0}) << "10: connect, 11-14: an op's result, 15: the host buffer's error";
}

TEST(NcclGroup, TwoRanksSumGatherAndExchange) {
  if (Devices() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/two");
  const std::vector<int> codes = InProcesses(2, [&](int rank) {
    absl::StatusOr<std::unique_ptr<NcclGroup>> group = NcclGroup::Connect(Options(rank, 2, folder));
    if (!group.ok()) return 10;
    ::cudaSetDevice(rank);
    DeviceFloats x({float(rank + 1), float(10 * (rank + 1))}), gathered(std::vector<float>(4, 0));
    if (!(*group)->AllReduce(x.On(rank), ReduceOp::kSum).ok() || x.Read() != std::vector<float>{3, 30}) return 11;
    DeviceFloats mine({float(rank), float(rank)});
    if (!(*group)->AllGather(mine.On(rank), gathered.On(rank)).ok() ||
        gathered.Read() != std::vector<float>{0, 0, 1, 1})
      return 12;
    // Rank r sends r + 1 elements to each rank: rank 0 gets 1 from itself and 2 from rank 1.
    DeviceFloats send(std::vector<float>(2 * (rank + 1), float(rank))), recv(std::vector<float>(3, -1));
    const std::vector<size_t> send_counts = {size_t(rank + 1), size_t(rank + 1)};
    if (!(*group)->AllToAll(send.On(rank), send_counts, recv.On(rank), {1, 2}).ok() ||
        recv.Read() != std::vector<float>{0, 1, 1})
      return 13;
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0})) << "10: connect, 11: all-reduce, 12: all-gather, 13: all-to-all";
}

TEST(NcclGroup, APeerThatNeverIssuesTheOpTimesOutNamingTheRank) {
  if (Devices() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/stall");
  const std::vector<int> codes = InProcesses(2, [&](int rank) {
    absl::StatusOr<std::unique_ptr<NcclGroup>> group = NcclGroup::Connect(Options(rank, 2, folder));
    if (!group.ok()) return 10;
    if (rank == 1) {
      ::sleep(8);  // past rank 0's 2 s timeout, never issuing the all-reduce
      return 0;
    }
    ::cudaSetDevice(0);
    DeviceFloats x({1});
    CallOptions options;
    options.timeout = std::chrono::seconds(2);
    const absl::Status s = (*group)->AllReduce(x.On(0), ReduceOp::kSum, options);
    if (s.code() != absl::StatusCode::kDeadlineExceeded) return 20;
    if (!absl::StrContains(s.message(), "nccl group 'world' rank 0 of 2")) return 21;
    if (!absl::StrContains(s.message(), "timed out after 2000 ms")) return 22;
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0})) << "20: not DeadlineExceeded, 21: no group and rank, 22: no timeout";
}

}  // namespace
}  // namespace lmf::distributed
