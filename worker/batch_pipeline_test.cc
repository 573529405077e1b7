// BatchQueue and BatchPipeline: the queue hands items over in order, waits for room, ends with the error that
// failed it or Cancelled once closed, and recycles items; the pipeline reads and key-batches a feed's iterations
// in order, with their lines when asked, and stops (a Pop then says Cancelled) while its threads wait.
#include "worker/batch_pipeline.h"

#include <algorithm>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "worker/compute/cpu_backend.h"
#include "worker/phase_clock.h"
#include "worker/training_feed.h"
#include "worker/training_feed_testing.h"

namespace kestrel {
namespace {

std::unique_ptr<StepData> Item(Backend* backend, int64_t size) {
  auto item = std::make_unique<StepData>(backend);
  item->batch.batch.size = size;
  return item;
}

TEST(BatchQueueTest, HandsItemsOverInOrderThenCancelledOnceClosed) {
  auto backend = NewCpuBackend();
  BatchQueue queue(3);
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(queue.Push(Item(backend.get(), i)));
  queue.Close();
  EXPECT_FALSE(queue.Push(Item(backend.get(), 4)));
  for (int i = 1; i <= 3; ++i) {
    absl::StatusOr<std::unique_ptr<StepData>> item = queue.Pop();
    ASSERT_TRUE(item.ok()) << item.status();
    EXPECT_EQ((*item)->batch.batch.size, i);
  }
  EXPECT_TRUE(absl::IsCancelled(queue.Pop().status()));
}

TEST(BatchQueueTest, AFailureComesAfterTheItemsBeforeIt) {
  auto backend = NewCpuBackend();
  BatchQueue queue(2);
  ASSERT_TRUE(queue.Push(Item(backend.get(), 1)));
  queue.Fail(absl::DataLossError("the files changed"));
  EXPECT_TRUE(queue.Pop().ok());
  EXPECT_TRUE(absl::IsDataLoss(queue.Pop().status()));
}

TEST(BatchQueueTest, APushWaitsForRoom) {
  auto backend = NewCpuBackend();
  BatchQueue queue(1);
  ASSERT_TRUE(queue.Push(Item(backend.get(), 1)));
  std::thread producer([&] { EXPECT_TRUE(queue.Push(Item(backend.get(), 2))); });
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ((*queue.Pop())->batch.batch.size, 1);
  EXPECT_EQ((*queue.Pop())->batch.batch.size, 2);
  producer.join();
}

TEST(BatchQueueTest, RecycledItemsAreTakenAgain) {
  auto backend = NewCpuBackend();
  BatchQueue queue(1);
  std::unique_ptr<StepData> item = queue.TakeFree(backend.get());
  StepData* first = item.get();
  queue.Recycle(std::move(item));
  std::unique_ptr<StepData> again = queue.TakeFree(backend.get());
  EXPECT_EQ(again.get(), first);
  std::unique_ptr<StepData> fresh = queue.TakeFree(backend.get());  // the free list is empty again: a new one
  EXPECT_NE(fresh.get(), first);
}

// A pipeline over one epoch of a Criteo file of `lines` lines in batches of `batch`, in file order, key-batched
// for `servers` servers.
struct RunningPipeline {
  RunningPipeline(int lines, int batch, int servers, bool log_lines)
      : backend(NewCpuBackend()),
        job(CriteoJob(WriteCriteoFile(absl::StrCat("pipeline_", lines, ".tsv"), lines), batch, 1, 0)),
        feed(OpenFeed(job, 0, 1, 0, WorkerState())),
        partition(*Partition::Uniform(servers)),
        pipeline(feed.get(), partition, ResolveSchema(job), log_lines, backend.get(), &phases) {}

  std::unique_ptr<Backend> backend;
  JobConfig job;
  std::unique_ptr<TrainingFeed> feed;
  Partition partition;
  PhaseClock phases;
  BatchPipeline pipeline;
};

TEST(BatchPipelineTest, EveryIterationPreparedInOrderWithItsLines) {
  RunningPipeline running(/*lines=*/50, /*batch=*/8, /*servers=*/2, /*log_lines=*/true);
  uint64_t next_line = 0;
  for (int64_t i = 0; i < running.feed->total(); ++i) {
    absl::StatusOr<std::unique_ptr<StepData>> step = running.pipeline.Pop();
    ASSERT_TRUE(step.ok()) << step.status();
    const PreparedBatch& batch = (*step)->batch;
    EXPECT_EQ(batch.batch.size, std::min<int64_t>(8, 50 - 8 * i));
    EXPECT_GT(batch.keys.num_unique(), 0u);  // key-batched
    EXPECT_EQ(batch.keys.num_servers(), 2);
    ASSERT_EQ((*step)->lines.size(), static_cast<size_t>(batch.batch.size));
    for (uint64_t line : (*step)->lines) EXPECT_EQ(line, next_line++);
    running.pipeline.Recycle(*std::move(step));
  }
  EXPECT_EQ(next_line, 50u);
  running.pipeline.Stop();  // past the last batch a Pop would wait for it
  EXPECT_TRUE(absl::IsCancelled(running.pipeline.Pop().status()));
  const PhaseTimes t = running.phases.Get();
  EXPECT_GT(t.read, 0);
  EXPECT_GT(t.batch, 0);
}

TEST(BatchPipelineTest, WithoutALineLogTheBatchesCarryNoLines) {
  RunningPipeline running(/*lines=*/20, /*batch=*/8, /*servers=*/1, /*log_lines=*/false);
  absl::StatusOr<std::unique_ptr<StepData>> step = running.pipeline.Pop();
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_TRUE((*step)->lines.empty());
}

TEST(BatchPipelineTest, StopsWhileItsQueuesAreFull) {
  // Far more batches than the queues hold.
  RunningPipeline running(/*lines=*/400, /*batch=*/4, /*servers=*/1, /*log_lines=*/false);
  ASSERT_TRUE(running.pipeline.Pop().ok());
  absl::SleepFor(absl::Milliseconds(50));  // the reader and preparer fill their queues and wait
  running.pipeline.Stop();
  running.pipeline.Stop();  // idempotent
  absl::StatusOr<std::unique_ptr<StepData>> after = running.pipeline.Pop();
  // Batches prepared before the stop may still be taken; then the queue says it was closed.
  while (after.ok()) after = running.pipeline.Pop();
  EXPECT_TRUE(absl::IsCancelled(after.status()));
}

}  // namespace
}  // namespace kestrel
