// Rescaler: changes the job's server and worker counts while it runs, and removes the members of an elastic job
// that did not come back. The one place that drives the servers through a rescale.
//
// Rescale (docs/elasticity.md). Scale() names new counts (Membership::BeginScale); once every joining rank is
// alive, the rescaler holds every worker at the earliest clock boundary (as for a checkpoint), computes the
// new partition (uniform over the new servers, as many ranges per server as before, the same replicas), and
// drives the servers through the move (ServerAdmin::Rescale: every old server sends each row it serves to the
// servers holding its range in the new layout; every server builds its new groups; every server switches).
// Then the new layout becomes the job's (Membership::CommitScale), the held workers are answered ABORTED (they
// rejoin, and continue in the new layout from the same clock: no clock is redone), and the hold is released. A
// checkpoint of the old layout restores into the new one (resharding on restore), so a server-count change
// needs no checkpoint of its own; a worker-count change cuts one at that boundary. A failure before the switch
// aborts the rescale and the job goes on as it was; one during the switch is fatal (the servers disagree).
// A worker-count change also deals the rest of the current epoch anew (PlanEpoch, scheduler/epoch_plan.h) and
// resizes the ClockTable; BSP's servers average over the new count from the boundary on. When only the worker
// count changes, every server keeps its groups and switches in place.
//
// Elastic jobs (CheckpointOptions::elastic_timeout, docs/elasticity.md). A member dead for longer than the
// timeout is removed by a rescale that names its rank (RemoveDead; the ranks above are renumbered). The others
// are held at the earliest boundary; a BSP worker that died mid-clock left that clock half done, which every
// server completes without it (CompleteWithout: FENCE, then COMPLETE). If some server had applied that clock with
// its pushes already, or a removal fails once the fence is up, the job rolls back to its last checkpoint instead
// and the member is removed from there. A failed-over server (replicated jobs) is removed by a live rescale; a
// dead server without replicas is dropped by the rollback its death started (scheduler/recovery.h). A rollback
// abandons a pending rescale.
//
// Thread safety: Scale() may be called from any thread; every other method runs on the job controller's thread
// (scheduler/job_controller.h), and Shutdown() after that thread ended.
#ifndef KESTREL_SCHEDULER_RESCALER_H_
#define KESTREL_SCHEDULER_RESCALER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/partition.h"
#include "proto/checkpoint.pb.h"
#include "scheduler/checkpointer.h"
#include "scheduler/clock_table.h"
#include "scheduler/job_context.h"
#include "scheduler/membership.h"
#include "scheduler/rescale_layout.h"

namespace kestrel {

class Rescaler {
 public:
  // `ctx` and `checkpointer` must outlive it. `wake` asks the controller to step now; `roll_back(why)` rolls the
  // job back to its last checkpoint (a removal that cannot go on without one). Both run on the calling thread.
  Rescaler(JobContext* ctx, Checkpointer* checkpointer, std::function<void()> wake,
           std::function<void(const std::string& why)> roll_back);

  Rescaler(const Rescaler&) = delete;
  Rescaler& operator=(const Rescaler&) = delete;

  // Starts a rescale to `target` (Membership::BeginScale's errors); `done` runs once, on the controller thread
  // (or in Shutdown()), when it is done or failed (the job unchanged, or rolled back when a removal failed after
  // its fence). The new ranks must register within `join_timeout`. `verify`: read the full table's fingerprint
  // before and after (ScaleResult). `at_clock`: the boundary to rescale at (0: the earliest).
  [[nodiscard]] absl::Status Scale(ScaleTarget target, absl::Duration join_timeout,
                     std::function<void(absl::StatusOr<ScaleResult>)> done, bool verify = false, int64_t at_clock = 0);

  // Elastic jobs: starts a rescale that removes the members dead for longer than the elastic timeout, when
  // nothing else holds the clocks.
  void RemoveDead();
  // Drives a pending rescale; true while one holds the clocks (nothing else may).
  bool Drive();
  // The job rolls back (`why`): a pending rescale's hold and plans are of the abandoned timeline, so it ends
  // ABORTED.
  void Abandon(const std::string& why);
  // The scheduler stops: a Scale call still waiting is answered (its gRPC call must finish for the server to
  // shut down).
  void Shutdown();

 private:
  struct Participant;
  struct MovePlan;
  // Where a rescale holding the workers stands (CheckHeld).
  enum class Held {
    kEnded,    // abandoned (EndRescale answered it)
    kWaiting,  // a worker has not reached the cut yet, or a server does not act on the latest routing yet
    kReady,    // every worker that stays is at the cut: the rows may move
  };

