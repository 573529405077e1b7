// BatchPipeline: the batches on their way to the training loop. A reader thread reads and parses the next
// iterations' lines (TrainingFeed), a preparer thread key-batches them (PreparedBatch::Prepare: dedup, sort,
// segments), both while the current iteration computes; the training loop takes them in iteration order and gives
// them back once trained, so their buffers (pinned when the backend is CUDA) are filled again. Also the buffers
// of one iteration: StepData (a batch and the rows pulled for it) and GradBuffers (its gradients).
#ifndef KESTREL_WORKER_BATCH_PIPELINE_H_
#define KESTREL_WORKER_BATCH_PIPELINE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/partition.h"
#include "worker/compute/backend.h"
#include "worker/data/record_reader.h"
#include "worker/data/schema.h"
#include "worker/embedding_tables.h"
#include "worker/phase_clock.h"
#include "worker/prepared_batch.h"
#include "worker/ps_client.h"
#include "worker/training_feed.h"

namespace kestrel {

// One step's gradients, as Model::Step writes them and Push sends them (pinned when the backend is CUDA).
struct GradBuffers {
  explicit GradBuffers(Backend* backend) : wide(backend), emb(backend), dense(backend) {}
  HostArray<float> wide, emb, dense;
  mutable EmbeddingTables::Staging staging;  // the per-table gradient rows of a push
};

// A batch and the parameters pulled for it.
struct StepData {
  explicit StepData(Backend* backend) : wide(backend), emb(backend), dense(backend) {}
  PreparedBatch batch;
  HostArray<float> wide, emb, dense;  // pinned when the backend is CUDA
  EmbeddingTables::Staging staging;   // the per-table rows of a pull
  ReaderPosition after;               // the reader right after this batch
  std::vector<uint64_t> lines;        // the batch's global line indices (with TrainerOptions::line_log)
  CallClock read;                     // what the pulls of these rows carry
};

// A bounded queue of batches between two of the reader, preparer and training threads, and the free list that
// recycles them (with their pinned buffers) once trained. Owns the batches it holds. Thread-safe.
class BatchQueue {
 public:
  explicit BatchQueue(size_t capacity) : capacity_(capacity) {}
  // Waits for room. False when the queue was closed.
  bool Push(std::unique_ptr<StepData> item);
  // The next item, or the error that ended the reader (Fail); Cancelled once closed and empty.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<StepData>> Pop();
  void Fail(absl::Status status);
  void Close();
  // A used StepData to fill again (its pinned buffers are reused), or a new one.
  std::unique_ptr<StepData> TakeFree(Backend* backend);
  void Recycle(std::unique_ptr<StepData> item);

 private:
  const size_t capacity_;
  absl::Mutex mu_;
  std::deque<std::unique_ptr<StepData>> items_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<StepData>> free_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// The reader and preparer threads and the queues between them and the training loop. The reader stops at the
// feed's end or its first error (which Pop then returns, after the batches before it); Stop() ends both threads.
// The training loop takes exactly the feed's iterations: past the last batch, Pop waits until Stop().
// Thread-safe: Pop and Recycle may run on the training loop's threads concurrently; Stop and the destructor on
// the owner's. The feed, partition, backend and phase clock must outlive it; while it runs, only its reader calls
// feed->Next.
class BatchPipeline {
 public:
  // Starts the threads. The batches are key-batched for `partition` and `schema`'s tables; with `log_lines` each
  // carries its global line indices (StepData::lines).
  BatchPipeline(TrainingFeed* feed, const Partition& partition, std::shared_ptr<const Schema> schema,
                bool log_lines, Backend* backend, PhaseClock* phases);
  BatchPipeline(const BatchPipeline&) = delete;
  BatchPipeline& operator=(const BatchPipeline&) = delete;
  // Stop().
  ~BatchPipeline();

  // The next prepared batch, in iteration order; the error that ended the reader or preparer; Cancelled after
  // Stop().
  [[nodiscard]] absl::StatusOr<std::unique_ptr<StepData>> Pop() { return prepared_.Pop(); }
  // Gives a batch back once trained, for the reader to fill again.
  void Recycle(std::unique_ptr<StepData> step) { prepared_.Recycle(std::move(step)); }
  // Closes both queues (a waiting Pop returns Cancelled) and joins the threads. Idempotent.
  void Stop();

 private:
  // The reader thread: reads the batches of the feed's iterations into filled_ (the preparer thread prepares
  // them), then closes it; an error fails it instead.
  void ReadBatches();
  // ReadBatches' loop; an error ends it. OK also when filled_ was closed under it.
  [[nodiscard]] absl::Status ReadBatchesUntilError();
  // The preparer thread: key-batches what the reader filled, into prepared_, in order.
  void PrepareBatches();

  TrainingFeed* const feed_;  // the batches of this worker's iterations; Next called by the reader thread only
  const Partition& partition_;
  const std::shared_ptr<const Schema> schema_;
  const bool log_lines_;
  Backend* const backend_;
  PhaseClock* const phases_;
  BatchQueue filled_{2};    // read, not yet prepared: reader thread -> preparer thread
  BatchQueue prepared_{3};  // prepared: preparer thread -> training loop; holds the free list
  std::thread reader_;
  std::thread preparer_;
};

// Stops `pipeline` (null: none) when destroyed: a training loop's early return ends the pipeline's threads.
struct PipelineStop {
  BatchPipeline* pipeline = nullptr;
  ~PipelineStop() {
    if (pipeline != nullptr) pipeline->Stop();
  }
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_BATCH_PIPELINE_H_
