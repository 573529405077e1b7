// PlanEpoch: the workers' shares of the rest of an epoch when a rescale changes the worker count (elastic jobs,
// docs/elasticity.md). Mid-epoch, every unread line of the epoch goes to exactly one new worker (ReassignLines,
// common/line_assignment.h); at an epoch's start, the epoch starts afresh with the new count's plain deal.
#ifndef KESTREL_SCHEDULER_EPOCH_PLAN_H_
#define KESTREL_SCHEDULER_EPOCH_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/checkpoint.pb.h"

namespace kestrel {

// The states of the workers of a new layout at clock `cut` (a rescale), from the old workers' reported `states`:
// the epoch's plan (common/line_assignment.h: the rest of the epoch dealt to the new workers, or a fresh epoch at
// its start) and where to read from. Every worker that stays is at `cut`; a removed one (its rank in `removed`)
// is wherever its last report says, and its unread lines go to the others. `old_of_new`: scheduler/rescale_layout.h
// MapRanks. FailedPrecondition when a worker's state is unknown or the epochs disagree. Pure.
[[nodiscard]] absl::StatusOr<std::vector<WorkerState>> PlanEpoch(const std::vector<WorkerState>& states, int64_t cut,
                                                   const std::vector<int>& old_of_new,
                                                   const std::vector<int>& removed);

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_EPOCH_PLAN_H_
