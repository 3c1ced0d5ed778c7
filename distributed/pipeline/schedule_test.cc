// Pipeline schedules: every generated schedule passes the check and its dry run; SendsReceivedBy against
// reachability in the actions' graph; the dry run's bubble is the closed form of Megatron-LM's paper; hand-written schedules with a planted deadlock, a missing receive
// or a missing backward are refused with the rank and action named.
#include "distributed/pipeline/schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

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
// 1F1B on 2 ranks, 4 micro-batches, by hand. Rank 0: F0 sendA0 F1 sendA1 recvG0 B0 F2 sendA2 recvG1 B1 F3
// sendA3 recvG2 B2 recvG3 B3; rank 1: (recvA F B sendG) for each micro-batch. Rank 1's sendG0 (#3) is
// received at rank 0's #4, which precedes rank 0's sendA2, which rank 1 receives at #8; sendG1 (#7): rank
// 0's #8, then sendA3, received at #12; sendG2 and sendG3 are followed by no message back: the end (16).
// Rank 0's sendA0 (#1) is received at rank 1's #0, before its sendG0, received at rank 0's #4.
TEST(ScheduleTest, SendsReceivedByOneFOneBByHand) {
  const std::vector<std::vector<int>> done = SendsReceivedBy(*MakeSchedule(ScheduleKind::kOneFOneB, 2, 1, 4));
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[1], (std::vector<int>{-1, -1, -1, 8, -1, -1, -1, 12, -1, -1, -1, 16, -1, -1, -1, 16}));
  EXPECT_EQ(done[0][1], 4);   // sendA0
  EXPECT_EQ(done[0][3], 8);   // sendA1 (rank 1's sendG1 is received at rank 0's #8)
}

// Against a naive reference: the actions as a graph (each action to its rank's next, each send to its
// receive), and for each send the first later action of its rank that its receive reaches.
TEST(ScheduleTest, SendsReceivedByIsTheFirstActionTheReceiveReaches) {
  struct Kinds { ScheduleKind kind; int chunks; };
  for (const Kinds& k : {Kinds{ScheduleKind::kGPipe, 1}, Kinds{ScheduleKind::kOneFOneB, 1},
                         Kinds{ScheduleKind::kZeroBubbleH1, 1}, Kinds{ScheduleKind::kInterleavedOneFOneB, 2}}) {
    for (int ranks = 2; ranks <= 4; ++ranks) {
      for (int m = ranks; m <= 3 * ranks; m += ranks) {
        const Schedule s = *MakeSchedule(k.kind, ranks, k.chunks, m);
        const std::string what = absl::StrCat(ScheduleKindName(k.kind), " ranks ", ranks, " m ", m);
        // A message: (gradient, micro-batch, receiving stage) -> where it is sent and received.
        std::map<std::tuple<bool, int, int>, std::pair<int, int>> sends, receives;
        for (int r = 0; r < ranks; ++r) {
          for (int i = 0; i < static_cast<int>(s.actions[r].size()); ++i) {
            const Action& a = s.actions[r][i];
            const int stage = s.stage(r, a.chunk);
            if (a.op == Op::kSendActivation) sends[{false, a.micro_batch, stage + 1}] = {r, i};
            if (a.op == Op::kSendGradient) sends[{true, a.micro_batch, stage - 1}] = {r, i};
            if (a.op == Op::kRecvActivation) receives[{false, a.micro_batch, stage}] = {r, i};
            if (a.op == Op::kRecvGradient) receives[{true, a.micro_batch, stage}] = {r, i};
          }
        }
        std::map<std::pair<int, int>, std::pair<int, int>> message;  // send -> its receive
        for (const auto& [key, from] : sends) message[from] = receives.at(key);
        const std::vector<std::vector<int>> done = SendsReceivedBy(s);
        for (const auto& [from, to] : message) {
          std::set<std::pair<int, int>> reached;
          std::vector<std::pair<int, int>> frontier = {to};
          while (!frontier.empty()) {
            const auto [r, i] = frontier.back();
            frontier.pop_back();
            if (!reached.insert({r, i}).second) continue;
            if (i + 1 < static_cast<int>(s.actions[r].size())) frontier.push_back({r, i + 1});
            if (message.count({r, i})) frontier.push_back(message.at({r, i}));
          }
          int want = static_cast<int>(s.actions[from.first].size());
          for (const auto& [r, i] : reached) {
            if (r == from.first && i > from.second) want = std::min(want, i);
          }
          EXPECT_EQ(done[from.first][from.second], want) << what << ": rank " << from.first << " action #"
                                                         << from.second;
        }
        for (int r = 0; r < ranks; ++r) {
          for (int i = 0; i < static_cast<int>(s.actions[r].size()); ++i) {
            if (!message.count({r, i})) {
              EXPECT_EQ(done[r][i], -1) << what << ": rank " << r << " action #" << i;
            }
          }
        }
      }
    }
  }
}

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
