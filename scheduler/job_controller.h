// JobController: the scheduler's control loop over one job. One thread looks at the job whenever something
// changed (a clock, a registration, a death) and at least every 50 ms, and decides what holds the workers'
// clocks next. Each concern is a collaborator with one job:
//   - Recovery (scheduler/recovery.h): a dead server is failed over, or the job rolls back to its last
//     checkpoint and restores it; a failed-over server's replacement is re-replicated and put back.
//   - Rescaler (scheduler/rescaler.h): Scale() and the elastic removal of members that did not come back.
//   - Checkpointer (scheduler/checkpointer.h): scheduled, requested, final and rescale checkpoints; resume.
// Each step goes in that order, and the first that holds the clocks ends it: a failover or rollback (a lost
// server's, or one a worker asked for: RequestRollback), the restore, an elastic removal or a rescale, the final checkpoint of a finished job, a re-replication, and last
// the scheduled checkpoint cut. The collaborators share the job's state through a JobContext
// (scheduler/job_context.h), which the controller owns with them.
//
// Thread-safe. The controller runs on its own thread; the other methods are called from gRPC handlers and
// never block on it.
#ifndef KESTREL_SCHEDULER_JOB_CONTROLLER_H_
#define KESTREL_SCHEDULER_JOB_CONTROLLER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/checkpoint.pb.h"
#include "scheduler/checkpointer.h"
#include "scheduler/clock_table.h"
#include "scheduler/job_context.h"
#include "scheduler/job_options.h"
#include "scheduler/membership.h"
#include "scheduler/recovery.h"
#include "scheduler/rescaler.h"
#include "scheduler/server_admin.h"

namespace kestrel {

class JobController {
 public:
  // `membership`, `clocks` and `admin` must outlive it. `on_fatal` runs (on the controller thread) when the job
  // cannot continue safely: a checkpoint to restore is damaged, or a server refuses to restore it.
  JobController(CheckpointOptions options, JobDescription job, Membership* membership, ClockTable* clocks,
                ServerAdmin* admin, std::function<void(absl::Status)> on_fatal);
  ~JobController();

  JobController(const JobController&) = delete;
  JobController& operator=(const JobController&) = delete;

  // Validates the options, reads the checkpoint to resume from (or checks there is none), and starts the
  // controller thread. An error means the scheduler must not start.
  [[nodiscard]] absl::Status Start();
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
  [[nodiscard]] absl::StatusOr<int64_t> Request();

  // A live worker asks for a rollback to the last checkpoint on behalf of the timeline of `generation` (the
  // generation its requests carry). Never blocks: the controller rolls the job back at its next step unless a
  // rollback began since `generation` was issued (that one serves it) or the job finished meanwhile. Requests
  // made before that step join the first. `why` (the requester and its reason) is logged with the rollback.
  void RequestRollback(uint64_t generation, std::string why);

  CheckpointStatus status() const;
  // Steps the controller thread has completed (each looks at the job once and acts on what it sees). Tests wait
  // for it to move past a Wake() to know the controller has seen a change.
  uint64_t steps() const { return steps_.load(std::memory_order_acquire); }

  // Starts a rescale to `target` (Membership::BeginScale's errors); `done` runs once, on the controller thread
  // (or in Stop(), after that thread ended), when it is done or failed (the job unchanged, or rolled back when a
  // removal failed after its fence). The new ranks must register within `join_timeout`. `verify`:
  // read the full table's fingerprint before and after (ScaleResult).
  [[nodiscard]] absl::Status Scale(ScaleTarget target, absl::Duration join_timeout,
                     std::function<void(absl::StatusOr<ScaleResult>)> done, bool verify = false, int64_t at_clock = 0);

 private:
  void Loop();
  void Step();
  // Rolls the job back to its last checkpoint, abandoning a pending rescale first (Recovery::StartRollback).
  void RollBack(const std::string& why);
  // Takes the pending RequestRollback and rolls back for it when it still applies.
  void RollBackIfRequested(JobState state);

  // A rollback a worker asked for (RequestRollback), not yet taken by the controller.
  struct RollbackRequest {
    uint64_t generation = 0;
    std::string why;
  };

  JobContext ctx_;
  Checkpointer checkpointer_;
  Recovery recovery_;
  Rescaler rescaler_;

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<RollbackRequest> rollback_request_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> steps_{0};
  std::thread thread_;
};

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_JOB_CONTROLLER_H_
