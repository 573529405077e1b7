#include "server/job_fence.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/limits.h"
#include "common/test_seed.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

TEST(JobFenceTest, ChecksTheJobIdWithoutEchoingEither) {
  JobFence fence("our-job", /*owner=*/3);
  EXPECT_TRUE(fence.Check("our-job", -1, 0).ok());
  const absl::Status other = fence.Check("probe", -1, 0);
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition) << other;
  EXPECT_TRUE(absl::StrContains(other.message(), "shard 3")) << other;
  EXPECT_FALSE(absl::StrContains(other.message(), "probe")) << other;
  EXPECT_FALSE(absl::StrContains(other.message(), "our-job")) << other;
  EXPECT_EQ(fence.Check("our-job", kMaxWorkers, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fence.Check("probe", kMaxWorkers, 0).code(), absl::StatusCode::kInvalidArgument)
      << "the rank is checked first";
}

TEST(JobFenceTest, WorkersAreUncheckedUntilTheSchedulersView) {
  JobFence fence("job", 0);
  EXPECT_TRUE(fence.Check("job", 5, 0).ok());
  EXPECT_TRUE(fence.Check("job", 5, 77).ok());
  fence.SetView(3, {1, 3});
  EXPECT_EQ(fence.Check("job", 1, 0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fence.Check("job", -1, 0).ok()) << "tools carry no generation";
}

TEST(JobFenceTest, GenerationsMustMatchTheViewExactly) {
  JobFence fence("job", 1);
  int asked = 0;
  fence.SetListener([&asked] { ++asked; });
  fence.SetView(5, {1, 5});
  EXPECT_TRUE(fence.Check("job", 0, 1).ok());
  EXPECT_TRUE(fence.Check("job", 1, 5).ok());
  const absl::Status zombie = fence.Check("job", 1, 4);
  EXPECT_EQ(zombie.code(), absl::StatusCode::kFailedPrecondition) << zombie;
  EXPECT_TRUE(absl::StrContains(zombie.message(), "superseded")) << zombie;
  EXPECT_EQ(asked, 0) << "an older generation is not news";
  const absl::Status ahead = fence.Check("job", 1, 6);
  EXPECT_EQ(ahead.code(), absl::StatusCode::kUnavailable) << ahead;
  EXPECT_TRUE(absl::StrContains(ahead.message(), "has not heard of the newer one")) << ahead;
  EXPECT_EQ(asked, 1);
  const absl::Status added = fence.Check("job", 2, 1);
  EXPECT_EQ(added.code(), absl::StatusCode::kUnavailable) << added;
  EXPECT_TRUE(absl::StrContains(added.message(), "worker rank 2 is not one of the job's 2 workers")) << added;
  EXPECT_EQ(asked, 2);
  fence.SetView(6, {1, 6, 1});
  EXPECT_TRUE(fence.Check("job", 1, 6).ok());
  EXPECT_TRUE(fence.Check("job", 2, 1).ok());
}

TEST(JobFenceTest, TheFloorRefusesTheTimelineRolledBackAndNeverGoesDown) {
  JobFence fence("job", 0);
  fence.RaiseFloor(5);
  EXPECT_EQ(fence.floor(), 5u);
  const absl::Status old = fence.Check("job", 0, 4);
  EXPECT_EQ(old.code(), absl::StatusCode::kAborted) << old;
  EXPECT_TRUE(absl::StrContains(old.message(), "rolled back to a checkpoint at generation 5")) << old;
  EXPECT_TRUE(fence.Check("job", 0, 5).ok());
  fence.RaiseFloor(3);
  EXPECT_EQ(fence.floor(), 5u);
  fence.SetView(9, {9});
  EXPECT_EQ(fence.Check("job", 0, 4).code(), absl::StatusCode::kAborted) << "the floor is checked before the view";
  EXPECT_TRUE(fence.Check("job", -1, 0).ok()) << "tools are not fenced";
}

TEST(JobFenceTest, RestoreGenerationWaitsForTheSchedulersWord) {
  JobFence fence("job", 2);
  EXPECT_TRUE(fence.CheckRestoreGeneration(0, absl::ZeroDuration()).ok());
  const absl::Status alone = fence.CheckRestoreGeneration(1, absl::Milliseconds(5));
  EXPECT_EQ(alone.code(), absl::StatusCode::kInvalidArgument) << alone;
  EXPECT_TRUE(absl::StrContains(alone.message(), "runs without one")) << alone;

  std::atomic<int> asked{0};
  fence.SetListener([&asked] { ++asked; });
  fence.SetView(4, {4});
  EXPECT_TRUE(fence.CheckRestoreGeneration(4, absl::ZeroDuration()).ok());
  EXPECT_EQ(asked.load(), 0);
  EXPECT_EQ(fence.CheckRestoreGeneration(5, absl::Milliseconds(5)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(asked.load(), 1);
  std::thread heard([&fence, &asked] {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (asked.load() < 2 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
    fence.SetView(5, {5});
  });
  EXPECT_TRUE(fence.CheckRestoreGeneration(5, absl::Seconds(30)).ok());
  heard.join();
  EXPECT_EQ(asked.load(), 2);
}

// Random views, floors and requests against the rules written out once more.
TEST(JobFenceTest, RandomRequestsFollowTheRules) {
  const TestSeed seed;
  std::mt19937_64 rng(seed.value());
  JobFence fence("job", 0);
  int asked = 0;
  fence.SetListener([&asked] { ++asked; });
  bool have_view = false;
  std::vector<uint64_t> view;
  uint64_t floor = 0;
  for (int step = 0; step < 5000; ++step) {
    switch (rng() % 8) {
      case 0: {
        view.assign(rng() % 5, 0);
        for (uint64_t& g : view) g = rng() % 8;
        fence.SetView(rng() % 8, view);
        have_view = true;
        continue;
      }
      case 1:
        floor = std::max<uint64_t>(floor, rng() % 8);
        fence.RaiseFloor(floor);
        continue;
      default:
        break;
    }
    const int rank = static_cast<int>(rng() % 7) - 1;
    const uint64_t generation = rng() % 9;
    absl::StatusCode want = absl::StatusCode::kOk;
    bool tells = false;
    if (rank >= 0 && generation < floor) {
      want = absl::StatusCode::kAborted;
    } else if (rank >= 0 && have_view) {
      if (static_cast<size_t>(rank) >= view.size()) {
        want = absl::StatusCode::kUnavailable;
        tells = true;
      } else if (generation < view[rank]) {
        want = absl::StatusCode::kFailedPrecondition;
      } else if (generation > view[rank]) {
        want = absl::StatusCode::kUnavailable;
        tells = true;
      }
    }
    const int asked_before = asked;
    ASSERT_EQ(fence.Check("job", rank, generation).code(), want) << "step " << step;
    ASSERT_EQ(asked, asked_before + (tells ? 1 : 0)) << "step " << step;
  }
}

}  // namespace
}  // namespace kestrel
