// CheckpointCoordinator: the scheduler's part of checkpoints and recovery. The one place that decides when a
// global checkpoint is cut, when it is committed, and when the job rolls back.
//
// Checkpoint at clock c (every N clocks, every T seconds, on request, and once when every worker is done):
//   1. hold: ClockTable::SetHold(c) stops every worker at the boundary of iteration c; once all clocks are c,
//      every push of iterations < c is acknowledged (and in BSP applied) and no other push is in flight,
//   2. every server writes its part (ShardAdmin::Checkpoint: changed rows, RocksDB snapshot, checksums),
//   3. the manifest is written (clock, job fingerprint, partition, tables, files with checksums, each
//      worker's reader position at c), then LATEST is moved: the commit. Old checkpoints beyond `keep` are
//      pruned, and the hold is released.
// If any step fails, nothing is committed; the attempt's directory is deleted by a later prune.
//
// Recovery. A server declared dead makes the job roll back: a new generation (Membership::BeginRollback; the
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
//
// Failover (replicated jobs, docs/replication.md). A dead server whose every range still has a copy in service
// is failed over instead of rolled back (Membership::FailOver): no generation of the workers moves, no wait is
// cancelled, the clocks stay where they are; workers and servers re-route at the next routing generation.
// Re-replication: once a failed-over server's replacement is alive, the coordinator holds every worker at the
// earliest clock boundary (as for a checkpoint: no push is then in flight), has the primary of each range group
// the replacement should hold copy it there (ShardAdmin::CopyGroup), puts the replacement back in service in a
// new routing generation, and releases the hold once every live server acts on that routing (so no server
// still accepts a write for a group it no longer forwards to the replacement). A failed copy releases the hold
// and is tried again a few heartbeats later.
// While a server is out of service no checkpoint is cut (its ranges' only written copy would be stale): a
// scheduled cut is skipped and the hold released, and the final model is settled without one. Losing every
// copy of some range rolls back as above, which puts every server back in service.
//
// Rescale (docs/elasticity.md). Scale() names new counts (Membership::BeginScale); once every joining rank is
// alive, the coordinator holds every worker at the earliest clock boundary (as for a checkpoint), computes the
// new partition (uniform over the new servers, as many ranges per server as before, the same replicas), and
// drives the servers through the move (ShardAdmin::Rescale: every old server sends each row it serves to the
// servers holding its range in the new layout; every server builds its new groups; every server switches).
// Then the new layout becomes the job's (Membership::CommitScale), the held workers are answered ABORTED (they
// rejoin, and continue in the new layout from the same clock: no clock is redone), and the hold is released. A
// checkpoint of the old layout restores into the new one (resharding on restore), so a server-count change
// needs no checkpoint of its own; a worker-count change cuts one at that boundary. A failure before the switch
// aborts the rescale and the job goes on as it was; one during the switch is fatal (the servers disagree).
// A worker-count change also deals the rest of the current epoch anew (PlanEpoch, worker/data/reshard.h: every
// unread line to exactly one worker) and resizes the ClockTable; BSP's servers average over the new count from the
// boundary on. When only the worker count changes, every server keeps its groups and switches in place.
//
// Elastic jobs (CheckpointOptions::elastic_timeout, docs/elasticity.md). A member dead for longer than the
// timeout is removed by a rescale that names its rank (RemoveDead; the ranks above are renumbered). The others
// are held at the earliest boundary; a BSP worker that died mid-clock left that clock half done, which every
// server completes without it (CompleteWithout: FENCE, then COMPLETE). If some server had applied that clock with
// its pushes already, or a removal fails once the fence is up, the job rolls back to its last checkpoint instead
// and the member is removed from there. A failed-over server (replicated jobs) is removed by a live rescale; a
// dead server without replicas is dropped from the layout of the rollback its death started (DropDeadServers),
// and every server restores the checkpoint into the smaller layout. A rollback abandons a pending rescale.
//
// Resume. With `resume`, Start() loads the latest committed checkpoint and the job begins with that
// rollback; a damaged checkpoint is an error (the scheduler exits non-zero, naming the file), never a fresh
// start. Without `resume`, a directory that already holds checkpoints is refused.
//
// Thread-safe. The coordinator runs on its own thread; the other methods are called from gRPC handlers and
// never block on it.
#ifndef KESTREL_SCHEDULER_CHECKPOINT_COORDINATOR_H_
#define KESTREL_SCHEDULER_CHECKPOINT_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/checkpoint_layout.h"
#include "common/partition.h"
#include "proto/checkpoint.pb.h"
#include "scheduler/clock_table.h"
#include "scheduler/membership.h"
#include "scheduler/shard_admin.h"

