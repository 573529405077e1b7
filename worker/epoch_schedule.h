// EpochSchedule: which iterations (clocks) make up each epoch of a worker's training, with or without a change of
// the worker count mid-job (docs/elasticity.md). Every worker computes the same schedule from the same inputs, so
// BSP barriers always complete.
//
// Without a plan: `epochs` epochs of `per_epoch` iterations from clock 0 (per_epoch = the largest share of the
// job's workers in batches, the last one short; with TrainConfig.drop_last the smallest share's whole batches).
// With one (proto EpochPlan, from the last worker-count change at clock S in epoch e): epoch e runs
// [S, S + first) where `first` is the same count over the plan's shares (or per_epoch when the plan starts epoch
// e afresh), then epochs e+1.. run per_epoch each. max_steps > 0 caps the total. Immutable value type.
#ifndef KESTREL_WORKER_EPOCH_SCHEDULE_H_
#define KESTREL_WORKER_EPOCH_SCHEDULE_H_

#include <cstdint>

namespace kestrel {

class EpochSchedule {
 public:
  struct Epoch {
    int64_t index = 0;
    int64_t start = 0;  // its first clock
    int64_t end = 0;    // one past its last
  };

  static EpochSchedule Plain(int64_t per_epoch, int64_t epochs, int64_t max_steps);
  // `plan_epoch` starting at `start` for `first` iterations, then per_epoch each until `epochs` epochs.
  static EpochSchedule Planned(int64_t plan_epoch, int64_t start, int64_t first, int64_t per_epoch, int64_t epochs,
                               int64_t max_steps);

  // Iterations in all (the clock the job ends at).
  int64_t total() const { return total_; }
  // The epoch iteration `clock` (< total()) belongs to. Clocks before the plan's start belong to epochs that are
  // past: they map to the plan's epoch.
  Epoch At(int64_t clock) const;

 private:
  int64_t first_epoch_ = 0;  // the plan's epoch (0 without a plan)
  int64_t start_ = 0;        // its first clock (0 without a plan)
  int64_t first_ = 0;        // its iterations
  int64_t per_epoch_ = 1;
  int64_t total_ = 0;
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_EPOCH_SCHEDULE_H_
