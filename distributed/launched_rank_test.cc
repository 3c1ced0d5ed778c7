// LaunchedRankFromEnvironment: a rank's place from torchrun's variables or from mpirun's (torchrun's win);
// nothing when neither is set; a missing MASTER_ADDR or MASTER_PORT, or a value out of range, is an error
// naming the variable (and, under mpirun, how to pass it). LaunchedRankEnvironment gives torchrun's names.
#include "distributed/launched_rank.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace lmf::distributed {
namespace {

class LaunchedEnvironment : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                             "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                             "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
      ::unsetenv(name);
    }
  }
};

TEST_F(LaunchedEnvironment, NoLauncherVariablesIsNoLaunchedRank) {
  absl::StatusOr<std::optional<LaunchedRank>> rank = LaunchedRankFromEnvironment();
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_FALSE(rank->has_value());
}

TEST_F(LaunchedEnvironment, TorchrunsVariablesRoundTrip) {
  const LaunchedRank written{5, 8, 1, 4, "node0.example", 29500, ""};
  for (const auto& [name, value] : LaunchedRankEnvironment(written)) ::setenv(name.c_str(), value.c_str(), 1);
  ::setenv("OMPI_COMM_WORLD_RANK", "0", 1);  // torchrun's variables win
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  absl::StatusOr<std::optional<LaunchedRank>> rank = LaunchedRankFromEnvironment();
  ASSERT_TRUE(rank.ok()) << rank.status();
  ASSERT_TRUE(rank->has_value());
  EXPECT_EQ((*rank)->rank, 5);
  EXPECT_EQ((*rank)->world_size, 8);
  EXPECT_EQ((*rank)->local_rank, 1);
  EXPECT_EQ((*rank)->local_world_size, 4);
  EXPECT_EQ((*rank)->master_addr, "node0.example");
  EXPECT_EQ((*rank)->master_port, 29500);
  EXPECT_EQ((*rank)->launcher, "RANK/WORLD_SIZE");
}

TEST_F(LaunchedEnvironment, MpirunsVariablesAreARank) {
  ::setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "1234", 1);
  absl::StatusOr<std::optional<LaunchedRank>> rank = LaunchedRankFromEnvironment();
  ASSERT_TRUE(rank.ok()) << rank.status();
  ASSERT_TRUE(rank->has_value());
  EXPECT_EQ((*rank)->rank, 2);
  EXPECT_EQ((*rank)->world_size, 3);
  EXPECT_EQ((*rank)->local_rank, 2) << "no local variables: one machine";
  EXPECT_EQ((*rank)->local_world_size, 3);
  EXPECT_EQ((*rank)->launcher, "mpirun");
}

TEST_F(LaunchedEnvironment, MissingOrBadValuesNameTheVariable) {
  ::setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  absl::StatusOr<std::optional<LaunchedRank>> rank = LaunchedRankFromEnvironment();
  ASSERT_FALSE(rank.ok());
  EXPECT_TRUE(absl::StrContains(rank.status().message(), "MASTER_ADDR is not set")) << rank.status();
  EXPECT_TRUE(absl::StrContains(rank.status().message(), "mpirun -x MASTER_ADDR=")) << rank.status();
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "70000", 1);
  rank = LaunchedRankFromEnvironment();
  ASSERT_FALSE(rank.ok());
  EXPECT_EQ(rank.status().message(), "MASTER_PORT=\"70000\": expected a whole number from 1 to 65535");
  Clear();
  ::setenv("RANK", "2", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  rank = LaunchedRankFromEnvironment();
  ASSERT_FALSE(rank.ok());
  EXPECT_EQ(rank.status().message(), "RANK=\"2\": expected a whole number from 0 to 1");
  ::unsetenv("WORLD_SIZE");
  rank = LaunchedRankFromEnvironment();
  ASSERT_FALSE(rank.ok());
  EXPECT_EQ(rank.status().message(), "WORLD_SIZE is not set, although RANK is");
}

}  // namespace
}  // namespace lmf::distributed
