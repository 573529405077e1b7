#include "common/line_assignment.h"

#include <algorithm>
#include <random>

#include "common/limits.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

// Workers reading one epoch of `lines` lines through their assignments, counting how often each line is read.
struct EpochReads {
  explicit EpochReads(uint64_t lines, int count) : reads(lines, 0), consumed(count, 0) {
    for (int w = 0; w < count; ++w) shards.push_back(PlainAssignment(w, count));
  }
  // Worker `w` reads its next `n` lines (those in the epoch).
  void Read(int w, uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t line = shards[w].Line(consumed[w]);
      if (line >= reads.size()) return;
      ++reads[line];
      ++consumed[w];
    }
  }
  // Every worker reads about `batch` lines (a BSP clock with some skew).
  void Step(std::mt19937& rng) {
    const uint64_t batch = std::uniform_int_distribution<uint64_t>(0, 900)(rng);
    for (size_t w = 0; w < shards.size(); ++w) {
      Read(static_cast<int>(w), batch + std::uniform_int_distribution<uint64_t>(0, 30)(rng));
    }
  }
  // The new assignments take over; each worker starts at their beginning.
  void Take(std::vector<LineAssignment> next) {
    shards = std::move(next);
    consumed.assign(shards.size(), 0);
  }
  std::vector<int> reads;
  std::vector<LineAssignment> shards;
  std::vector<uint64_t> consumed;
};

// Random schedules of worker counts and progress: every line of a 20000-line epoch is read exactly once.
TEST(ReshardTest, EveryLineIsReadExactlyOnceAcrossRescales) {
  constexpr uint64_t kLines = 20000;
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    EpochReads epoch(kLines, std::uniform_int_distribution<int>(1, 5)(rng));
    for (int step = 0; step < 4; ++step) {
      epoch.Step(rng);
      const int next = std::uniform_int_distribution<int>(1, 6)(rng);
      absl::StatusOr<std::vector<LineAssignment>> resharded = ReassignLines(epoch.shards, epoch.consumed, next);
      ASSERT_TRUE(resharded.ok()) << resharded.status();
      epoch.Take(*std::move(resharded));
    }
    for (size_t w = 0; w < epoch.shards.size(); ++w) epoch.Read(static_cast<int>(w), kLines);  // to the end
    for (uint64_t line = 0; line < kLines; ++line) {
      ASSERT_EQ(epoch.reads[line], 1) << "trial " << trial << ": line " << line;
    }
  }
}

// The same with workers removed from anywhere in the ranks (elastic jobs) and new ones added after them.
TEST(ReshardTest, EveryLineIsReadExactlyOnceWhenWorkersLeaveFromTheMiddle) {
  constexpr uint64_t kLines = 20000;
  std::mt19937 rng(23);
  for (int trial = 0; trial < 200; ++trial) {
    EpochReads epoch(kLines, std::uniform_int_distribution<int>(2, 6)(rng));
    for (int step = 0; step < 4; ++step) {
      epoch.Step(rng);
      // Drop a random set of ranks (at least one stays), then maybe add new ones after the rest.
      const int count = static_cast<int>(epoch.shards.size());
      std::vector<int> old_of_new;
      for (int w = 0; w < count; ++w) {
        if (std::uniform_int_distribution<int>(0, 2)(rng) != 0) old_of_new.push_back(w);
      }
      if (old_of_new.empty()) old_of_new.push_back(std::uniform_int_distribution<int>(0, count - 1)(rng));
      const int added = std::uniform_int_distribution<int>(0, 2)(rng);
      for (int i = 0; i < added; ++i) old_of_new.push_back(-1);
      absl::StatusOr<std::vector<LineAssignment>> resharded = ReassignLines(epoch.shards, epoch.consumed, old_of_new);
      ASSERT_TRUE(resharded.ok()) << resharded.status();
      epoch.Take(*std::move(resharded));
    }
    for (size_t w = 0; w < epoch.shards.size(); ++w) epoch.Read(static_cast<int>(w), kLines);
    for (uint64_t line = 0; line < kLines; ++line) {
      ASSERT_EQ(epoch.reads[line], 1) << "trial " << trial << ": line " << line;
    }
  }
}

