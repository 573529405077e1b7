// A training feed that follows a directory: files taken in name order as they arrive, every line once over the
// ranks, the end where the stop file says, resuming from a reported state mid-file and at a file's end, a file
// out of name order refused, and a wait ended by Cancel.
#include "worker/train_stream.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/training_feed.h"
#include "worker/training_feed_testing.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

// A directory (emptied) for a stream.
std::string StreamDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Writes `lines` Criteo examples numbered first.. (integer feature 0 = the number) as `name` in `dir`, written
// under a hidden name and renamed in, as a producer does.
void AddFile(const std::string& dir, const std::string& name, int first, int lines) {
  const std::string hidden = dir + "/." + name;
  {
    std::ofstream out(hidden);
    WriteCriteoExamples(out, first, lines);
  }
  fs::rename(hidden, dir + "/" + name);
}

JobConfig StreamJob(const std::string& dir, int batch) {
  JobConfig job = CriteoJob("", batch, 1, 0);
  job.mutable_data()->clear_train_files();
  job.mutable_data()->set_train_stream(dir);
  job.mutable_data()->set_stream_poll_ms(5);
  return job;
}

TEST(TrainStreamTest, FilesAreTrainedInNameOrderAsTheyArriveEachLineOnceUntilTheStopFile) {
  const std::string dir = StreamDir("stream_arrive");
  AddFile(dir, "part-1", 0, 25);
  AddFile(dir, "part-2", 100, 7);
  const JobConfig job = StreamJob(dir, 10);
  std::unique_ptr<TrainingFeed> feeds[2] = {OpenFeed(job, 0, 2, 0, WorkerState()), OpenFeed(job, 1, 2, 0, WorkerState())};
  ASSERT_NE(feeds[0], nullptr);
  ASSERT_NE(feeds[1], nullptr);
  EXPECT_EQ(feeds[0]->total(), TrainingFeed::kStreamOpen);
  FeedRead reads[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) ranks.emplace_back([&, r] { reads[r] = ReadFeed(feeds[r].get()); });
  // The readers wait at the end of part-2 until part-3 arrives; the stop file then names it the last.
  AddFile(dir, "_ignored", 900, 3);
  AddFile(dir, "part-3", 200, 13);
  ASSERT_TRUE(TrainStream::Stop(dir).ok());
  AddFile(dir, "part-4", 300, 5);  // after the stop: not trained
  for (std::thread& t : ranks) t.join();
  std::multiset<int> seen;
  for (const FeedRead& read : reads) {
    ASSERT_TRUE(read.status.ok()) << read.status;
    // part-1: shares of 13 and 12 -> 2 iterations; part-2: 4 and 3 -> 1; part-3: 7 and 6 -> 1.
    ASSERT_EQ(read.examples.size(), 4u);
    for (const auto& [clock, lines] : read.examples) seen.insert(lines.begin(), lines.end());
  }
  EXPECT_EQ(feeds[0]->total(), 4);
  EXPECT_EQ(feeds[1]->total(), 4);
  std::multiset<int> want;
  for (int i = 0; i < 25; ++i) want.insert(i);
  for (int i = 100; i < 107; ++i) want.insert(i);
  for (int i = 200; i < 213; ++i) want.insert(i);
  EXPECT_EQ(seen, want) << "every line of the three files once, none of the ignored file or the late one";
  EXPECT_EQ(reads[0].state_after.at(4).stream_file(), "part-3");
  EXPECT_EQ(reads[0].state_after.at(4).epoch(), 2);
}

TEST(TrainStreamTest, ResumingFromAReportedStateContinuesExactlyMidFileAndAtAFilesEnd) {
  const std::string dir = StreamDir("stream_resume");
  AddFile(dir, "a", 0, 25);  // 3 iterations of 10
  AddFile(dir, "b", 100, 17);  // 2
  AddFile(dir, "c", 200, 9);  // 1
  ASSERT_TRUE(TrainStream::Stop(dir).ok());
  const JobConfig job = StreamJob(dir, 10);
  const FeedRead through = ReadFeed(OpenFeed(job, 0, 1, 0, WorkerState()).get());
  ASSERT_TRUE(through.status.ok()) << through.status;
  ASSERT_EQ(through.examples.size(), 6u);
  for (int64_t c : {1, 3, 4, 5}) {  // mid a, a's end, mid b, b's end
    std::unique_ptr<TrainingFeed> resumed = OpenFeed(job, 0, 1, c, through.state_after.at(c));
    ASSERT_NE(resumed, nullptr) << c;
    const FeedRead rest = ReadFeed(resumed.get());
    ASSERT_TRUE(rest.status.ok()) << rest.status;
    std::map<int64_t, std::vector<int>> want(through.examples.find(c), through.examples.end());
    EXPECT_EQ(rest.examples, want) << "resumed at " << c;
    EXPECT_EQ(resumed->total(), 6);
  }
  // Without a reader position: the files before are counted again and the file re-read from its start.
  std::unique_ptr<TrainingFeed> counted = OpenFeed(job, 0, 1, 4, WorkerState());
  const FeedRead rest = ReadFeed(counted.get());
  std::map<int64_t, std::vector<int>> want(through.examples.find(4), through.examples.end());
  EXPECT_EQ(rest.examples, want);
}

TEST(TrainStreamTest, AFileThatArrivedOutOfNameOrderIsRefusedOnResume) {
  const std::string dir = StreamDir("stream_order");
  AddFile(dir, "b", 0, 25);
  AddFile(dir, "c", 100, 25);
  const JobConfig job = StreamJob(dir, 10);
  ASSERT_TRUE(TrainStream::Stop(dir).ok());
  const FeedRead through = ReadFeed(OpenFeed(job, 0, 1, 0, WorkerState()).get());
  ASSERT_EQ(through.examples.size(), 6u);
  AddFile(dir, "a", 500, 25);  // sorts before b: every index shifts
  TrainingFeedOptions options;
  options.job = job;
  options.schema = ResolveSchema(job);
  options.start_clock = 4;
  options.start_state = through.state_after.at(4);
  const absl::StatusOr<std::unique_ptr<TrainingFeed>> resumed = TrainingFeed::Open(options);
  EXPECT_EQ(resumed.status().code(), absl::StatusCode::kFailedPrecondition) << resumed.status();
  EXPECT_NE(resumed.status().message().find("out of name order"), absl::string_view::npos) << resumed.status();
}

TEST(TrainStreamTest, CancelEndsAWaitForTheNextFile) {
  const std::string dir = StreamDir("stream_cancel");
  AddFile(dir, "a", 0, 5);
  std::unique_ptr<TrainingFeed> feed = OpenFeed(StreamJob(dir, 10), 0, 1, 0, WorkerState());
  FeedRead read;
  std::thread reader([&] { read = ReadFeed(feed.get()); });
  feed->Cancel();
  reader.join();
  EXPECT_EQ(read.status.code(), absl::StatusCode::kCancelled) << read.status;
}

}  // namespace
}  // namespace kestrel
