// Learning-rate schedules (see lr_schedule.h). The arithmetic follows CS336's Python expression term by
// term so that the doubles agree to the last bit.
#include "experiments/schedule/lr_schedule.h"

#include <cmath>

#include "base/check.h"
#include "config/run_length.h"

namespace lmf::experiments {

double CosineScheduleLr(int64_t it, double max_lr, double min_lr, int64_t warmup, int64_t cycle) {
  if (it < warmup) return max_lr * static_cast<double>(it) / static_cast<double>(warmup);
  if (it <= cycle) {
    if (cycle == warmup) return max_lr;
    const double progress = static_cast<double>(it - warmup) / static_cast<double>(cycle - warmup);
    return min_lr + 0.5 * (1 + std::cos(progress * M_PI)) * (max_lr - min_lr);
  }
  return min_lr;
}

double LinearScheduleLr(int64_t it, double max_lr, double min_lr, int64_t warmup, int64_t decay_end) {
  if (it < warmup) return max_lr * static_cast<double>(it) / static_cast<double>(warmup);
  if (it <= decay_end) {
    if (decay_end == warmup) return max_lr;
    const double progress = static_cast<double>(it - warmup) / static_cast<double>(decay_end - warmup);
    return max_lr + progress * (min_lr - max_lr);
  }
  return min_lr;
}

double WsdScheduleLr(int64_t it, double max_lr, double min_lr, int64_t warmup, int64_t decay_start,
                     int64_t decay_end, config::ScheduleConfig::DecayShape shape) {
  if (it < warmup) return max_lr * static_cast<double>(it) / static_cast<double>(warmup);
  if (it <= decay_start) return max_lr;  // exactly: the branches of a WSD run share this value bit for bit
  if (it >= decay_end) return min_lr;
  const double x = static_cast<double>(it - decay_start) / static_cast<double>(decay_end - decay_start);
  switch (shape) {
    case config::ScheduleConfig::DECAY_ONE_MINUS_SQRT:
      return min_lr + (max_lr - min_lr) * (1 - std::sqrt(x));
    case config::ScheduleConfig::DECAY_LINEAR:
      return min_lr + (max_lr - min_lr) * (1 - x);
    case config::ScheduleConfig::DECAY_COSINE:
      return min_lr + (max_lr - min_lr) * 0.5 * (1 + std::cos(M_PI * x));
    default:
      LMF_CHECK(false) << "WSD decay shape " << shape << " passed validation but is not handled";
      return 0;
  }
}

LrSchedule::LrSchedule(const config::ScheduleConfig& schedule, double peak_lr, int64_t run_steps,
                       int64_t tokens_per_step)
    : kind_(schedule.kind()),
      peak_lr_(peak_lr),
      min_lr_(peak_lr * schedule.min_lr_ratio()),
      warmup_(schedule.warmup()),
      decay_end_(schedule.decay_end()),
      tokens_per_step_(tokens_per_step),
      in_tokens_(schedule.unit() == config::ScheduleConfig::TOKENS) {
  LMF_CHECK_GT(tokens_per_step, 0);
  if (decay_end_ == 0) decay_end_ = in_tokens_ ? run_steps * tokens_per_step : run_steps;
  decay_start_ = config::WsdDecayStart(warmup_, decay_end_, schedule.decay_fraction());
  decay_shape_ = schedule.decay_shape();
}

double LrSchedule::At(int64_t step) const {
  const int64_t it = in_tokens_ ? step * tokens_per_step_ : step;
  switch (kind_) {
    case config::ScheduleConfig::COSINE:
      return CosineScheduleLr(it, peak_lr_, min_lr_, warmup_, decay_end_);
    case config::ScheduleConfig::LINEAR:
      return LinearScheduleLr(it, peak_lr_, min_lr_, warmup_, decay_end_);
    case config::ScheduleConfig::WSD:
      return WsdScheduleLr(it, peak_lr_, min_lr_, warmup_, decay_start_, decay_end_, decay_shape_);
    case config::ScheduleConfig::CONSTANT:
      return it < warmup_ ? peak_lr_ * static_cast<double>(it) / static_cast<double>(warmup_) : peak_lr_;
    default:
      LMF_CHECK(false) << "schedule kind " << kind_ << " passed validation but is not handled";
      return 0;
  }
}

}  // namespace lmf::experiments