TEST(ReshardTest, AWorkerRemovedFromTheMiddleHandsItsLinesToTheOthers) {
  // 3 workers; worker 1 died one line behind: workers 0 and 2 stay as ranks 0 and 1.
  std::vector<LineAssignment> shards = {PlainAssignment(0, 3), PlainAssignment(1, 3), PlainAssignment(2, 3)};
  const std::vector<uint64_t> consumed = {4, 3, 4};  // next lines: 12, 10, 14 -> watermark 14
  absl::StatusOr<std::vector<LineAssignment>> out = ReassignLines(shards, consumed, std::vector<int>{0, 2});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].watermark, 14u);
  EXPECT_EQ((*out)[0].leftovers, (std::vector<uint64_t>{10, 12}));  // its own 12, and worker 1's 10
  EXPECT_EQ((*out)[1].leftovers, (std::vector<uint64_t>{13}));      // worker 1's 13 (old worker 2 read to 14)
  EXPECT_EQ((*out)[1].index, 1);
  EXPECT_TRUE(absl::IsInvalidArgument(ReassignLines(shards, consumed, std::vector<int>{0, 0}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ReassignLines(shards, consumed, std::vector<int>{0, 3}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ReassignLines(shards, consumed, std::vector<int>{}).status()));
}

TEST(ReshardTest, LeavingWorkersHandTheirUnreadLinesToTheStayingOnes) {
  // 3 workers; worker 2 is behind by one line of its class.
  std::vector<LineAssignment> shards = {PlainAssignment(0, 3), PlainAssignment(1, 3), PlainAssignment(2, 3)};
  const std::vector<uint64_t> consumed = {4, 4, 3};  // next lines: 12, 13, 11 -> watermark 13
  absl::StatusOr<std::vector<LineAssignment>> out = ReassignLines(shards, consumed, 2);
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].watermark, 13u);
  EXPECT_EQ((*out)[0].leftovers, (std::vector<uint64_t>{11, 12}));  // its own 12, and worker 2's 11
  EXPECT_TRUE((*out)[1].leftovers.empty());
  EXPECT_EQ((*out)[1].Line(0), 14u);  // 13 + 1 of 2
  EXPECT_EQ((*out)[0].Line(2), 13u);
}

TEST(ReshardTest, RefusesBadInputAndRunawayLeftovers) {
  std::vector<LineAssignment> shards = {PlainAssignment(0, 2), PlainAssignment(1, 2)};
  EXPECT_TRUE(absl::IsInvalidArgument(ReassignLines(shards, std::vector<uint64_t>{0}, 2).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ReassignLines(shards, std::vector<uint64_t>{0, 0}, 0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      ReassignLines(shards, std::vector<uint64_t>{0, 1000}, 2, /*max_leftovers=*/100).status()));
  LineAssignment bad = PlainAssignment(0, 1);
  bad.leftovers = {5};  // not below the watermark (0)
  EXPECT_TRUE(absl::IsInvalidArgument(ReassignLines({bad}, std::vector<uint64_t>{0}, 1).status()));
}

// A job may have kMaxWorkers workers (common/limits.h): resharding to that many is accepted, one more is not.
TEST(ReshardTest, AcceptsUpToTheJobsWorkerLimit) {
  std::vector<LineAssignment> shards = {PlainAssignment(0, 2), PlainAssignment(1, 2)};
  const std::vector<uint64_t> consumed = {4, 3};  // next lines: 8, 7 -> watermark 8; worker 1's 7 is unread
  absl::StatusOr<std::vector<LineAssignment>> out = ReassignLines(shards, consumed, kMaxWorkers);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), static_cast<size_t>(kMaxWorkers));
  EXPECT_EQ((*out)[1].leftovers, (std::vector<uint64_t>{7}));
  const LineAssignment& last = out->back();
  EXPECT_EQ(last.index, kMaxWorkers - 1);
  EXPECT_EQ(last.count, kMaxWorkers);
  EXPECT_EQ(last.Line(0), 8u + kMaxWorkers - 1);
  std::vector<int> old_of_new(kMaxWorkers, -1);
  old_of_new[0] = 1;  // old worker 1 stays as new worker 0, with its unread line; old worker 0 leaves
  out = ReassignLines(shards, consumed, old_of_new);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->size(), static_cast<size_t>(kMaxWorkers));
  EXPECT_EQ((*out)[0].leftovers, (std::vector<uint64_t>{7}));

  EXPECT_TRUE(absl::IsInvalidArgument(ReassignLines(shards, consumed, kMaxWorkers + 1).status()));
  old_of_new.push_back(-1);
  EXPECT_TRUE(absl::IsInvalidArgument(ReassignLines(shards, consumed, old_of_new).status()));
}

TEST(ReshardTest, ContainsAndCountBelowAgreeWithLine) {
  LineAssignment a;
  a.leftovers = {3, 7, 8};
  a.watermark = 10;
  a.index = 1;
  a.count = 3;
  std::vector<uint64_t> lines;
  for (uint64_t n = 0; n < 20; ++n) lines.push_back(a.Line(n));  // past line 50
  for (uint64_t line = 0; line < 50; ++line) {
    const bool member = std::find(lines.begin(), lines.end(), line) != lines.end();
    EXPECT_EQ(a.Contains(line), member) << line;
    const uint64_t below = std::count_if(lines.begin(), lines.end(), [&](uint64_t l) { return l < line; });
    EXPECT_EQ(a.CountBelow(line), below) << line;
  }
}

}  // namespace
}  // namespace kestrel
