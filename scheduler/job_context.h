// JobContext: what the job controller's collaborators (scheduler/checkpointer.h, scheduler/recovery.h,
// scheduler/rescaler.h) share about one job: its members, clocks and servers, its description and partition
// (which a rescale moves), the workers' reported states, the status it reports, and who holds the clocks.
#ifndef KESTREL_SCHEDULER_JOB_CONTEXT_H_
#define KESTREL_SCHEDULER_JOB_CONTEXT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/checkpoint_layout.h"
#include "common/partition.h"
#include "proto/checkpoint.pb.h"
#include "scheduler/clock_table.h"
#include "scheduler/job_options.h"
#include "scheduler/membership.h"
#include "scheduler/server_admin.h"

namespace kestrel {

// Tries at the final checkpoint before the workers are let go without it; also the tries at a rescale's
// checkpoint of a new worker count and at its in-place switch.
inline constexpr int kFinalAttempts = 3;

// Owned by the JobController (scheduler/job_controller.h), which hands it to each collaborator; `membership`,
// `clocks` and `admin` must outlive it. Thread safety: `mu` guards the fields the gRPC handlers read (the
// workers' states, the status); every other field belongs to the controller thread once Start() returned.
struct JobContext {
  // Sizes the workers' states to the job's worker count.
  JobContext(CheckpointOptions options, JobDescription job, Membership* membership, ClockTable* clocks,
             ServerAdmin* admin, std::function<void(absl::Status)> on_fatal);

  // The job cannot continue safely: `on_fatal` runs with `status`, and the controller does nothing more.
  void Fail(absl::Status status);
  // How long an elastic removal that could not be done waits before it is tried again.
  absl::Duration RemovalRetry() const;
  // The uniform partition over `servers` servers with as many ranges per server and copies as the job's.
  [[nodiscard]] absl::StatusOr<Partition> PartitionOver(int servers) const;
  // `removed` members left the job: the metric and Describe's count.
  void CountRemovals(size_t removed);

  const CheckpointOptions options;
  const CheckpointLayout layout;  // under options.dir
  Membership* const membership;
  ClockTable* const clocks;
  ServerAdmin* const admin;
  // Runs (on the controller thread) when the job cannot continue safely.
  const std::function<void(absl::Status)> on_fatal;

  mutable absl::Mutex mu;
  std::vector<WorkerState> worker_states ABSL_GUARDED_BY(mu);  // by rank: the latest reported
  CheckpointStatus status ABSL_GUARDED_BY(mu);

  // The controller thread's.
  JobDescription job;                  // counts and partition: moved by a rescale
  std::optional<Partition> partition;  // the job's (set by Start)
  bool failed = false;                 // on_fatal ran: do nothing more
  // Who holds the clocks. A rescale (Rescaler) or a re-replication (Recovery) holds every worker at its own cut
  // while it runs, and nothing else may then; when it ends it puts the scheduled checkpoint's hold back.
  int64_t cut = ClockTable::kNoHold;  // the clock the scheduled checkpoint's hold is for (kNoHold: none)
  int syncing = -1;                   // re-replication: the server being synced (-1: none)
  absl::Time next_removal = absl::InfinitePast();  // elastic jobs: no removal is tried before (after a failure)
};

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_JOB_CONTEXT_H_
