#include "worker/batch_pipeline.h"

#include <utility>

namespace kestrel {

bool BatchQueue::Push(std::unique_ptr<StepData> item) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](BatchQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
        return q->closed_ || q->items_.size() < q->capacity_;
      },
      this));
  if (closed_) return false;
  items_.push_back(std::move(item));
  return true;
}

absl::StatusOr<std::unique_ptr<StepData>> BatchQueue::Pop() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](BatchQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
        return !q->items_.empty() || !q->status_.ok() || q->closed_;
      },
      this));
  if (!items_.empty()) {
    std::unique_ptr<StepData> item = std::move(items_.front());
    items_.pop_front();
    return item;
  }
  if (!status_.ok()) return status_;
  return absl::CancelledError("the batch queue was closed");
}

void BatchQueue::Fail(absl::Status status) {
  absl::MutexLock lock(&mu_);
  status_ = std::move(status);
}

void BatchQueue::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

std::unique_ptr<StepData> BatchQueue::TakeFree(Backend* backend) {
  absl::MutexLock lock(&mu_);
  if (free_.empty()) return std::make_unique<StepData>(backend);
  std::unique_ptr<StepData> item = std::move(free_.back());
  free_.pop_back();
  return item;
}

void BatchQueue::Recycle(std::unique_ptr<StepData> item) {
  absl::MutexLock lock(&mu_);
  free_.push_back(std::move(item));
}

BatchPipeline::BatchPipeline(TrainingFeed* feed, const Partition& partition, std::shared_ptr<const Schema> schema,
                             bool log_lines, Backend* backend, PhaseClock* phases)
    : feed_(feed),
      partition_(partition),
      schema_(std::move(schema)),
      log_lines_(log_lines),
      backend_(backend),
      phases_(phases),
      reader_([this] { ReadBatches(); }),
      preparer_([this] { PrepareBatches(); }) {}

BatchPipeline::~BatchPipeline() { Stop(); }

void BatchPipeline::Stop() {
  feed_->Cancel();  // a reader waiting for a stream's next file
  filled_.Close();
  prepared_.Close();
  if (reader_.joinable()) reader_.join();
  if (preparer_.joinable()) preparer_.join();
}

void BatchPipeline::ReadBatches() {
  if (absl::Status status = ReadBatchesUntilError(); !status.ok()) {
    filled_.Fail(std::move(status));
  } else {
    filled_.Close();
  }
}

absl::Status BatchPipeline::ReadBatchesUntilError() {
  while (true) {
    std::unique_ptr<StepData> step = prepared_.TakeFree(backend_);
    absl::StatusOr<bool> more;
    {
      PhaseClock::Scope reading(phases_, PhaseClock::kRead);
      std::vector<uint64_t>* lines = log_lines_ ? &step->lines : nullptr;
      int64_t clock = 0;
      more = feed_->Next(&step->batch.batch, &clock, &step->after, lines);
    }
    if (!more.ok()) return more.status();
    if (!*more) return absl::OkStatus();
    if (!filled_.Push(std::move(step))) return absl::OkStatus();  // stopped
  }
}

void BatchPipeline::PrepareBatches() {
  while (true) {
    absl::StatusOr<std::unique_ptr<StepData>> step = filled_.Pop();
    if (!step.ok()) {
      if (absl::IsCancelled(step.status())) {
        prepared_.Close();  // all read (a Pop past the end answers Cancelled: a stream's end), or stopped
      } else {
        prepared_.Fail(step.status());
      }
      return;
    }
    {
      PhaseClock::Scope batching(phases_, PhaseClock::kBatch);
      (*step)->batch.Prepare(partition_, schema_->field_tables(), schema_->num_tables());
    }
    if (!prepared_.Push(std::move(step).value())) return;
  }
}

}  // namespace kestrel