  // Drive's steps. StartHold: a pending rescale not holding the workers yet is abandoned (the job cannot go on
  // with it), waited for (its joining ranks, the boundary asked for), or holds the workers at its cut (true).
  bool StartHold(const ScaleTarget& target, JobState state);
  // Whether the held rescale may move now (`state`: the job's, read as Drive began).
  Held CheckHeld(const ScaleTarget& target, JobState state);
  // Every worker is at the cut: plans the workers' shares, settles a removed BSP worker's half-done clock, moves
  // the rows and releases the workers; a failure ends the rescale (or rolls the job back, for a removal).
  void RescaleAtCut(const ScaleTarget& target);
  // Under server-enforced clocks (leases) the scheduler does not know how far the workers got (they report once
  // per lease), and a dead one holds the others back in the servers' read gates. Asks the servers where the
  // workers' pushes end (FRONTIER), holds every worker at the boundary they can reach (removing: where the dead
  // ones block them, BSP the next clock, SSP(s) s further; otherwise the clock after the furthest worker's), and
  // has the servers refuse reads from there (HOLD), so the workers report there instead of training out their
  // leases. True when held; false when the rescale ended (a failed call, or a removal that must roll back: a BSP
  // worker that died in the middle of a step's pushes left a clock applied with its part).
  bool HoldAtServers(const ScaleTarget& target);
  // One request on every live server, concurrently; the answers of those that answered, and the first failure.
  [[nodiscard]] absl::Status OnEveryServer(const RescaleShardRequest& request,
                                           std::vector<RescaleShardResponse>* answers);
  // BSP removal: completes the clock before the cut without the removed `half_done` workers. False when it could
  // not: the rescale ended and the job rolls back (`removing`: what the rollback is for).
  bool SettleHalfDoneClock(const std::vector<int>& half_done, const std::string& removing);
  // The rescale to `target` is committed: the held workers are answered (they rejoin), a worker-count change cuts
  // its checkpoint, and the rescale ends with `result`.
  void ReleaseRescaled(const ScaleTarget& target, ScaleResult result, bool workers_change);

  // Moves the rows and switches every server to `next` (the held cut is scale_cut_).
  // `worker_states` (a worker-count change): every new worker's state, installed with the ClockTable's new size
  // just before the layout is committed.
  [[nodiscard]] absl::StatusOr<ScaleResult> MoveTo(const Partition& next, ScaleTarget target,
                                     std::vector<WorkerState>* worker_states);
  // MoveTo's steps. Enlist: who takes part in `move` (from the `old` layout's live servers at `old_addresses`
  // and the joining ones): Unavailable when a server not being removed is dead.
  [[nodiscard]] absl::Status Enlist(const JobLayout& old, const std::vector<std::string>& old_addresses,
                      const ScaleTarget& target, MovePlan* move);
  // The full table's fingerprint over the servers at `at` (each one's own group).
  [[nodiscard]] absl::StatusOr<uint64_t> Fingerprint(const std::vector<std::string>& at);
  // One phase of `move` on every participant (`senders_only`: the old servers alive), concurrently; the first
  // failure. `answers`: every answer, in the participants' order.
  [[nodiscard]] absl::Status RunPhase(const MovePlan& move, RescaleShardRequest::Phase which, bool senders_only,
                        std::vector<RescaleShardResponse>* answers, bool keep_groups = false);
  // Drives the servers to the new layout: in place when only the worker count changes, else send, install and
  // switch. A failure before the switch aborts it (the job unchanged); one during the switch fails the job
  // (JobContext::Fail). `sent`: the senders' answers; `installed`: when the new groups were installed.
  [[nodiscard]] absl::Status SwitchServers(const MovePlan& move, absl::Time start, std::vector<RescaleShardResponse>* sent,
                             absl::Time* installed);
  // The servers serve `next`: the workers' side is installed, and the layout becomes the job's (CommitScale).
  [[nodiscard]] absl::Status CommitMove(const MovePlan& move, const Partition& next, std::vector<WorkerState>* worker_states);
  // A worker-count change at the held cut: every new worker's state (PlanEpoch) from the old workers' reported
  // states.
  [[nodiscard]] absl::StatusOr<std::vector<WorkerState>> PlanWorkers(const std::vector<int>& old_of_new,
                                                       const std::vector<int>& removed);
  // BSP: removed `workers` died in `clock`, which every other worker finished: the servers fence them off and
  // apply it without them. False (nothing applied) when some server had applied it with their pushes already.
  [[nodiscard]] absl::StatusOr<bool> CompleteWithout(const std::vector<int>& workers, int64_t clock);
  // Ends a rescale with `result` (answering Scale's caller) and releases its hold.
  void EndRescale(absl::StatusOr<ScaleResult> result);

  JobContext* const ctx_;
  Checkpointer* const checkpointer_;
  const std::function<void()> wake_;
  const std::function<void(const std::string&)> roll_back_;

  absl::Mutex mu_;
  bool scale_pending_ ABSL_GUARDED_BY(mu_) = false;  // Scale() started one, not yet ended
  bool scale_verify_ ABSL_GUARDED_BY(mu_) = false;
  int64_t scale_at_ ABSL_GUARDED_BY(mu_) = 0;  // the boundary asked for (0: the earliest)
  std::function<void(absl::StatusOr<ScaleResult>)> scale_done_ ABSL_GUARDED_BY(mu_);
  absl::Time scale_deadline_ ABSL_GUARDED_BY(mu_);

  // The controller thread's.
  int64_t scale_cut_ = ClockTable::kNoHold;  // the clock it holds the workers at
  absl::Time scale_start_;
  int64_t removal_rollback_clock_ = -1;  // a removal rolled the job back to this clock's checkpoint (once)
  // The clock each removed worker's pushes end at (target.remove_workers' order): its last report with the
  // scheduler's barrier, the servers' FRONTIER under leases.
  std::vector<int64_t> removed_at_;
  bool reads_held_ = false;  // the servers hold reads for this rescale (HOLD): an abandoned one lifts it (ABORT)
};

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_RESCALER_H_
