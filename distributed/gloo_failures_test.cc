// How a Gloo group fails: a peer that dies or hangs, ranks whose sizes disagree, and bad arguments. Each
// error must name the group, the rank, the op and its sizes, and the peer that failed first where one did;
// no rank may wait past its timeout, and a dead peer must be named well within it.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distributed/collectives.h"
#include "distributed/gloo_group.h"
#include "distributed/test_ranks.h"
#include "gtest/gtest.h"

namespace lmf::distributed {
namespace {

using testing::Checks;
using testing::ExpectAllPassed;
using testing::ExpectExitCodes;
using testing::RankOptions;
using testing::RunRanks;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class DyingPeer : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Gloo, DyingPeer, ::testing::Values(3, 4));

// Rank 2 dies while the others are in an all-reduce. Every other rank's all-reduce fails naming rank 2,
// whether it talked to rank 2 itself or heard from a rank that did, within seconds of a 30 s timeout.
TEST_P(DyingPeer, ARankThatDiesMidCollectiveIsNamedByEveryOther) {
  RankOptions options;
  options.timeout = std::chrono::seconds(30);
  const auto outcomes = RunRanks(
      GetParam(),
      [](Collectives& group) {
        Checks checks(group.rank());
        std::vector<float> data(200000, 1.0f);
        checks.Ok(group.AllReduce(Buffer::Host(data.data(), data.size()), ReduceOp::kSum),
                  "first all-reduce");
        if (group.rank() == 2) {  // dies while the others are in the all-reduce, waiting for it
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          ::_exit(7);
        }
        const auto start = std::chrono::steady_clock::now();
        const absl::Status failed = group.AllReduce(Buffer::Host(data.data(), data.size()), ReduceOp::kSum);
        const double took = SecondsSince(start);
        checks.FailsWith(
            failed,
            {"gloo group 'world' rank " + std::to_string(group.rank()) + " of " +
                 std::to_string(group.world_size()),
             "all-reduce (sum) of 200000 x f32",
             "rank 2 closed its connection without reporting an error: its process died or exited"},
            "the all-reduce rank 2 died in");
        // Rank 2's death is seen at once; a rank that hears of it from another waits up to the failure
        // note grace (2 s) for a note first. Bound: well within the 30 s timeout, even on a loaded machine.
        checks.Expect(took < 12.0, absl::StrCat("the failure took ", took, " s"));
        // The group stays failed, with its first error.
        checks.FailsWith(group.Barrier(), {"barrier: not run: the group failed earlier: ", "rank 2 closed"},
                         "a barrier after the failure");
        return checks.exit_code();
      },
      options);
  std::vector<int> expected(GetParam(), 0);
  expected[2] = 7;
  ExpectExitCodes(outcomes, expected);
}

// Rank 2 does not issue the all-reduce for 2.5 s: the others' 1 s timeout ends theirs with an error naming
// the op, the group and the sizes; rank 2's own attempt afterwards fails at once (they closed the group).
// Gloo writes with writev, which raises SIGPIPE on a connection the peer closed: a connected rank survives
// that write (it fails with EPIPE), so it can fail its op naming the dead peer instead of dying of the
// signal. A socket pair with one end closed stands in for a dead peer's connection.
TEST(GlooFailures, AWriteToAClosedPeerDoesNotKillTheRank) {
  ExpectAllPassed(RunRanks(2, [](Collectives& group) {
    Checks checks(group.rank());
    int ends[2];
    if (!checks.Expect(::socketpair(AF_UNIX, SOCK_STREAM, 0, ends) == 0, "socketpair")) return checks.exit_code();
    ::close(ends[1]);
    const char byte = 1;
    const ssize_t wrote = ::write(ends[0], &byte, 1);  // SIGPIPE: without a handler the process ends here
    checks.Expect(wrote == -1 && errno == EPIPE, absl::StrCat("the write returned ", wrote, ", errno ", errno));
    ::close(ends[0]);
    return checks.exit_code();
  }));
}

TEST(GlooFailures, APeerThatHangsTimesTheOthersOut) {
  ExpectAllPassed(RunRanks(3, [](Collectives& group) {
    Checks checks(group.rank());
    std::vector<float> data(1000, 1.0f);
    CallOptions call;
    call.timeout = std::chrono::milliseconds(1000);
    if (group.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      checks.Expect(!group.AllReduce(Buffer::Host(data.data(), data.size()), ReduceOp::kSum, call).ok(),
                    "the late all-reduce succeeded");
      return checks.exit_code();
    }
    const auto start = std::chrono::steady_clock::now();
    const absl::Status failed = group.AllReduce(Buffer::Host(data.data(), data.size()), ReduceOp::kSum, call);
    const double took = SecondsSince(start);
    // The first rank to time out writes that into its note; a rank whose peer timed out first reads it.
    checks.FailsWith(
        failed,
        {"gloo group 'world' rank " + std::to_string(group.rank()) + " of 3: all-reduce (sum) of 1000 x f32",
         "timed out after 1000 ms waiting for its peers"},
        "the all-reduce rank 2 hangs in");
    checks.Expect(took > 0.9 && took < 3.5, absl::StrCat("the timeout took ", took, " s"));
    return checks.exit_code();
  }));
}

// A recv whose sender sends another count never matches it: it times out naming its peer (Gloo itself would
// overrun or short the receive).
TEST(GlooFailures, ASendAndRecvThatDisagreeTimeOutNamingThePeer) {
  ExpectAllPassed(RunRanks(2, [](Collectives& group) {
    Checks checks(group.rank());
    std::vector<float> data(5, 1.0f);
    CallOptions call;
    call.timeout = std::chrono::milliseconds(800);
    if (group.rank() == 1) {
      checks.FailsWith(group.Send(Buffer::Host(data.data(), 5), 0, /*tag=*/3, call),
                       {"send of 5 x f32 to rank 0 (tag 3)", "timed out after 800 ms"}, "the send");
    } else {
      checks.FailsWith(group.Recv(Buffer::Host(data.data(), 4), 1, /*tag=*/3, call),
                       {"recv of 4 x f32 from rank 1 (tag 3)", "timed out after 800 ms"}, "the recv");
    }
    return checks.exit_code();
  }));
}

// Rank 0 expects 2 elements from rank 1, which sends 3: both fail naming each other and the counts; rank 2,
// not involved, fails hearing of it instead of timing out.
TEST(GlooFailures, AllToAllCountsThatDisagreeAreNamed) {
  RankOptions options;
  options.timeout = std::chrono::seconds(30);
  ExpectAllPassed(RunRanks(
      3,
      [](Collectives& group) {
        Checks checks(group.rank());
        const int r = group.rank();
        std::vector<size_t> send = {1, 1, 1}, recv = {1, 1, 1};
        if (r == 1) send[0] = 3;
        if (r == 0) recv[1] = 2;
        std::vector<int32_t> in(send[0] + send[1] + send[2]), out(recv[0] + recv[1] + recv[2]);
        const auto start = std::chrono::steady_clock::now();
        const absl::Status failed = group.AllToAll(Buffer::Host(in.data(), in.size()), send,
                                                   Buffer::Host(out.data(), out.size()), recv);
        const std::string mismatch = r == 0   ? "rank 1 sends 3 elements to this rank, which expects 2"
                                     : r == 1 ? "this rank sends 3 elements to rank 0, which expects 2"
                                              : "closed its connection after failing first";
        checks.FailsWith(failed, {"all-to-all of i32", "the ranks' counts disagree", mismatch}, "all-to-all");
        checks.Expect(SecondsSince(start) < 10.0, "the mismatch took too long to report");
        return checks.exit_code();
      },
      options));
}

// Bad arguments are rejected before anything is sent, with the op, its sizes and what is wrong; they make
// the group unusable (its peers' next op could no longer match), and the peers hear of it at once.
TEST(GlooFailures, BadArgumentsAreRejectedWithClearMessages) {
  RankOptions options;
  options.timeout = std::chrono::seconds(30);
  ExpectAllPassed(RunRanks(
      2,
      [](Collectives& group) {
        Checks checks(group.rank());
        // NewSubgroup's errors leave the group usable.
        auto sub = group.NewSubgroup({0, 2}, "x");
        checks.FailsWith(sub.status(),
                         {"NewSubgroup 'x' of ranks [0, 2]", "rank 2 is not a rank of group 'world' [0, 2)"},
                         "subgroup rank");
        sub = group.NewSubgroup({1, 1}, "x");
        checks.FailsWith(sub.status(), {"rank 1 is listed twice"}, "subgroup duplicate");
        sub = group.NewSubgroup({}, "x");
        checks.FailsWith(sub.status(), {"no ranks"}, "empty subgroup");
        sub = group.NewSubgroup({0, 1}, group.rank() == 0 ? "x" : "y");
        checks.FailsWith(sub.status(),
                         {"rank(s) 1 of group 'world' passed other ranks or another name than rank 0"},
                         "subgroup disagreement");
        checks.Ok(group.Barrier(), "barrier after NewSubgroup errors");

        if (group.rank() == 1) {
          // Rank 0's bad call below closes the group: this all-reduce fails at once, with rank 0's error.
          std::vector<float> data(10);
          const auto start = std::chrono::steady_clock::now();
          checks.FailsWith(
              group.AllReduce(Buffer::Host(data.data(), data.size()), ReduceOp::kSum),
              {"rank 0 closed its connection after failing first: gloo group 'world' rank 0 of 2: "
               "broadcast of 10 x f32 from rank 9: root 9 is not a rank of the group [0, 2)"},
              "the peer's all-reduce");
          checks.Expect(SecondsSince(start) < 10.0, "hearing of the bad call took too long");
          return checks.exit_code();
        }
        std::vector<float> f(12);
        std::vector<double> d(12);
        Buffer f6 = Buffer::Host(f.data(), 6);
        checks.FailsWith(group.Broadcast(Buffer::Host(f.data(), 10), 9),
                         {"gloo group 'world' rank 0 of 2: broadcast of 10 x f32 from rank 9: root 9 is not "
                          "a rank of the group [0, 2)"},
                         "root");
        checks.FailsWith(
            group.Barrier(),
            {"barrier: not run: the group failed earlier: gloo group 'world' rank 0 of 2: broadcast"},
            "after the failure");
        // Argument errors are still named first.
        Buffer gpu = f6;
        gpu.device = kernels::Device::Cuda(0);
        checks.FailsWith(group.AllReduce(gpu, ReduceOp::kSum),
                         {"all-reduce (sum) of 6 x f32: a buffer is on cuda:0, but the Gloo backend moves "
                          "host memory only"},
                         "device");
        checks.FailsWith(
            group.AllReduce(Buffer{nullptr, 3, DataType::kF32, kernels::Device::Cpu()}, ReduceOp::kSum),
            {"a buffer of 3 elements has no data pointer"}, "null data");
        CallOptions negative;
        negative.timeout = std::chrono::milliseconds(-5);
        checks.FailsWith(group.Barrier(negative), {"barrier: timeout -5 ms is negative"}, "timeout");
        checks.FailsWith(
            group.ReduceScatter(Buffer::Host(f.data(), 5), Buffer::Host(f.data() + 6, 3), ReduceOp::kSum),
            {"reduce-scatter (sum) of 5 x f32 into 3 per rank: the input must hold world_size 2 x output "
             "count 3 = 6 elements, not 5"},
            "reduce-scatter counts");
        checks.FailsWith(
            group.ReduceScatter(Buffer::Host(f.data(), 6), Buffer::Host(d.data(), 3), ReduceOp::kSum),
            {"the output is f64, the input f32"}, "reduce-scatter types");
        checks.FailsWith(group.AllGather(Buffer::Host(f.data(), 3), Buffer::Host(d.data(), 7)),
                         {"all-gather of 3 x f32 per rank into 7: the output is f64, the input f32"},
                         "all-gather types");
        checks.FailsWith(group.AllGather(Buffer::Host(f.data(), 3), Buffer::Host(f.data() + 3, 7)),
                         {"the output must hold world_size 2 x input count 3 = 6 elements, not 7"},
                         "all-gather counts");
        checks.FailsWith(group.AllGather(Buffer::Host(f.data() + 1, 3), Buffer::Host(f.data(), 6)),
                         {"the input overlaps the output without being this rank's block of it"},
                         "all-gather overlap");
        checks.FailsWith(
            group.ReduceScatter(Buffer::Host(f.data(), 6), Buffer::Host(f.data() + 1, 3), ReduceOp::kMax),
            {"reduce-scatter (max) of 6 x f32 into 3 per rank: the output overlaps the input without being "
             "this "
             "rank's block of it"},
            "reduce-scatter overlap");
        checks.FailsWith(
            group.AllToAll(Buffer::Host(f.data(), 3), {1, 2, 0}, Buffer::Host(f.data() + 6, 3), {1, 2}),
            {"all-to-all of f32 sending [1, 2, 0] receiving [1, 2]: send_counts has 3 entries and "
             "recv_counts 2; each needs one per rank (2)"},
            "all-to-all sizes");
        checks.FailsWith(
            group.AllToAll(Buffer::Host(f.data(), 4), {1, 2}, Buffer::Host(f.data() + 6, 3), {1, 2}),
            {"send_counts sum to 3 but the input holds 4 elements"}, "all-to-all send sum");
        checks.FailsWith(
            group.AllToAll(Buffer::Host(f.data(), 3), {1, 2}, Buffer::Host(f.data() + 6, 4), {1, 2}),
            {"recv_counts sum to 3 but the output holds 4 elements"}, "all-to-all recv sum");
        checks.FailsWith(
            group.AllToAll(Buffer::Host(f.data(), 3), {1, 2}, Buffer::Host(f.data() + 6, 3), {2, 1}),
            {"this rank sends 1 elements to itself but receives 2 from itself"}, "all-to-all self");
        checks.FailsWith(
            group.AllToAll(Buffer::Host(f.data(), 3), {1, 2}, Buffer::Host(f.data() + 2, 3), {1, 2}),
            {"the input and output overlap"}, "all-to-all overlap");
        checks.FailsWith(
            group.Send(f6, 2, 0),
            {"send of 6 x f32 to rank 2 (tag 0): peer 2 is not another rank of the group [0, 2)"},
            "send peer");
        checks.FailsWith(group.Recv(f6, 0, 0),
                         {"recv of 6 x f32 from rank 0 (tag 0): peer 0 is not another rank"},
                         "recv from self");
        checks.FailsWith(group.Send(f6, 1, -1), {"tag -1 is not in [0, 1048575]"}, "negative tag");
        checks.FailsWith(group.Recv(f6, 1, Collectives::kMaxTag + 1), {"tag 1048576 is not in [0, 1048575]"},
                         "tag too large");
        return checks.exit_code();
      },
      options));
}

}  // namespace
}  // namespace lmf::distributed
