// LR schedules: the cosine against CS336's reference values, linear decay, constant and warmup-stable-decay
// shapes, steps vs tokens, and decay_end defaulting to the run's end.
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

config::ScheduleConfig Wsd(int64_t warmup, double fraction, config::ScheduleConfig::DecayShape shape) {
  config::ScheduleConfig s =
      Schedule(config::ScheduleConfig::WSD, config::ScheduleConfig::STEPS, warmup, 0, 0.1);
  s.set_decay_fraction(fraction);
  s.set_decay_shape(shape);
  return s;
}

// Peak 1, floor 0.1, 100 steps, warmup 10, the last 20% decaying: steps 80 to 100. The expected values are
// the shapes' formulas at x = 0.25, 0.5, 0.75, evaluated in Python (1 - sqrt(0.5) = 0.2928...).
TEST(LrSchedule, WarmupStableDecayShapes) {
  const LrSchedule sqrt_decay(Wsd(10, 0.2, config::ScheduleConfig::DECAY_ONE_MINUS_SQRT), 1.0, 100, 1);
  EXPECT_DOUBLE_EQ(sqrt_decay.At(5), 0.5);
  for (int64_t step : {10, 50, 79, 80}) EXPECT_EQ(sqrt_decay.At(step), 1.0) << step;
  EXPECT_DOUBLE_EQ(sqrt_decay.At(90), 0.36360389693210715);
  EXPECT_DOUBLE_EQ(sqrt_decay.At(95), 0.22057713659400527);
  EXPECT_EQ(sqrt_decay.At(100), 0.1);
  const LrSchedule linear(Wsd(10, 0.2, config::ScheduleConfig::DECAY_LINEAR), 1.0, 100, 1);
  EXPECT_EQ(linear.At(79), 1.0);
  EXPECT_DOUBLE_EQ(linear.At(85), 0.775);
  EXPECT_DOUBLE_EQ(linear.At(90), 0.55);
  const LrSchedule cosine(Wsd(10, 0.2, config::ScheduleConfig::DECAY_COSINE), 1.0, 100, 1);
  EXPECT_DOUBLE_EQ(cosine.At(85), 0.8681980515339464);
  EXPECT_DOUBLE_EQ(cosine.At(90), 0.55);
  // In tokens (100 per step): the same steps.
  config::ScheduleConfig in_tokens = Wsd(1000, 0.2, config::ScheduleConfig::DECAY_ONE_MINUS_SQRT);
  in_tokens.set_unit(config::ScheduleConfig::TOKENS);
  const LrSchedule tokens(in_tokens, 1.0, 100, 100);
  for (int64_t step : {5, 79, 80, 90, 95, 100}) EXPECT_EQ(tokens.At(step), sqrt_decay.At(step)) << step;
}

// What makes branching work: runs of every length share their stable phase. A 100-step and a 400-step WSD
// run (decays from 80 and 320) agree bit for bit up to step 80, where the shorter one's decay begins.
TEST(LrSchedule, WsdRunsOfAnyLengthShareTheStablePhase) {
  const LrSchedule short_run(Wsd(10, 0.2, config::ScheduleConfig::DECAY_ONE_MINUS_SQRT), 3e-3, 100, 1);
  const LrSchedule long_run(Wsd(10, 0.2, config::ScheduleConfig::DECAY_ONE_MINUS_SQRT), 3e-3, 400, 1);
  for (int64_t step = 0; step <= 80; ++step) EXPECT_EQ(short_run.At(step), long_run.At(step)) << step;
  EXPECT_LT(short_run.At(81), long_run.At(81));
}

// A decay longer than what follows the warmup starts at the warmup's end.
TEST(LrSchedule, WsdDecayStartsNoEarlierThanTheWarmupEnds) {
  const LrSchedule schedule(Wsd(90, 0.2, config::ScheduleConfig::DECAY_LINEAR), 1.0, 100, 1);
  EXPECT_DOUBLE_EQ(schedule.At(45), 0.5);
  EXPECT_EQ(schedule.At(90), 1.0);
  EXPECT_DOUBLE_EQ(schedule.At(95), 0.55);
  const LrSchedule whole(Wsd(0, 1.0, config::ScheduleConfig::DECAY_LINEAR), 1.0, 100, 1);  // all decay
  EXPECT_EQ(whole.At(0), 1.0);
  EXPECT_DOUBLE_EQ(whole.At(50), 0.55);
}

}  // namespace
}  // namespace lmf::experiments
