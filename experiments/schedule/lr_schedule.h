// Learning-rate schedules: linear warmup from 0 to the peak, then cosine decay to a floor, a constant,
// linear decay to the floor, or warmup-stable-decay, measured in optimizer steps or training tokens
// (config/schedule.proto).
// The cosine is exactly CS336's get_lr_cosine_schedule (assignment 1), so values can be compared.
#ifndef LMFORGE_EXPERIMENTS_SCHEDULE_LR_SCHEDULE_H_
#define LMFORGE_EXPERIMENTS_SCHEDULE_LR_SCHEDULE_H_

#include <cstdint>

#include "config/schedule.pb.h"

namespace lmf::experiments {

// CS336's schedule: it < warmup: max * it / warmup; warmup <= it <= cycle: min + (1 + cos(pi * (it - warmup)
// / (cycle - warmup))) / 2 * (max - min); after: min. warmup = 0 starts at max.
double CosineScheduleLr(int64_t it, double max_lr, double min_lr, int64_t warmup, int64_t cycle);

// The same shape with a straight line from max at `warmup` to min at `decay_end`.
double LinearScheduleLr(int64_t it, double max_lr, double min_lr, int64_t warmup, int64_t decay_end);

// Warmup-stable-decay: the warmup as above, max until decay_start, then `shape` from max at decay_start to
// min at decay_end (x = (it - decay_start) / (decay_end - decay_start)), min after. decay_start >= warmup
// (config::WsdDecayStart, config/run_length.h, gives it for a config).
double WsdScheduleLr(int64_t it, double max_lr, double min_lr, int64_t warmup, int64_t decay_start,
                     int64_t decay_end, config::ScheduleConfig::DecayShape shape);

class LrSchedule {
 public:
  // `run_steps` and `tokens_per_step` give the run's length, used where schedule.decay_end is 0.
  LrSchedule(const config::ScheduleConfig& schedule, double peak_lr, int64_t run_steps, int64_t tokens_per_step);

  // The learning rate of optimizer step `step` (0-based), which starts after step * tokens_per_step tokens.
  double At(int64_t step) const;

 private:
  config::ScheduleConfig::Kind kind_;
  double peak_lr_;
  double min_lr_;
  int64_t warmup_;
  int64_t decay_end_;
  int64_t decay_start_;  // WSD: where the stable phase ends
  config::ScheduleConfig::DecayShape decay_shape_;
  int64_t tokens_per_step_;
  bool in_tokens_;
};

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_SCHEDULE_LR_SCHEDULE_H_
