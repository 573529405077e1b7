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
// MapRanks. FailedPrecondition when a worker's state is unknown or the epochs disagree.
// `removed_at` (empty, or one per `removed`): the clock each removed worker's pushes end at, when that is past
// its last report (under server-enforced clocks a worker reports once per lease): its reader is placed there
// (StandingAt), so the batches it trained since are not handed on again. Pure.
[[nodiscard]] absl::StatusOr<std::vector<WorkerState>> PlanEpoch(const std::vector<WorkerState>& states, int64_t cut,
                                                   const std::vector<int>& old_of_new,
                                                   const std::vector<int>& removed,
                                                   const std::vector<int64_t>& removed_at = {});

// Where a worker that reported `state` stands at clock `at` (>= state.clock()) had it trained every iteration in
// between: its epoch, that epoch's first clock, its share and how many of the share's lines it consumed, and a
// reader position at or before its next line (the reported one, or the epoch's start once it passed an epoch's
// end). Each iteration consumes state.batch_lines() lines of the share; the epoch after the reported one is
// sharded plainly by `workers` (the job's count). FailedPrecondition when the state lacks what this needs (an
// older worker) or `at` lies beyond the next epoch's known start. Pure.
struct Standing {
  int64_t epoch = 0;
  int64_t epoch_start = 0;
  LineShare share;
  uint64_t consumed = 0;
  ReaderPositionProto reader;
};
[[nodiscard]] absl::StatusOr<Standing> StandingAt(const WorkerState& state, int64_t at, int rank, int workers);

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_EPOCH_PLAN_H_
