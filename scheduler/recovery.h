// Recovery: how the job survives a lost server. The one place that decides when the job rolls back to its last
// checkpoint, when a dead server is failed over instead, and when a replacement is synced and put back.
//
// Rollback. A server declared dead makes the job roll back, and so does a live worker that asks for it
// (Scheduler.RequestRollback: the workers' own collective broke; JobController::RequestRollback): a new generation (Membership::BeginRollback; the
// old timeline's requests are refused everywhere), every wait is failed with ABORTED, nothing may start.
// Once every server rank is alive again (the launcher restarted the dead one), every server restores the
// latest committed checkpoint (or empty tables if there is none), the clocks are set to its clock and the
// workers' reader positions to its own, and the job runs again; workers learn where to continue with Rejoin.
// A dead worker alone needs no rollback: its replacement continues from its rank's clock and reader position.
// After the job finished, a server death still rolls back while any worker has not left (Membership): before
// the final checkpoint is committed the workers redo their last iterations; after it, the restarted server
// restores that final checkpoint and the job is finished again (the evaluating worker reads it anew). Once
// every worker has left, nobody needs the servers. A server lost after the job finished with its final model
// in no checkpoint (none kept, or the final one failed) is fatal: the workers that left cannot redo it.
// A resumed job (scheduler/checkpointer.h) begins with a rollback to the checkpoint it resumes from.
//
// Failover (replicated jobs, docs/replication.md). A dead server whose every range still has a copy in service
// is failed over instead of rolled back (Membership::FailOver): no generation of the workers moves, no wait is
// cancelled, the clocks stay where they are; workers and servers re-route at the next routing generation.
// Re-replication: once a failed-over server's replacement is alive, the job is held at the earliest clock
// boundary (as for a checkpoint: no push is then in flight), the primary of each range group the replacement
// should hold copies it there (ServerAdmin::CopyGroup), the replacement is put back in service in a new routing
// generation, and the hold is released once every live server acts on that routing (so no server still
// accepts a write for a group it no longer forwards to the replacement). A failed copy releases the hold and is
// tried again a few heartbeats later. Losing every copy of some range rolls back as above, which puts every
// server back in service.
//
// Elastic jobs (CheckpointOptions::elastic_timeout, docs/elasticity.md). A dead server without replicas, dead
// for longer than the timeout, is dropped from the layout of the rollback its death started (DropDeadServers),
// and every server restores the checkpoint into the smaller layout. (A failed-over one is removed by a live
// rescale: scheduler/rescaler.h.)
//
// Thread safety: every method runs on the job controller's thread (scheduler/job_controller.h).
#ifndef KESTREL_SCHEDULER_RECOVERY_H_
#define KESTREL_SCHEDULER_RECOVERY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "proto/checkpoint.pb.h"
#include "scheduler/checkpointer.h"
#include "scheduler/clock_table.h"
#include "scheduler/job_context.h"
#include "scheduler/membership.h"

namespace kestrel {

class Recovery {
 public:
  // `ctx` and `checkpointer` must outlive it.
  Recovery(JobContext* ctx, Checkpointer* checkpointer);

  Recovery(const Recovery&) = delete;
  Recovery& operator=(const Recovery&) = delete;

  // Begins the job with a rollback to `manifest` (resume): Restore() restores it once every server is alive.
  void Resume(const CheckpointManifest& manifest);

  // Fails the dead servers over when every range keeps a copy; false when the job must roll back.
  bool FailOver();
  // A server died and was not failed over, the job being in `state`: true when the job must roll back. False
  // when it finished and every worker left (nobody reads the servers any more), or when its final model is in
  // no checkpoint (fatal: on_fatal ran).
  bool MustRollBack(JobState state);
  // Rolls the job back to its last checkpoint: a new generation, every wait cancelled; Restore() follows once
  // the servers are alive. A pending rescale must have been abandoned first (Rescaler::Abandon).
  void StartRollback(const std::string& why);
  // A rollback waiting for a server that stays dead (elastic jobs): the job's layout drops it, and the
  // restore puts its ranges on the others. False when there is nothing to drop (or it cannot be).
  bool DropDeadServers();
  // Rolls every server back to the latest checkpoint; false to retry later (a server unreachable).
  bool Restore();

  // The generation the latest rollback (or resume) began (0: none yet): every request stamped with an older one
  // belongs to a timeline it discarded.
  uint64_t rollback_generation() const { return rollback_generation_; }

  // Drives re-replication onto a live out-of-service server; true while one is in progress (nothing else may
  // hold the clocks).
  bool ReReplicate();

 private:
  // Ends a re-replication attempt: releases its hold (back to the scheduled cut).
  void EndReReplication();

  JobContext* const ctx_;
  Checkpointer* const checkpointer_;

  // The controller thread's.
  std::optional<CheckpointManifest> resume_from_;
  uint64_t rollback_generation_ = 0;  // the generation BeginRollback made
  bool relayout_restore_ = false;  // the rollback in progress restores into a new layout (DropDeadServers)
  int64_t sync_cut_ = ClockTable::kNoHold;  // re-replication: the clock it holds the workers at
  uint64_t sync_routing_ = 0;               // the routing generation that put the server back (0: copies not done)
  absl::Time next_sync_attempt_ = absl::InfinitePast();
};

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_RECOVERY_H_
