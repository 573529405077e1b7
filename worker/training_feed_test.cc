// TrainingFeed: the batches of a rank's iterations, and resuming them from the state a checkpoint keeps — the
// same batches whether the feed runs through or a new one starts at clock c from the state reported at c, mid
// epoch and at an epoch's start, with and without shuffling; the two ranks' shares split every line of an epoch.
#include "worker/training_feed.h"

#include <cmath>
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
  const JobConfig job = CriteoJob(WriteCriteoFile(absl::StrCat("feed_", shuffle, ".tsv"), 103), 10, 2, shuffle);
  for (int rank : {0, 1}) {
    std::unique_ptr<TrainingFeed> through = OpenFeed(job, rank, 2, 0, WorkerState());
    ASSERT_NE(through, nullptr);
    EXPECT_EQ(through->total(), 2 * 6) << "ceil(52 / 10) iterations per epoch, 2 epochs";
    const Iterations all = ReadAll(through.get());
    ASSERT_EQ(all.examples.size(), 12u);
    EXPECT_EQ(all.examples.begin()->first, 0);
    // Mid-epoch (3), at the second epoch's start (6) and mid second epoch (8).
    for (int64_t c : {3, 6, 8}) {
      std::unique_ptr<TrainingFeed> resumed = OpenFeed(job, rank, 2, c, all.state_after.at(c));
      ASSERT_NE(resumed, nullptr);
      const Iterations rest = ReadAll(resumed.get());
      ASSERT_EQ(rest.examples.size(), static_cast<size_t>(12 - c)) << "rank " << rank << " from " << c;
      for (const auto& [clock, lines] : rest.examples) {
        EXPECT_EQ(lines, all.examples.at(clock)) << "rank " << rank << " resumed at " << c << ", clock " << clock;
        EXPECT_EQ(rest.state_after.at(clock + 1).DebugString(), all.state_after.at(clock + 1).DebugString());
      }
      // A replacement with no reader state re-reads its epoch and drops the iterations before c.
      std::unique_ptr<TrainingFeed> fresh = OpenFeed(job, rank, 2, c, WorkerState());
      const Iterations again = ReadAll(fresh.get());
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
    for (const auto& [clock, lines] : ReadAll(feed.get()).examples) seen.insert(lines.begin(), lines.end());
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
