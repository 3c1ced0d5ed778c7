// Pipeline schedules: every generated schedule passes the check and its dry run; the dry run's bubble is
// the closed form of Megatron-LM's paper; hand-written schedules with a planted deadlock, a missing receive
// or a missing backward are refused with the rank and action named.
#include "distributed/pipeline/schedule.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lmf::distributed::pipeline {
namespace {

using ::testing::HasSubstr;

TEST(ScheduleTest, EveryGeneratedScheduleIsValid) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB, ScheduleKind::kZeroBubbleH1}) {
    for (int ranks = 1; ranks <= 4; ++ranks) {
      for (int m = 1; m <= 9; ++m) {
        absl::StatusOr<Schedule> s = MakeSchedule(kind, ranks, 1, m);
        ASSERT_TRUE(s.ok()) << s.status();
        EXPECT_TRUE(ValidateSchedule(*s).ok()) << ScheduleKindName(kind) << " " << ranks << " " << m;
      }
    }
  }
  for (int ranks = 1; ranks <= 4; ++ranks) {
    for (int chunks = 1; chunks <= 3; ++chunks) {
      for (int m = ranks; m <= 4 * ranks; m += ranks) {
        absl::StatusOr<Schedule> s = MakeSchedule(ScheduleKind::kInterleavedOneFOneB, ranks, chunks, m);
        ASSERT_TRUE(s.ok()) << s.status();
      }
    }
  }
}

// Uniform stages and free transfers: GPipe and 1F1B idle (p - 1) / m of the compute, interleaving with v
// chunks per rank (p - 1) / (v m) (Narayanan et al. 2021, section 2.2).
TEST(ScheduleTest, BubbleMatchesTheClosedForm) {
  for (int p : {2, 4}) {
    for (int m : {4, 8, 16}) {
      for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB}) {
        absl::StatusOr<Simulation> sim = Simulate(*MakeSchedule(kind, p, 1, m));
        ASSERT_TRUE(sim.ok()) << sim.status();
        EXPECT_DOUBLE_EQ(sim->bubble_ratio(), static_cast<double>(p - 1) / m) << ScheduleKindName(kind) << p << m;
      }
      for (int v : {2, 4}) {
        absl::StatusOr<Simulation> sim = Simulate(*MakeSchedule(ScheduleKind::kInterleavedOneFOneB, p, v, m));
        ASSERT_TRUE(sim.ok()) << sim.status();
        EXPECT_NEAR(sim->bubble_ratio(), static_cast<double>(p - 1) / (v * m), 1e-12) << "p " << p << " v " << v
                                                                                       << " m " << m;
      }
    }
  }
}

// With F = BI = BW = 1 (B = 2), ZB-H1 idles (p - 1)(F + B - W) = p - 1 per rank against 1F1B's 3 (p - 1)
// (Qi et al. 2024, section 3): a third of 1F1B's bubble.
TEST(ScheduleTest, ZeroBubbleH1ShrinksTheBubble) {
  Costs costs;
  costs.forward = costs.backward_input = costs.backward_weight = 1;
  costs.backward = 2;
  for (int p : {2, 4}) {
    for (int m : {8, 16}) {
      const double one_f_one_b = Simulate(*MakeSchedule(ScheduleKind::kOneFOneB, p, 1, m), costs)->bubble_ratio();
      const double zb = Simulate(*MakeSchedule(ScheduleKind::kZeroBubbleH1, p, 1, m), costs)->bubble_ratio();
      EXPECT_DOUBLE_EQ(one_f_one_b, static_cast<double>(p - 1) / m);
      EXPECT_DOUBLE_EQ(zb, static_cast<double>(p - 1) / (3 * m)) << "p " << p << " m " << m;
    }
  }
}

Schedule HandWritten(std::vector<std::vector<Action>> actions, int micro_batches) {
  Schedule s;
  s.ranks = static_cast<int>(actions.size());
  s.micro_batches = micro_batches;
  s.actions = std::move(actions);
  return s;
}