namespace kestrel {

struct CheckpointOptions {
  // Checkpoint root (common/checkpoint_layout.h). Default: "" = no checkpoints; a rollback then restarts the
  // job from its beginning.
  std::string dir;
  // Cut a checkpoint every this many clocks (at multiples of it). Default: 0 = off.
  int64_t every_clocks = 0;
  // Cut a checkpoint when this long has passed since the last one. Default: zero = off.
  absl::Duration every = absl::ZeroDuration();
  // Committed checkpoints kept. Default: 3.
  int keep = 3;
  // Start from the latest committed checkpoint in `dir` (a new job when there is none). Default: false.
  bool resume = false;
  // Cut one when every worker has finished. Default: true.
  bool final_checkpoint = true;
  // Elastic jobs (docs/elasticity.md): a server or worker dead for this long is removed from the job instead of
  // waited for. Default: zero = off (the job waits for a replacement).
  absl::Duration elastic_timeout = absl::ZeroDuration();
  // A rescale that changes only the worker count switches every server in place (no row moves). This makes it
  // rebuild the servers' groups by moving every row instead, as a server-count change does: for comparisons
  // (bench/rescale_bench.cc). Default: false.
  bool move_rows_on_worker_change = false;
};

// What the manifest records about the job.
struct JobDescription {
  std::string job_id;
  std::string partition;    // Partition::ToString()
  std::string consistency;  // bsp, ssp, asp
  int num_servers = 1;
  int num_workers = 1;
  uint64_t config_fingerprint = 0;
};

// What Scale() answers.
struct ScaleResult {
  int64_t clock = 0;               // the clock boundary the rescale happened at
  uint64_t layout_generation = 0;  // the rescale
  absl::Duration held;             // workers held: moves, switch and checkpoint
  absl::Duration moved;            // of which moving rows (send and install)
  uint64_t rows_moved = 0;         // rows sent to another server
  uint64_t bytes_moved = 0;
  // With verify: the full table's fingerprint (sum over servers and tables) before the move and after the switch.
  uint64_t fingerprint_before = 0;
  uint64_t fingerprint_after = 0;
};

struct CheckpointStatus {
  std::string latest;          // newest committed checkpoint's name, "" = none
  int64_t latest_clock = 0;
  uint64_t committed = 0;      // by this coordinator
  uint64_t rollbacks = 0;
  // The job finished and its final model is committed (or there is no final checkpoint to wait for: no
  // --checkpoint_dir, final_checkpoint off, or kFinalAttempts attempts failed). Workers leave only then, so a
  // server lost before it can still be recovered by redoing iterations.
  bool final_model_settled = false;
  uint64_t elastic_removals = 0;  // members removed because they did not come back (elastic jobs)
};

// The states of the workers of a new layout at clock `cut` (a rescale), from the old workers' reported `states`:
// the epoch's plan (worker/data/reshard.h: the rest of the epoch dealt to the new workers, or a fresh epoch at
// its start) and where to read from. Every worker that stays is at `cut`; a removed one (its rank in `removed`)
// is wherever its last report says, and its unread lines go to the others. `old_of_new`: scheduler/membership.h
// MapRanks. FailedPrecondition when a worker's state is unknown or the epochs disagree. Pure.
absl::StatusOr<std::vector<WorkerState>> PlanEpoch(const std::vector<WorkerState>& states, int64_t cut,
                                                   const std::vector<int>& old_of_new,
                                                   const std::vector<int>& removed);

class CheckpointCoordinator {
 public:
  // `membership`, `clocks` and `admin` must outlive it. `on_fatal` runs (on the coordinator thread) when the job
  // cannot continue safely: a checkpoint to restore is damaged, or a server refuses to restore it.
  CheckpointCoordinator(CheckpointOptions options, JobDescription job, Membership* membership, ClockTable* clocks,
                        ShardAdmin* admin, std::function<void(absl::Status)> on_fatal);
  ~CheckpointCoordinator();

