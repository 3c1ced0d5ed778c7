// SlurmTaskFromEnvironment: an srun task's rank and world from srun's variables; nothing outside a step (a
// batch script's own process has SLURM_PROCID and SLURM_NTASKS but no SLURM_STEP_ID) or in a step of one
// task; a value that is not a number in range is an error naming the variable.
#include "distributed/slurm_task.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace lmf::distributed {
namespace {

class SlurmEnvironment : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kNames) ::unsetenv(name);
  }
  void TearDown() override {
    for (const char* name : kNames) ::unsetenv(name);
  }
  static constexpr const char* kNames[] = {"SLURM_JOB_ID",        "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS",
                                           "SLURM_NTASKS",        "SLURM_PROCID",  "SLURM_LOCALID",
                                           "SLURM_STEP_NUM_NODES", "SLURM_CPUS_PER_TASK"};
};

TEST_F(SlurmEnvironment, AnSrunTaskHasItsRankWorldAndStep) {
  ::setenv("SLURM_JOB_ID", "42", 1);
  ::setenv("SLURM_STEP_ID", "3", 1);
  ::setenv("SLURM_STEP_NUM_TASKS", "4", 1);
  ::setenv("SLURM_NTASKS", "8", 1);  // the job's; the step's count wins
  ::setenv("SLURM_PROCID", "2", 1);
  ::setenv("SLURM_LOCALID", "0", 1);
  ::setenv("SLURM_STEP_NUM_NODES", "2", 1);
  ::setenv("SLURM_CPUS_PER_TASK", "6", 1);
  absl::StatusOr<std::optional<SlurmTask>> task = SlurmTaskFromEnvironment();
  ASSERT_TRUE(task.ok()) << task.status();
  ASSERT_TRUE(task->has_value());
  EXPECT_EQ((*task)->rank, 2);
  EXPECT_EQ((*task)->world_size, 4);
  EXPECT_EQ((*task)->local_rank, 0);
  EXPECT_EQ((*task)->nodes, 2);
  EXPECT_EQ((*task)->cpus_per_task, 6);
  EXPECT_EQ(SlurmStepRendezvous(**task, "/runs/a"), "/runs/a/.srun-42.3");
}

TEST_F(SlurmEnvironment, SlurmNtasksServesWithoutTheStepsCount) {
  ::setenv("SLURM_JOB_ID", "42", 1);
  ::setenv("SLURM_STEP_ID", "0", 1);
  ::setenv("SLURM_NTASKS", "2", 1);
  ::setenv("SLURM_PROCID", "1", 1);
  absl::StatusOr<std::optional<SlurmTask>> task = SlurmTaskFromEnvironment();
  ASSERT_TRUE(task.ok()) << task.status();
  ASSERT_TRUE(task->has_value());
  EXPECT_EQ((*task)->world_size, 2);
  EXPECT_EQ((*task)->rank, 1);
  EXPECT_EQ((*task)->nodes, 1);
  EXPECT_EQ((*task)->cpus_per_task, 0);
}

TEST_F(SlurmEnvironment, NoTaskOutsideAStepOrInAStepOfOne) {
  absl::StatusOr<std::optional<SlurmTask>> none = SlurmTaskFromEnvironment();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  // A batch script's own process: the job's variables, no step.
  ::setenv("SLURM_JOB_ID", "42", 1);
  ::setenv("SLURM_NTASKS", "2", 1);
  ::setenv("SLURM_PROCID", "0", 1);
  absl::StatusOr<std::optional<SlurmTask>> batch = SlurmTaskFromEnvironment();
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_FALSE(batch->has_value());
  ::setenv("SLURM_STEP_ID", "0", 1);
  ::setenv("SLURM_STEP_NUM_TASKS", "1", 1);
  absl::StatusOr<std::optional<SlurmTask>> single = SlurmTaskFromEnvironment();
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_FALSE(single->has_value());
}

TEST_F(SlurmEnvironment, ARankOutOfRangeOrNotANumberNamesTheVariable) {
  ::setenv("SLURM_JOB_ID", "42", 1);
  ::setenv("SLURM_STEP_ID", "0", 1);
  ::setenv("SLURM_STEP_NUM_TASKS", "2", 1);
  ::setenv("SLURM_PROCID", "2", 1);
  absl::StatusOr<std::optional<SlurmTask>> task = SlurmTaskFromEnvironment();
  EXPECT_TRUE(absl::IsInvalidArgument(task.status())) << task.status();
  EXPECT_EQ(task.status().message(), "SLURM_PROCID=\"2\": expected a whole number from 0 to 1");
  ::setenv("SLURM_PROCID", "0", 1);
  ::setenv("SLURM_STEP_NUM_TASKS", "two", 1);
  task = SlurmTaskFromEnvironment();
  EXPECT_EQ(task.status().message(), "SLURM_STEP_NUM_TASKS=\"two\": expected a whole number from 1 to 2147483647");
  ::setenv("SLURM_STEP_NUM_TASKS", "2", 1);
  ::unsetenv("SLURM_PROCID");
  task = SlurmTaskFromEnvironment();
  EXPECT_EQ(task.status().message(), "SLURM_PROCID is not set, although SLURM_STEP_ID is (srun sets both)");
}

}  // namespace
}  // namespace lmf::distributed
