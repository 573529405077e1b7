#include "worker/epoch_schedule.h"

#include <algorithm>

namespace kestrel {

EpochSchedule EpochSchedule::Plain(int64_t per_epoch, int64_t epochs, int64_t max_steps) {
  return Planned(0, 0, per_epoch, per_epoch, epochs, max_steps);
}

EpochSchedule EpochSchedule::Planned(int64_t plan_epoch, int64_t start, int64_t first, int64_t per_epoch,
                                     int64_t epochs, int64_t max_steps) {
  EpochSchedule s;
  s.first_epoch_ = plan_epoch;
  s.start_ = start;
  s.first_ = std::max<int64_t>(first, 0);
  s.per_epoch_ = std::max<int64_t>(per_epoch, 1);
  s.total_ = plan_epoch >= epochs ? start
                                  : start + s.first_ + (epochs - plan_epoch - 1) * s.per_epoch_;
  if (max_steps > 0) s.total_ = std::min(s.total_, max_steps);
  return s;
}

EpochSchedule::Epoch EpochSchedule::At(int64_t clock) const {
  const int64_t first_end = start_ + first_;
  if (clock < first_end) return {first_epoch_, start_, first_end};
  const int64_t k = (clock - first_end) / per_epoch_;
  const int64_t begin = first_end + k * per_epoch_;
  return {first_epoch_ + 1 + k, begin, begin + per_epoch_};
}

}  // namespace kestrel