  // Validates the options, reads the checkpoint to resume from (or checks there is none), and starts the
  // coordinator thread. An error means the scheduler must not start.
  absl::Status Start();
  // Stops the thread (an operation in progress finishes first).
  void Stop();
  // Something changed (a clock, a registration, a death): look now rather than at the next poll.
  void Wake();

  // A worker's state after its Advance (kept for the next checkpoint).
  void RecordWorkerState(int rank, const WorkerState& state);
  // The state to hand worker `rank` continuing at `clock` (its reader position), if known.
  std::optional<WorkerState> StateFor(int rank, int64_t clock) const;

  // Asks for a checkpoint at the earliest clock every worker can still stop at; returns that clock.
  // FailedPrecondition without a checkpoint directory or when the job is not running.
  absl::StatusOr<int64_t> Request();

  CheckpointStatus status() const;

  // Starts a rescale to `target` (Membership::BeginScale's errors); `done` runs once, on the coordinator thread
  // (or in Stop(), after that thread ended), when it is done or failed (the job unchanged, or rolled back when a
  // removal failed after its fence). The new ranks must register within `join_timeout`. `verify`:
  // read the full table's fingerprint before and after (ScaleResult).
  absl::Status Scale(ScaleTarget target, absl::Duration join_timeout,
                     std::function<void(absl::StatusOr<ScaleResult>)> done, bool verify = false, int64_t at_clock = 0);

 private:
  void Loop();
  void Step();
  // Cuts, writes and commits a checkpoint at `clock`; false when it failed (logged).
  bool TakeCheckpoint(int64_t clock, const std::string& reason);
  // Rolls every server back to the latest checkpoint; false to retry later (a server unreachable).
  bool Restore();
  // Fails the dead servers over when every range keeps a copy; false when the job must roll back.
  bool FailOver();
  // Some server is out of service (failed over): checkpoints wait.
  bool Degraded() const;
  // Drives re-replication onto a live out-of-service server; true while one is in progress (nothing else may
  // hold the clocks).
  bool ReReplicate();
  // Ends a re-replication attempt: releases its hold (back to the scheduled cut).
  void EndReReplication();
  // Drives a pending rescale; true while one holds the clocks (nothing else may).
  bool Rescale();
  // Moves the rows and switches every server to `next` (the held cut is scale_cut_).
  // `worker_states` (a worker-count change): every new worker's state, installed with the ClockTable's new size
  // just before the layout is committed.
  absl::StatusOr<ScaleResult> MoveTo(const Partition& next, ScaleTarget target,
                                     std::vector<WorkerState>* worker_states);
  // A worker-count change at the held cut: every new worker's state (PlanEpoch) from the old workers' reported
  // states.
  absl::StatusOr<std::vector<WorkerState>> PlanWorkers(const std::vector<int>& old_of_new,
                                                       const std::vector<int>& removed);
  // BSP: removed `workers` died in `clock`, which every other worker finished: the servers fence them off and
  // apply it without them. False (nothing applied) when some server had applied it with their pushes already.
  absl::StatusOr<bool> CompleteWithout(const std::vector<int>& workers, int64_t clock);
  // Elastic jobs: starts a rescale that removes the members dead for longer than the elastic timeout, when
  // nothing else holds the clocks.
  void RemoveDead();
  // A rollback waiting for a server that stays dead (elastic jobs): the job's layout drops it, and the
  // restore puts its ranges on the others. False when there is nothing to drop (or it cannot be).
  bool DropDeadServers();
  // How long an elastic removal that could not be done waits before it is tried again.
  absl::Duration RemovalRetry() const;
  // The uniform partition over `servers` servers with as many ranges per server and copies as the job's.
  absl::StatusOr<Partition> PartitionOver(int servers) const;
  // `removed` members left the job: the metric and Describe's count.
  void CountRemovals(size_t removed);
  // Rolls the job back to its last checkpoint: a new generation, every wait cancelled; Restore() follows once the
  // servers are alive.
  void StartRollback(const std::string& why);
  // Ends a rescale with `result` (answering Scale's caller) and releases its hold.
  void EndRescale(absl::StatusOr<ScaleResult> result);
  // The next clock the every-N policy cuts at, after `clock` (kNoHold when off).
  int64_t NextScheduledCut(int64_t permitted) const;

