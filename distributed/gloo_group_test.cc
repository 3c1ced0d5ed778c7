// Joining a Gloo group: two real processes join on loopback through a file store and run the trainer's
// all-reduce, broadcast and barrier (each checks its own results and reports through its exit code); a bad
// rank is refused; abort_connect ends the wait for a rank that never comes or dies before connecting.
#include "distributed/gloo_group.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "distributed/test_ranks.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/context.h"
#include "gloo/transport/pair.h"
#include "gloo/transport/tcp/device.h"
#include "gtest/gtest.h"

namespace lmf::distributed {
namespace {

// Exit codes of a rank: 0 ok, 11+ a failed step.
int RunRank(Collectives& group) {
  // All-reduce: rank r contributes (r+1) * (i+1); the sum over ranks is (i+1) * world*(world+1)/2.
  const int world = group.world_size();
  const int n = 100000;  // large enough for Gloo to split into several chunks
  std::vector<float> grads(n);
  for (int i = 0; i < n; ++i) grads[i] = static_cast<float>((group.rank() + 1) * (i % 97 + 1));
  if (!group.AllReduceSum(grads.data(), grads.size()).ok()) return 11;
  const float factor = static_cast<float>(world * (world + 1) / 2);
  for (int i = 0; i < n; ++i) {
    if (grads[i] != factor * static_cast<float>(i % 97 + 1)) return 12;  // small integers: exact in fp32
  }
  std::vector<float> weights(8, group.rank() == 1 ? 2.5f : -1.0f);
  if (!group.Broadcast(weights.data(), weights.size(), /*root=*/1).ok()) return 13;
  for (float w : weights) {
    if (w != 2.5f) return 14;
  }
  if (!group.Barrier().ok()) return 15;
  return 0;
}

// Two real processes (test_ranks.h: forked, joined through a file store, every wait bounded).
TEST(GlooGroup, AllReduceBroadcastBarrierAcrossTwoProcesses) {
  testing::ExpectAllPassed(testing::RunRanks(2, RunRank));
}

TEST(GlooGroup, RejectsBadRankWithClearMessage) {
  GlooGroupOptions opts;
  opts.rank = 3;
  opts.world_size = 2;
  opts.rendezvous_dir = "/tmp/unused";
  auto group = GlooGroup::Connect(opts);
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("rank 3 is not in [0, world_size=2)"), std::string::npos);
}

// Rank 0 of two waits for a rank 1 that never comes: abort_connect ends the wait as soon as it answers (here
// at its fourth ask), with its answer in the error; without it, or while it stays silent, the wait lasts
// connect_timeout (to the millisecond, not Gloo's whole seconds) and ends with a timeout error.
TEST(GlooGroup, AbortConnectEndsTheWaitForAMissingRank) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string base = std::string(tmp ? tmp : "/tmp") + "/gloo_abort_" + std::to_string(::getpid());
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  GlooGroupOptions opts;
  opts.rank = 0;
  opts.world_size = 2;
  opts.connect_timeout = std::chrono::seconds(30);
  opts.rendezvous_dir = base + "_a";
  const auto start = std::chrono::steady_clock::now();
  int asked = 0;
  opts.abort_connect = [&]() -> std::string {  // silent three times, then the answer
    return ++asked > 3 ? "rank 1 exited with status 3" : "";
  };
  auto group = GlooGroup::Connect(opts);
  const double took = seconds_since(start);
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("could not connect via " + opts.rendezvous_dir +
                                          ": rank 1 exited with status 3"),
            std::string::npos)
      << group.status();
  EXPECT_EQ(asked, 4);
  // Four asks 100 ms apart: ~0.4 s (a 1 s poll, Gloo's timeout granularity, would take 4 s; the connect
  // timeout 30 s). Wide bounds for a loaded machine.
  EXPECT_GE(took, 0.3);
  EXPECT_LT(took, 3.0);

  for (const bool silent_abort : {false, true}) {
    GlooGroupOptions wait_all = opts;
    wait_all.rendezvous_dir = base + (silent_abort ? "_c" : "_b");
    wait_all.connect_timeout = std::chrono::milliseconds(700);
    wait_all.abort_connect = nullptr;
    if (silent_abort) wait_all.abort_connect = [] { return std::string(); };
    const auto t0 = std::chrono::steady_clock::now();
    auto timed_out = GlooGroup::Connect(wait_all);
    ASSERT_FALSE(timed_out.ok());
    EXPECT_GE(seconds_since(t0), 0.6) << "silent_abort " << silent_abort;
    EXPECT_LT(seconds_since(t0), 5.0) << "silent_abort " << silent_abort;
    EXPECT_NE(timed_out.status().message().find("could not connect"), std::string::npos)
        << timed_out.status();
    EXPECT_NE(timed_out.status().message().find("Wait timeout for key(s)"), std::string::npos)
        << timed_out.status();
  }
  for (const char* suffix : {"_a", "_b", "_c"}) std::filesystem::remove_all(base + suffix);
}

// Rank 1 publishes its address, as every rank does before it connects (its pair's address under its rank in
// Gloo's file store), and dies before connecting: its connection never comes. It listens on 127.0.0.2, above
// rank 0's 127.0.0.1, so rank 0 is the side of the pair that waits for the connection, which Gloo's own
// connect does for five times connect_timeout. abort_connect ends that wait too, at its first ask, with its
// answer in the error.
TEST(GlooGroup, AbortConnectEndsTheWaitForARankThatDiedBeforeConnecting) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/gloo_dies_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.2";
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    std::shared_ptr<gloo::transport::Context> pairs = device->createContext(/*rank=*/1, /*size=*/2);
    gloo::rendezvous::FileStore(dir).set("1", pairs->createPair(0)->address().bytes());
    ::_exit(3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << "rank 1 did not publish its address";

  GlooGroupOptions opts;
  opts.rank = 0;
  opts.world_size = 2;
  opts.rendezvous_dir = dir;
  opts.connect_timeout = std::chrono::seconds(30);
  int asked = 0;
  opts.abort_connect = [&]() -> std::string {
    ++asked;
    return "rank 1 exited with status 3";
  };
  const auto start = std::chrono::steady_clock::now();
  auto group = GlooGroup::Connect(opts);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("could not connect via " + dir + ": rank 1 exited with status 3"),
            std::string::npos)
      << group.status();
  EXPECT_EQ(asked, 1);
  EXPECT_LT(took, 20.0) << "the connect timeout is 30 s (Gloo's own wait: 150 s)";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lmf::distributed
