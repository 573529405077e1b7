#include "scheduler/liveness_judge.h"

#include <random>

#include "common/test_seed.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);
const absl::Duration kTimeout = absl::Milliseconds(1500);

// With both rules off, silence is a plain timeout: longer than heartbeat_timeout, whoever else was heard, and no
// check is ever a stall.
TEST(LivenessJudgeTest, WithBothRulesOffSilenceIsAPlainTimeout) {
  const TestSeed seed;
  std::mt19937 rng(seed.value());
  LivenessJudge judge(kTimeout, absl::InfiniteDuration(), absl::InfiniteDuration());
  absl::Time now = kStart;
  for (int step = 0; step < 1000; ++step) {
    now += absl::Milliseconds(std::uniform_int_distribution<int>(0, 5000)(rng));
    if (std::uniform_int_distribution<int>(0, 1)(rng) == 0) {
      EXPECT_FALSE(judge.Heard(now).has_value()) << "a deaf period with deaf_grace off";
    }
    EXPECT_EQ(judge.Check(now), absl::ZeroDuration()) << "a stall with stall_threshold off";
    const absl::Time last = now - absl::Milliseconds(std::uniform_int_distribution<int>(0, 3000)(rng));
    EXPECT_EQ(judge.Silent(last, now), now - last > kTimeout) << "silent for " << absl::FormatDuration(now - last);
  }
  EXPECT_EQ(judge.stalled(), absl::ZeroDuration());
  EXPECT_EQ(judge.deaf_periods(), 0);
}

TEST(LivenessJudgeTest, OnlyAGapPastTheThresholdIsAStallAndOnlyItsExcessCounts) {
  LivenessJudge judge(kTimeout, absl::Milliseconds(500), absl::InfiniteDuration());
  EXPECT_EQ(judge.Check(kStart + absl::Seconds(100)), absl::ZeroDuration()) << "the first check ends no stall";
  absl::Time now = kStart + absl::Seconds(100);
  now += absl::Milliseconds(500);
  EXPECT_EQ(judge.Check(now), absl::ZeroDuration()) << "a gap of exactly the threshold";
  now += absl::Seconds(6);
  EXPECT_EQ(judge.Check(now), absl::Milliseconds(5500));
  now += absl::Milliseconds(600);
  EXPECT_EQ(judge.Check(now), absl::Milliseconds(100)) << "a slow scheduler: the excess only";
  EXPECT_EQ(judge.stalled(), absl::Milliseconds(5600));
  EXPECT_EQ(judge.Check(now - absl::Seconds(1)), absl::ZeroDuration()) << "an earlier time moves nothing";
  EXPECT_EQ(judge.Check(now + absl::Milliseconds(250)), absl::ZeroDuration());
}

TEST(LivenessJudgeTest, AStallCountsForNoSilenceAndLengthensAGrace) {
  const absl::Time now = kStart + absl::Seconds(10);
  const absl::Duration stall = absl::Seconds(5);
  // Heard 1 s before the stall began: that second of silence is kept.
  EXPECT_EQ(LivenessJudge::AfterStall(now - absl::Seconds(6), stall, now), now - absl::Seconds(1));
  // Heard during the stall (the scheduler could not look): no silence at all, never ahead of now.
  EXPECT_EQ(LivenessJudge::AfterStall(now - absl::Seconds(2), stall, now), now);
  // Inside a deaf grace (last heartbeat ahead of now): the grace lengthens by the stall.
  EXPECT_EQ(LivenessJudge::AfterStall(now + absl::Seconds(1), stall, now), now + absl::Seconds(6));
}

// A deaf scheduler: a silence counts only once someone else was heard after its deadline, and the first voice after
// hearing no one for a timeout gives every member the grace.
TEST(LivenessJudgeTest, SilenceCountsOnlyOnceSomeoneElseWasHeardAfterIt) {
  const absl::Duration grace = absl::Seconds(3);
  LivenessJudge judge(kTimeout, absl::InfiniteDuration(), grace);
  EXPECT_FALSE(judge.Heard(kStart).has_value()) << "the first message ends no deaf period";
  EXPECT_FALSE(judge.Heard(kStart + absl::Seconds(1)).has_value());
  const absl::Time last = kStart;
  EXPECT_FALSE(judge.Silent(last, kStart + absl::Seconds(10))) << "nobody heard after its deadline";
  const absl::Time healed = kStart + absl::Seconds(10);
  const std::optional<absl::Time> given = judge.Heard(healed);
  ASSERT_TRUE(given.has_value()) << "nobody was heard for 9 s: a deaf period ended";
  EXPECT_EQ(*given, healed + grace - kTimeout);
  EXPECT_EQ(judge.deaf_periods(), 1);
  EXPECT_TRUE(judge.Silent(last, healed)) << "without the grace, heard nothing since kStart";
  // With the grace, the member counts as heard at `given`: silent only past healed + grace, once others are heard.
  const absl::Time graced = LivenessJudge::AfterDeafness(last, *given);
  EXPECT_EQ(graced, *given);
  EXPECT_EQ(LivenessJudge::AfterDeafness(healed + absl::Seconds(5), *given), healed + absl::Seconds(5))
      << "a later heartbeat stays";
  EXPECT_FALSE(judge.Silent(graced, healed + grace));
  // Others heard up to its deadline (healed + grace), none after it yet: not silent.
  for (absl::Duration t = absl::Seconds(1); t <= grace; t += absl::Seconds(1)) {
    EXPECT_FALSE(judge.Heard(healed + t).has_value());
  }
  EXPECT_FALSE(judge.Silent(graced, healed + grace + absl::Milliseconds(250))) << "no one heard after its deadline";
  EXPECT_FALSE(judge.Heard(healed + grace + absl::Milliseconds(500)).has_value());
  EXPECT_TRUE(judge.Silent(graced, healed + grace + absl::Milliseconds(500)));
  EXPECT_EQ(judge.deaf_periods(), 1);
}

}  // namespace
}  // namespace kestrel
