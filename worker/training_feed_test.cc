// TrainingFeed: the batches of a rank's iterations, and resuming them from the state a checkpoint keeps — the
// same batches whether the feed runs through or a new one starts at clock c from the state reported at c, mid
// epoch and at an epoch's start, with and without shuffling; the two ranks' shares split every line of an epoch.
#include "worker/training_feed.h"

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/model.h"
#include "worker/trainer.h"

namespace kestrel {
namespace {

// A Criteo TSV file of `lines` distinct examples: example i has label i % 2 and integer feature 0 = i.
std::string WriteCriteo(const std::string& name, int lines) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream out(path);
  for (int i = 0; i < lines; ++i) {
    out << i % 2 << "\t" << i;
    for (int j = 1; j < 13; ++j) out << "\t" << j;
    for (int f = 0; f < 26; ++f) out << "\t" << absl::StrCat(absl::Hex(i * 26 + f + 16));
    out << "\n";
  }
  return path;
}

JobConfig Job(const std::string& file, int batch, int epochs, int shuffle_buffer) {
  JobConfig job;
  job.mutable_model()->set_type(ModelConfig::DEEPFM);  // an MLP model: the integer features are dense inputs
  job.mutable_data()->set_format(DataConfig::CRITEO);
  job.mutable_data()->add_train_files(file);
  job.mutable_train()->set_batch_size(batch);
  job.mutable_train()->set_epochs(epochs);
  job.mutable_train()->set_shuffle_buffer(shuffle_buffer);
  return JobWithDefaults(job);
}

std::unique_ptr<TrainingFeed> Open(const JobConfig& job, int rank, int workers, int64_t start_clock,
                                   const WorkerState& state) {
  TrainingFeedOptions options;
  options.job = job;
  absl::StatusOr<std::shared_ptr<const Schema>> schema = Schema::Resolve(job.data(), job.model());
  EXPECT_TRUE(schema.ok()) << schema.status();
  options.schema = *schema;
  options.rank = rank;
  options.num_workers = workers;
  options.start_clock = start_clock;
  options.start_state = state;
  absl::StatusOr<std::unique_ptr<TrainingFeed>> feed = TrainingFeed::Open(std::move(options));
  EXPECT_TRUE(feed.ok()) << feed.status();
  return feed.ok() ? *std::move(feed) : nullptr;
}

// Each iteration's examples (their line index, from dense input 0 = log1p(i)) and the state Advance would report
// after it.
struct Iterations {
  std::map<int64_t, std::vector<int>> examples;
  std::map<int64_t, WorkerState> state_after;
};

Iterations ReadAll(TrainingFeed* feed) {
  Iterations out;
  Batch batch;
  int64_t clock = 0;
  ReaderPosition after;
  while (true) {
    absl::StatusOr<bool> more = feed->Next(&batch, &clock, &after, nullptr);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    std::vector<int>& lines = out.examples[clock];
    for (int64_t e = 0; e < batch.size; ++e) {
      lines.push_back(static_cast<int>(std::lround(std::expm1(batch.dense[e * batch.dense_dim]))));
    }
    out.state_after[clock + 1] = feed->StateOf(clock + 1, after);
  }
  return out;
}

class TrainingFeedTest : public ::testing::TestWithParam<int> {};

TEST_P(TrainingFeedTest, ResumingFromAReportedStateGivesTheSameBatches) {
  const int shuffle = GetParam();
  const JobConfig job = Job(WriteCriteo(absl::StrCat("feed_", shuffle, ".tsv"), 103), 10, 2, shuffle);
  for (int rank : {0, 1}) {
    std::unique_ptr<TrainingFeed> through = Open(job, rank, 2, 0, WorkerState());
    ASSERT_NE(through, nullptr);
    EXPECT_EQ(through->total(), 2 * 6) << "ceil(52 / 10) iterations per epoch, 2 epochs";
    const Iterations all = ReadAll(through.get());
    ASSERT_EQ(all.examples.size(), 12u);
    EXPECT_EQ(all.examples.begin()->first, 0);
    // Mid-epoch (3), at the second epoch's start (6) and mid second epoch (8).
    for (int64_t c : {3, 6, 8}) {
      std::unique_ptr<TrainingFeed> resumed = Open(job, rank, 2, c, all.state_after.at(c));
      ASSERT_NE(resumed, nullptr);
      const Iterations rest = ReadAll(resumed.get());
      ASSERT_EQ(rest.examples.size(), static_cast<size_t>(12 - c)) << "rank " << rank << " from " << c;
      for (const auto& [clock, lines] : rest.examples) {
        EXPECT_EQ(lines, all.examples.at(clock)) << "rank " << rank << " resumed at " << c << ", clock " << clock;
        EXPECT_EQ(rest.state_after.at(clock + 1).DebugString(), all.state_after.at(clock + 1).DebugString());
      }
      // A replacement with no reader state re-reads its epoch and drops the iterations before c.
      std::unique_ptr<TrainingFeed> fresh = Open(job, rank, 2, c, WorkerState());
      const Iterations again = ReadAll(fresh.get());
      EXPECT_EQ(again.examples, rest.examples) << "rank " << rank << " from " << c << " without a reader state";
    }
  }
}

TEST_P(TrainingFeedTest, TheRanksShareEveryLineOfAnEpochOnce) {
  const int shuffle = GetParam();
  const JobConfig job = Job(WriteCriteo(absl::StrCat("share_", shuffle, ".tsv"), 103), 10, 1, shuffle);
  std::multiset<int> seen;
  for (int rank : {0, 1}) {
    std::unique_ptr<TrainingFeed> feed = Open(job, rank, 2, 0, WorkerState());
    for (const auto& [clock, lines] : ReadAll(feed.get()).examples) seen.insert(lines.begin(), lines.end());
  }
  ASSERT_EQ(seen.size(), 103u);
  for (int i = 0; i < 103; ++i) EXPECT_EQ(seen.count(i), 1u) << "line " << i;
}

INSTANTIATE_TEST_SUITE_P(FileOrderAndShuffled, TrainingFeedTest, ::testing::Values(0, 16));

TEST(TrainingFeedOptionsTest, ASchemaIsRequired) {
  TrainingFeedOptions options;
  options.job = Job(WriteCriteo("noschema.tsv", 10), 5, 1, 0);
  EXPECT_EQ(TrainingFeed::Open(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kestrel
