// TrainingFeed: the batches a cluster worker trains on, iteration by iteration, and the state (WorkerState) that
// lets the job continue each of them elsewhere — after a rollback, in a replacement, or with another worker
// count. It is the one place that decides a worker's data order: the epoch schedule (worker/epoch_schedule.h,
// with the plan of the last worker-count change), this rank's share of each epoch's lines (common/line_assignment.h), the
// shuffle, and where a worker continuing at clock c resumes its reader (exactly at the saved position mid-epoch,
// or from the start of c's epoch, dropping the iterations before c). The C++ Trainer reads through it on its
// reader thread; the Python package hands its batches to a PyTorch loop (python/kestrel/_kestrel.cc), so both
// kinds of worker train the same lines in the same iterations.
//
// A job that follows a directory (DataConfig.train_stream, worker/train_stream.h) reads it file by file: epoch e is
// the directory's e-th file in name order, its iterations as many as this worker count's largest share of that
// file has batches, known once the file is there. Next waits for the next file at an epoch's end; the stream
// ends (Next returns false, total() becomes the end clock) when the stop file names the last one. Its state names
// the file (WorkerState.stream_file), so a worker resumed at clock c continues exactly there.
//
// One thread calls Next (and Cancel may be called from any thread); total(), AtKnownEnd(), EpochAt() and StateOf()
// may be called from another while it runs.
#ifndef KESTREL_WORKER_TRAINING_FEED_H_
#define KESTREL_WORKER_TRAINING_FEED_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/checkpoint.pb.h"
#include "proto/job.pb.h"
#include "worker/data/batch.h"
#include "worker/batch_reader.h"
#include "worker/data/schema.h"
#include "worker/epoch_schedule.h"
#include "worker/train_stream.h"

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

  // A stream's total() until it ended.
  static constexpr int64_t kStreamOpen = INT64_MAX;

  // The clock the job ends at (iterations in all, over every epoch); a stream's: kStreamOpen until Next found its
  // end.
  int64_t total() const { return stream_ == nullptr ? schedule_.total() : stream_end_.load(); }
  // Whether the job follows a directory.
  bool streaming() const { return stream_ != nullptr; }
  // Iterations per epoch of the job's worker count (a stream: of the epoch read last).
  int64_t per_epoch() const { return per_epoch_; }
  // The epoch iteration `clock` belongs to (a stream: one whose file was found; a clock past them maps to the
  // last).
  EpochSchedule::Epoch EpochAt(int64_t clock) const;
  // A stream: whether iteration `clock` lies past every file found so far, so that its batch waits for a file
  // to arrive (the trainer then pushes iteration clock - 1 on its own, not with that batch). False otherwise.
  bool AtKnownEnd(int64_t clock) const { return stream_ != nullptr && clock >= known_end_.load(); }
  // Ends a wait for the next file (Next then fails with Cancelled). Thread-safe.
  void Cancel() { cancelled_.store(true); }

  // Fills `batch` with the next iteration's examples from start_clock on (those before it are read and
  // dropped): `clock` its iteration, `after` the reader right after it, `lines` (optional) its global line
  // indices. False once every iteration up to total() was returned. A share shorter than an epoch's iterations
  // gives short batches, then empty ones. DataLoss when the files changed under the count.
  [[nodiscard]] absl::StatusOr<bool> Next(Batch* batch, int64_t* clock, ReaderPosition* after, std::vector<uint64_t>* lines);

  // The state after iteration clock - 1 with the reader at `after`: what Advance(clock) reports. (A stream's
  // names the epoch of iteration clock - 1, whose end tells a resumed worker whether clock starts the next file.)
  WorkerState StateOf(int64_t clock, const ReaderPosition& after) const;

 private:
  // One file of a stream: its epoch, its iterations [start, end), its path and data lines.
  struct Segment {
    int64_t index = 0;
    int64_t start = 0;
    int64_t end = 0;
    std::string file;
    uint64_t lines = 0;
  };
  // Segments kept for EpochAt and StateOf (the trainer asks about the last few only).
  static constexpr size_t kKeptSegments = 16;

  explicit TrainingFeed(TrainingFeedOptions options) : options_(std::move(options)) {}
  [[nodiscard]] absl::Status Plan();
  // A stream's Plan and Next.
  [[nodiscard]] absl::Status PlanStream();
  [[nodiscard]] absl::StatusOr<bool> NextInStream(Batch* batch, int64_t* clock, ReaderPosition* after,
                                                  std::vector<uint64_t>* lines);
  // Waits for file `index` of the stream and makes it the segment starting at `start` (false: the stream ended
  // before it); opens its reader at `at`. `expected`: the file's name the state recorded ("" if none).
  [[nodiscard]] absl::StatusOr<bool> OpenSegment(int64_t index, int64_t start, const ReaderPosition& at,
                                                 const std::string& expected);
  // Fills `batch` from the reader (an epoch's next batch), checking the share's count.
  [[nodiscard]] absl::Status FillBatch(int64_t it, int64_t epoch, Batch* batch, std::vector<uint64_t>* lines);
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
  // Streams only.
  std::unique_ptr<TrainStream> stream_;
  Segment current_;  // the segment being read (Next's thread)
  bool have_current_ = false;
  std::atomic<int64_t> stream_end_{kStreamOpen};
  std::atomic<int64_t> known_end_{0};  // the end of the last segment found
  std::atomic<bool> cancelled_{false};
  mutable absl::Mutex segments_mu_;
  std::vector<Segment> segments_ ABSL_GUARDED_BY(segments_mu_);  // the last kKeptSegments found, ascending
};

// The iterations a job of `num_workers` workers runs without a worker-count change (every epoch; max_steps caps
// it). `job` with defaults applied.
[[nodiscard]] absl::StatusOr<int64_t> PlainIterations(const JobConfig& job, int num_workers);
// Its epochs.
[[nodiscard]] absl::StatusOr<EpochSchedule> PlainSchedule(const JobConfig& job, int num_workers);

}  // namespace kestrel

#endif  // KESTREL_WORKER_TRAINING_FEED_H_
