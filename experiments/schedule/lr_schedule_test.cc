// LR schedules: the cosine against CS336's reference values, linear decay and constant shapes, steps vs
// tokens, and decay_end defaulting to the run's end.
#include "experiments/schedule/lr_schedule.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace lmf::experiments {
namespace {

// CS336 assignment 1, tests/test_optimizer.py::test_get_lr_cosine_schedule: it = 0..24 with
// max_learning_rate=1, min_learning_rate=0.1, warmup_iters=7, cosine_cycle_iters=21. They follow from
//   it < 7:        it / 7
//   7 <= it <= 21: 0.1 + 0.5 * (1 + cos(pi * (it - 7) / 14)) * 0.9
//   it > 21:       0.1
// e.g. it=8: 0.1 + 0.45 * (1 + cos(pi/14)) = 0.9887175604818206; it=14: 0.1 + 0.45 = 0.55.
const std::vector<double> kCs336Expected = {
    0,                   0.14285714285714285, 0.2857142857142857,  0.42857142857142855, 0.5714285714285714,
    0.7142857142857143,  0.8571428571428571,  1.0,                 0.9887175604818206,  0.9554359905560885,
    0.9018241671106134,  0.8305704108364301,  0.7452476826029011,  0.6501344202803414,  0.55,
    0.44986557971965857, 0.3547523173970989,  0.26942958916356996, 0.19817583288938662, 0.14456400944391146,
    0.11128243951817937, 0.1,                 0.1,                 0.1,                 0.1};

TEST(CosineSchedule, MatchesCs336Values) {
  for (int it = 0; it < 25; ++it) {
    // The literals are Python reprs (shortest round-trip) of the reference's doubles and our arithmetic
    // follows the same expression in the same order with the same libm, so the doubles are equal.
    EXPECT_EQ(CosineScheduleLr(it, 1.0, 0.1, 7, 21), kCs336Expected[it]) << "it=" << it;
  }
}

TEST(CosineSchedule, ZeroWarmupStartsAtPeak) {
  EXPECT_EQ(CosineScheduleLr(0, 0.8, 0.2, 0, 10), 0.8);
  EXPECT_NEAR(CosineScheduleLr(5, 0.8, 0.2, 0, 10), 0.5, 1e-15);
  EXPECT_EQ(CosineScheduleLr(11, 0.8, 0.2, 0, 10), 0.2);
}

config::ScheduleConfig Schedule(config::ScheduleConfig::Kind kind, config::ScheduleConfig::Unit unit,
                                int64_t warmup, int64_t decay_end, double min_ratio) {
  config::ScheduleConfig s;
  s.set_kind(kind);
  s.set_unit(unit);
  s.set_warmup(warmup);
  s.set_decay_end(decay_end);
  s.set_min_lr_ratio(min_ratio);
  return s;
}

TEST(LrSchedule, CosineInStepsMatchesTheFormula) {
  LrSchedule schedule(Schedule(config::ScheduleConfig::COSINE, config::ScheduleConfig::STEPS, 7, 21, 0.1), 1.0,
                      100, 64);
  for (int it = 0; it < 25; ++it) EXPECT_EQ(schedule.At(it), kCs336Expected[it]) << it;
}

TEST(LrSchedule, DecayEndDefaultsToTheRunsEnd) {
  LrSchedule schedule(Schedule(config::ScheduleConfig::COSINE, config::ScheduleConfig::STEPS, 10, 0, 0.1), 2.0,
                      110, 64);
  EXPECT_DOUBLE_EQ(schedule.At(10), 2.0);
  EXPECT_NEAR(schedule.At(60), 0.2 + 0.5 * 1.8, 1e-15);  // halfway: cos(pi/2) = 0
  EXPECT_DOUBLE_EQ(schedule.At(110), 0.2);
  EXPECT_DOUBLE_EQ(schedule.At(500), 0.2);
}

TEST(LrSchedule, TokensUnitCountsTokensPerStep) {
  // 100 tokens per step; warmup 1000 tokens = 10 steps, decay to the floor at 3000 tokens = step 30.
  LrSchedule schedule(Schedule(config::ScheduleConfig::COSINE, config::ScheduleConfig::TOKENS, 1000, 3000, 0.0),
                      1.0, 1000, 100);
  EXPECT_DOUBLE_EQ(schedule.At(5), 0.5);
  EXPECT_DOUBLE_EQ(schedule.At(10), 1.0);
  EXPECT_NEAR(schedule.At(20), 0.5, 1e-15);
  EXPECT_DOUBLE_EQ(schedule.At(30), 0.0);
}

TEST(LrSchedule, LinearDecay) {
  LrSchedule schedule(Schedule(config::ScheduleConfig::LINEAR, config::ScheduleConfig::STEPS, 4, 14, 0.1), 1.0,
                      20, 1);
  EXPECT_DOUBLE_EQ(schedule.At(2), 0.5);
  EXPECT_DOUBLE_EQ(schedule.At(4), 1.0);
  EXPECT_NEAR(schedule.At(9), 0.55, 1e-15);
  EXPECT_DOUBLE_EQ(schedule.At(14), 0.1);
  EXPECT_DOUBLE_EQ(schedule.At(19), 0.1);
}

TEST(LrSchedule, ConstantAfterWarmup) {
  LrSchedule schedule(Schedule(config::ScheduleConfig::CONSTANT, config::ScheduleConfig::STEPS, 4, 0, 0.1), 3.0,
                      20, 1);
  EXPECT_DOUBLE_EQ(schedule.At(1), 0.75);
  EXPECT_DOUBLE_EQ(schedule.At(4), 3.0);
  EXPECT_DOUBLE_EQ(schedule.At(19), 3.0);
}

}  // namespace
}  // namespace lmf::experiments
