// JobController's options and answers (scheduler/job_controller.h): how checkpoints are cut and kept, what the
// manifest records about the job, and what a rescale and the checkpoint status report.
#ifndef KESTREL_SCHEDULER_JOB_OPTIONS_H_
#define KESTREL_SCHEDULER_JOB_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/consistency.h"

namespace kestrel {

struct CheckpointOptions {
  // Checkpoint root (common/checkpoint_layout.h). Default: "" = no checkpoints; a rollback then restarts the
  // job from its beginning.
  std::string dir;
  // Cut a checkpoint every this many clocks (at multiples of it). Default: 0 = off.
  int64_t every_clocks = 0;
  // Also cut a checkpoint at each of these clocks (ascending, > 0, at most kMaxCheckpointAtClocks), and keep
  // those past `keep` (which counts the others): the clocks a job validates at, so the best validation's model
  // stays on disk (`kestrel local` sets them from kestrel_worker --validation_clocks_for). Default: none.
  std::vector<int64_t> at_clocks;
  static constexpr size_t kMaxCheckpointAtClocks = 100000;
  // Cut a checkpoint when this long has passed since the last one. Default: zero = off.
  absl::Duration every = absl::ZeroDuration();
  // Committed checkpoints kept. Default: 3.
  int keep = 3;
  // Start from the latest committed checkpoint in `dir` (a new job when there is none). Default: false.
  bool resume = false;
  // Cut one when every worker has finished. Default: true.
  bool final_checkpoint = true;
  // Copy-on-write cuts (server/shard_store.h): workers are held only while the servers mark the cut, and the
  // rows are written while training goes on; the checkpoint commits once every server wrote its part, and the
  // next scheduled cut waits for that. false: workers are held until every part is written. Default: true.
  bool copy_on_write = true;
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
  ConsistencyPolicy consistency;
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
  uint64_t committed = 0;      // by this scheduler
  uint64_t rollbacks = 0;
  // The job finished and its final model is committed (or there is no final checkpoint to wait for: no
  // --checkpoint_dir, final_checkpoint off, or kFinalAttempts attempts failed). Workers leave only then, so a
  // server lost before it can still be recovered by redoing iterations.
  bool final_model_settled = false;
  uint64_t elastic_removals = 0;  // members removed because they did not come back (elastic jobs)
  uint64_t failed = 0;            // checkpoint attempts abandoned (nothing committed), by this scheduler
  // The last abandoned attempt: "<name> at clock <c>: <why>" ("" = none failed since the last commit).
  std::string last_failure;
  // The job finished and its final checkpoint could not be written: its final model is in no checkpoint.
  bool final_checkpoint_failed = false;
};

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_JOB_OPTIONS_H_
