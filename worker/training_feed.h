// TrainingFeed: the batches a cluster worker trains on, iteration by iteration, and the state (WorkerState) that
// lets the job continue each of them elsewhere — after a rollback, in a replacement, or with another worker
// count. It is the one place that decides a worker's data order: the epoch schedule (worker/epoch_schedule.h,
// with the plan of the last worker-count change), this rank's share of each epoch's lines (common/line_assignment.h), the
// shuffle, and where a worker continuing at clock c resumes its reader (exactly at the saved position mid-epoch,
// or from the start of c's epoch, dropping the iterations before c). The C++ Trainer reads through it on its
// reader thread; the Python package hands its batches to a PyTorch loop (python/kestrel/_kestrel.cc), so both
// kinds of worker train the same lines in the same iterations.
//
// Not thread-safe: one thread calls Next.
#ifndef KESTREL_WORKER_TRAINING_FEED_H_
#define KESTREL_WORKER_TRAINING_FEED_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/checkpoint.pb.h"
#include "proto/job.pb.h"
#include "worker/data/batch.h"
#include "worker/batch_reader.h"
#include "worker/data/schema.h"
#include "worker/epoch_schedule.h"

namespace kestrel {

struct TrainingFeedOptions {
  // The job, with defaults applied (JobWithDefaults, worker/trainer.h).
  JobConfig job;
  // The job's data format, resolved (Schema::Resolve). Required.
  std::shared_ptr<const Schema> schema;
  // This worker's rank and the job's worker count. Default: 0 of 1.
  int rank = 0;
  int num_workers = 1;
  // Iterations already done, and the state the job kept for this rank at that clock (absent reader: unknown).
  int64_t start_clock = 0;
  WorkerState start_state;
};

class TrainingFeed {
 public:
  // Counts the training files' lines and plans the epochs. FailedPrecondition when the data holds no batch;
  // InvalidArgument for a plan that does not fit the worker count.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TrainingFeed>> Open(TrainingFeedOptions options);

  // The clock the job ends at (iterations in all, over every epoch).
  int64_t total() const { return schedule_.total(); }
  // Iterations per epoch of the job's worker count.
  int64_t per_epoch() const { return per_epoch_; }
  // The epoch iteration `clock` belongs to.
  EpochSchedule::Epoch EpochAt(int64_t clock) const { return schedule_.At(clock); }

  // Fills `batch` with the next iteration's examples from start_clock on (those before it are read and
  // dropped): `clock` its iteration, `after` the reader right after it, `lines` (optional) its global line
  // indices. False once every iteration up to total() was returned. A share shorter than an epoch's iterations
  // gives short batches, then empty ones. DataLoss when the files changed under the count.
  [[nodiscard]] absl::StatusOr<bool> Next(Batch* batch, int64_t* clock, ReaderPosition* after, std::vector<uint64_t>* lines);

  // The state after iteration clock - 1 with the reader at `after`: what Advance(clock) reports.
  WorkerState StateOf(int64_t clock, const ReaderPosition& after) const;

 private:
  explicit TrainingFeed(TrainingFeedOptions options) : options_(std::move(options)) {}
  [[nodiscard]] absl::Status Plan();
  // Whether epoch `epoch` is read by the plan's shares (a worker-count change in its middle).
  bool Shared(const EpochSchedule::Epoch& epoch) const;
  // This worker's lines of `epoch`.
  LineAssignment ShareOf(const EpochSchedule::Epoch& epoch) const;
  // Opens the reader of `epoch` at `at` (or at the data's beginning).
  [[nodiscard]] absl::Status OpenReader(const EpochSchedule::Epoch& epoch, const ReaderPosition& at);

  const TrainingFeedOptions options_;
  uint64_t total_lines_ = 0;  // the training files' data lines
  int64_t per_epoch_ = 1;
  std::optional<EpochPlan> plan_;  // the last worker-count change's (start_state.plan)
  EpochSchedule schedule_;
  std::unique_ptr<BatchReader> reader_;
  uint64_t unread_ = 0;  // lines of this worker's share of the epoch that the reader has not returned yet
  int64_t first_ = 0;    // the first iteration read (its epoch's start, or start_clock when resumed exactly)
  int64_t next_ = 0;     // the iteration Next reads
};

// The iterations a job of `num_workers` workers runs without a worker-count change (every epoch; max_steps caps
// it). `job` with defaults applied.
[[nodiscard]] absl::StatusOr<int64_t> PlainIterations(const JobConfig& job, int num_workers);
// Its epochs.
[[nodiscard]] absl::StatusOr<EpochSchedule> PlainSchedule(const JobConfig& job, int num_workers);

}  // namespace kestrel

#endif  // KESTREL_WORKER_TRAINING_FEED_H_