TEST(ScheduleTest, APlantedDeadlockIsFound) {
  // Rank 0 waits for micro-batch 0's gradient before sending micro-batch 1's activation; rank 1 waits for
  // that activation before it runs the backward that sends the gradient.
  const Schedule s = HandWritten(
      {{{Op::kForward, 0, 0}, {Op::kSendActivation, 0, 0}, {Op::kRecvGradient, 0, 0}, {Op::kBackward, 0, 0},
        {Op::kForward, 1, 0}, {Op::kSendActivation, 1, 0}, {Op::kRecvGradient, 1, 0}, {Op::kBackward, 1, 0}},
       {{Op::kRecvActivation, 0, 0}, {Op::kForward, 0, 0}, {Op::kRecvActivation, 1, 0}, {Op::kForward, 1, 0},
        {Op::kBackward, 0, 0}, {Op::kSendGradient, 0, 0}, {Op::kBackward, 1, 0}, {Op::kSendGradient, 1, 0}}},
      2);
  const absl::Status status = ValidateSchedule(s);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("deadlocks"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("rank 0 action #2 (recvG0.0) waits for rank 1"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("rank 1 action #2 (recvA1.0) waits for rank 0"));
}

TEST(ScheduleTest, MissingPiecesAreNamed) {
  Schedule s = *MakeSchedule(ScheduleKind::kOneFOneB, 2, 1, 2);
  Schedule no_recv = s;
  no_recv.actions[1].erase(no_recv.actions[1].begin());  // rank 1's first receive
  EXPECT_THAT(std::string(ValidateSchedule(no_recv).message()),
              HasSubstr("rank 1 action #0 (F0.0): its activation is not received before it (from rank 0)"));
  Schedule no_backward = s;
  for (auto it = no_backward.actions[0].begin(); it != no_backward.actions[0].end(); ++it) {
    if (it->op == Op::kBackward && it->micro_batch == 1) {
      no_backward.actions[0].erase(it);
      break;
    }
  }
  EXPECT_THAT(std::string(ValidateSchedule(no_backward).message()),
              HasSubstr("rank 0 does not run micro-batch 1 through chunk 0 exactly once"));
  Schedule swapped = *MakeSchedule(ScheduleKind::kGPipe, 2, 1, 2);  // rank 1 receives 1 before 0
  std::swap(swapped.actions[1][0], swapped.actions[1][2]);
  std::swap(swapped.actions[1][1], swapped.actions[1][3]);
  EXPECT_THAT(std::string(ValidateSchedule(swapped).message()),
              HasSubstr("rank 1 receives the activations of rank 0 in another order"));
  Schedule extra_send = s;
  extra_send.actions[0].push_back({Op::kSendActivation, 1, 0});
  EXPECT_THAT(std::string(ValidateSchedule(extra_send).message()), HasSubstr("sent but never received"));
}

TEST(ScheduleTest, SchedulesThatDoNotFitAreRefused) {
  EXPECT_THAT(std::string(MakeSchedule(ScheduleKind::kInterleavedOneFOneB, 4, 2, 2).status().message()),
              HasSubstr("multiple of the pipeline ranks"));
  EXPECT_THAT(std::string(MakeSchedule(ScheduleKind::kInterleavedOneFOneB, 4, 2, 6).status().message()),
              HasSubstr("multiple of the pipeline ranks"));
  EXPECT_THAT(std::string(MakeSchedule(ScheduleKind::kOneFOneB, 2, 2, 4).status().message()),
              HasSubstr("only interleaved_1f1b"));
  EXPECT_FALSE(MakeSchedule(ScheduleKind::kGPipe, 0, 1, 4).ok());
  EXPECT_THAT(std::string(ParseScheduleKind("zb").status().message()), HasSubstr("gpipe, 1f1b"));
  EXPECT_EQ(*ParseScheduleKind("interleaved_1f1b"), ScheduleKind::kInterleavedOneFOneB);
}

}  // namespace
}  // namespace lmf::distributed::pipeline