  const CheckpointOptions options_;
  JobDescription job_;  // counts and partition: the coordinator thread's, moved by a rescale
  const CheckpointLayout layout_;
  Membership* const membership_;
  ClockTable* const clocks_;
  ShardAdmin* const admin_;
  const std::function<void(absl::Status)> on_fatal_;

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool requested_ ABSL_GUARDED_BY(mu_) = false;
  bool scale_pending_ ABSL_GUARDED_BY(mu_) = false;  // Scale() started one, not yet ended
  bool scale_verify_ ABSL_GUARDED_BY(mu_) = false;
  int64_t scale_at_ ABSL_GUARDED_BY(mu_) = 0;  // the boundary asked for (0: the earliest)
  std::function<void(absl::StatusOr<ScaleResult>)> scale_done_ ABSL_GUARDED_BY(mu_);
  absl::Time scale_deadline_ ABSL_GUARDED_BY(mu_);
  std::vector<WorkerState> worker_states_ ABSL_GUARDED_BY(mu_);  // by rank: the latest reported
  CheckpointStatus status_ ABSL_GUARDED_BY(mu_);

  // Coordinator thread only.
  std::optional<Partition> partition_;  // the job's (set by Start)
  std::optional<CheckpointManifest> resume_from_;
  int64_t cut_ = ClockTable::kNoHold;  // the clock the current hold is for
  int64_t scale_cut_ = ClockTable::kNoHold;   // rescale: the clock it holds the workers at
  absl::Time next_removal_ = absl::InfinitePast();  // elastic jobs: no removal is tried before (after a failure)
  bool relayout_restore_ = false;  // the rollback in progress restores into a new layout (DropDeadServers)
  int64_t removal_rollback_clock_ = -1;  // a removal rolled the job back to this clock's checkpoint (once)
  absl::Time scale_start_;
  int syncing_ = -1;                          // re-replication: the server being synced (-1: none)
  int64_t sync_cut_ = ClockTable::kNoHold;    // the clock it holds the workers at
  uint64_t sync_routing_ = 0;                 // the routing generation that put it back (0: copies not done)
  absl::Time next_sync_attempt_ = absl::InfinitePast();
  absl::Time last_checkpoint_;
  int64_t last_checkpoint_clock_ = -1;
  bool failed_ = false;  // on_fatal ran: do nothing more
  uint64_t rollback_generation_ = 0;  // the generation BeginRollback made
  int64_t finished_clock_ = -1;       // every worker's clock when the job finished (-1: not yet)
  int final_attempts_ = 0;            // final checkpoints tried since the job (last) finished
  absl::Time next_final_attempt_ = absl::InfinitePast();  // after a failed one
  std::thread thread_;
};

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_CHECKPOINT_COORDINATOR_H_
