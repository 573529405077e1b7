// Checkpointer: the scheduler's part of global checkpoints. The one place that decides when a checkpoint is
// cut and when it is committed, and that finds the checkpoint a resumed job starts from.
//
// Checkpoint at clock c (every N clocks, at listed clocks, every T seconds, on request, and once when every worker
// is done):
//   1. hold: ClockTable::SetHold(c) stops every worker at the boundary of iteration c; once all clocks are c,
//      every push of iterations < c is acknowledged (and in BSP applied) and no other push is in flight,
//   2. every server cuts its part (ServerAdmin::Checkpoint). Copy-on-write (CheckpointOptions::copy_on_write, the
//      default): each server marks the cut and answers at once, the hold is released, and the servers write their
//      parts (changed rows as of the cut, RocksDB snapshot, checksums) while training goes on; AwaitCheckpoint
//      collects them on a waiter thread. Otherwise the hold lasts until every part is written.
//   3. once every part is written, the manifest (clock, job fingerprint, partition, tables, files with checksums,
//      each worker's reader position at c) is written and LATEST moved: the commit. Old checkpoints beyond `keep`
//      are pruned. The next scheduled cut waits for the commit; final and rescale checkpoints commit before they
//      return, and a rollback abandons a checkpoint still being written.
// If any step fails, nothing is committed; the attempt's directory is deleted by a later prune.
//
// While a server is out of service (failed over, scheduler/recovery.h) no checkpoint is cut (its ranges' only
// written copy would be stale): a scheduled cut is skipped and the hold released, and the final model is settled
// without one.
//
// Resume. With `resume`, Open() reads the latest committed checkpoint and the job begins with a rollback to it
// (Recovery::Resume); a damaged checkpoint is an error (the scheduler exits non-zero, naming the file), never a
// fresh start. Without `resume`, a directory that already holds checkpoints is refused.
//
// Thread safety: Request() may be called from any thread; every other method runs on the job controller's
// thread (scheduler/job_controller.h).
#ifndef KESTREL_SCHEDULER_CHECKPOINTER_H_
#define KESTREL_SCHEDULER_CHECKPOINTER_H_

#include <cstdint>
#include <memory>
#include <vector>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/checkpoint.pb.h"
#include "scheduler/job_context.h"

namespace kestrel {

class Checkpointer {
 public:
  // `ctx` must outlive it.
  explicit Checkpointer(JobContext* ctx);
  ~Checkpointer();  // cancels and joins a waiter still collecting written parts

  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Validates the options and reads the checkpoint to resume from (none: a new job). An error means the
  // scheduler must not start.
  [[nodiscard]] absl::StatusOr<std::optional<CheckpointManifest>> Open();

  // Asks for a checkpoint at the earliest clock every worker can still stop at; returns that clock.
  // FailedPrecondition without a checkpoint directory or when the job is not running.
  [[nodiscard]] absl::StatusOr<int64_t> Request();

  // The job runs: once every worker reached the held cut, cuts the checkpoint there (or skips it while a server
  // is out of service) and holds the workers at the next one.
  void CutScheduled();
  // The job finished: commits the final checkpoint once every worker is at the last clock (a few attempts),
  // then settles the final model (CheckpointStatus::final_model_settled).
  void SettleFinalModel();
  // A rescale changed the worker count at `clock`, where the workers are held: cuts the checkpoint of the new
  // count (kFinalAttempts attempts; copy-on-write, it returns once every server cut it, and the write commits
  // as a scheduled one's does). No-op without a checkpoint directory.
  void CutRescaled(int64_t clock);

  // The job continues from `clock` (a rollback restored it): the next cuts count from there, and the next
  // scheduled one is held.
  void RestartAt(int64_t clock);
  // A rollback: the final checkpoint is tried afresh once the job finishes again.
  void ForgetFinalAttempts();
  // A rollback: a checkpoint still being written is never committed.
  void AbandonPending();

  // The next clock the every-N policy or the listed clocks cut at, after `permitted` (kNoHold when neither).
  int64_t NextScheduledCut(int64_t permitted) const;
  // The clock of the last checkpoint cut or restored (-1: none yet).
  int64_t last_checkpoint_clock() const { return last_checkpoint_clock_; }
  // Every worker's clock when the job finished (-1: not yet).
  int64_t finished_clock() const { return finished_clock_; }

 private:
  // An attempt that committed nothing (`name`: the checkpoint's, or its reason when it was never cut): logged,
  // counted (by the status code of `why`) and kept as the job's last failure (CheckpointStatus).
  void Abandoned(absl::string_view name, int64_t clock, const absl::Status& why);
  // Some server is out of service (failed over): checkpoints wait.
  bool Degraded() const;
  // Whether `clock` is one of CheckpointOptions::at_clocks (its checkpoints are kept past `keep`).
  bool AtListedClock(int64_t clock) const;
  struct Pending;  // a checkpoint cut and not yet committed

  // Commits a pending checkpoint first, then cuts one at `clock` and (`wait`, or without copy-on-write) writes and
  // commits it; without `wait` a copy-on-write checkpoint is pending on return. False when it failed (logged).
  bool TakeCheckpoint(int64_t clock, const std::string& reason, bool wait);
  // Step 2 (see the file comment): true when every server cut its part; the checkpoint is then pending.
  bool Cut(int64_t clock, const std::string& reason);
  // Step 3 for the pending checkpoint (waiting for its parts); false when it failed (logged).
  bool Commit();
  // Commits the pending checkpoint once written (without waiting), and forgets abandoned ones whose waiter ended.
  void Poll();
  // Commits the pending checkpoint, waiting for it.
  void FinishPending();

  JobContext* const ctx_;

  absl::Mutex mu_;
  bool requested_ ABSL_GUARDED_BY(mu_) = false;  // Request() asked for the held cut

  // The controller thread's.
  absl::Time last_checkpoint_;
  int64_t last_checkpoint_clock_ = -1;
  int64_t finished_clock_ = -1;
  int final_attempts_ = 0;                                // final checkpoints tried since the job (last) finished
  absl::Time next_final_attempt_ = absl::InfinitePast();  // after a failed one
  uint64_t last_sequence_ = 0;  // of the last checkpoint this scheduler cut (or tried to)
  std::unique_ptr<Pending> pending_;
  std::vector<std::unique_ptr<Pending>> abandoned_;  // their waiters may still be collecting answers
};

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_CHECKPOINTER_H_
