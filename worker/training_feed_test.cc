// TrainingFeed: the batches of a rank's iterations, and resuming them from the state a checkpoint keeps — the
// same batches whether the feed runs through or a new one starts at clock c from the state reported at c, mid
// epoch and at an epoch's start, with and without shuffling; the two ranks' shares split every line of an epoch.
#include "worker/training_feed.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/model.h"
#include "worker/trainer.h"
#include "worker/training_feed_testing.h"

namespace kestrel {
namespace {

class TrainingFeedTest : public ::testing::TestWithParam<int> {};

TEST_P(TrainingFeedTest, ResumingFromAReportedStateGivesTheSameBatches) {
  const int shuffle = GetParam();
  const JobConfig job = CriteoJob(WriteCriteoFile(absl::StrCat("feed_", shuffle, ".tsv"), 103), 10, 2, shuffle);
  for (int rank : {0, 1}) {
    std::unique_ptr<TrainingFeed> through = OpenFeed(job, rank, 2, 0, WorkerState());
    ASSERT_NE(through, nullptr);
    EXPECT_EQ(through->total(), 2 * 6) << "ceil(52 / 10) iterations per epoch, 2 epochs";
    const FeedRead all = ReadFeed(through.get());
    ASSERT_TRUE(all.status.ok()) << all.status;
    ASSERT_EQ(all.examples.size(), 12u);
    EXPECT_EQ(all.examples.begin()->first, 0);
    // Mid-epoch (3), at the second epoch's start (6) and mid second epoch (8).
    for (int64_t c : {3, 6, 8}) {
      std::unique_ptr<TrainingFeed> resumed = OpenFeed(job, rank, 2, c, all.state_after.at(c));
      ASSERT_NE(resumed, nullptr);
      const FeedRead rest = ReadFeed(resumed.get());
      ASSERT_TRUE(rest.status.ok()) << rest.status;
      ASSERT_EQ(rest.examples.size(), static_cast<size_t>(12 - c)) << "rank " << rank << " from " << c;
      for (const auto& [clock, lines] : rest.examples) {
        EXPECT_EQ(lines, all.examples.at(clock)) << "rank " << rank << " resumed at " << c << ", clock " << clock;
        EXPECT_EQ(rest.state_after.at(clock + 1).DebugString(), all.state_after.at(clock + 1).DebugString());
      }
      // A replacement with no reader state re-reads its epoch and drops the iterations before c.
      std::unique_ptr<TrainingFeed> fresh = OpenFeed(job, rank, 2, c, WorkerState());
      const FeedRead again = ReadFeed(fresh.get());
      EXPECT_TRUE(again.status.ok()) << again.status;
      EXPECT_EQ(again.examples, rest.examples) << "rank " << rank << " from " << c << " without a reader state";
    }
  }
}

TEST_P(TrainingFeedTest, TheRanksShareEveryLineOfAnEpochOnce) {
  const int shuffle = GetParam();
  const JobConfig job = CriteoJob(WriteCriteoFile(absl::StrCat("share_", shuffle, ".tsv"), 103), 10, 1, shuffle);
  std::multiset<int> seen;
  for (int rank : {0, 1}) {
    std::unique_ptr<TrainingFeed> feed = OpenFeed(job, rank, 2, 0, WorkerState());
    const FeedRead read = ReadFeed(feed.get());
    EXPECT_TRUE(read.status.ok()) << read.status;
    for (const auto& [clock, lines] : read.examples) seen.insert(lines.begin(), lines.end());
  }
  ASSERT_EQ(seen.size(), 103u);
  for (int i = 0; i < 103; ++i) EXPECT_EQ(seen.count(i), 1u) << "line " << i;
}

INSTANTIATE_TEST_SUITE_P(FileOrderAndShuffled, TrainingFeedTest, ::testing::Values(0, 16));

TEST(TrainingFeedOptionsTest, ASchemaIsRequired) {
  TrainingFeedOptions options;
  options.job = CriteoJob(WriteCriteoFile("noschema.tsv", 10), 5, 1, 0);
  EXPECT_EQ(TrainingFeed::Open(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kestrel
