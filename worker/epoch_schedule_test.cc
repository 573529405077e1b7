#include "worker/epoch_schedule.h"

#include "gtest/gtest.h"

namespace kestrel {
namespace {

TEST(EpochScheduleTest, PlainEpochsTileTheClocks) {
  const EpochSchedule s = EpochSchedule::Plain(10, 3, 0);
  EXPECT_EQ(s.total(), 30);
  EXPECT_EQ(s.At(0).index, 0);
  EXPECT_EQ(s.At(9).end, 10);
  EXPECT_EQ(s.At(10).index, 1);
  EXPECT_EQ(s.At(10).start, 10);
  EXPECT_EQ(s.At(29).index, 2);
  EXPECT_EQ(EpochSchedule::Plain(10, 3, 25).total(), 25);
}

TEST(EpochScheduleTest, APlanShortensItsEpochAndLaterOnesUseTheNewLength) {
  // 3 epochs of 10 with 2 workers; at clock 14 (epoch 1) the count changes: epoch 1 has 4 more iterations,
  // epoch 2 has 7 (3 workers).
  const EpochSchedule s = EpochSchedule::Planned(1, 14, 4, 7, 3, 0);
  EXPECT_EQ(s.total(), 25);
  EXPECT_EQ(s.At(14).index, 1);
  EXPECT_EQ(s.At(14).start, 14);
  EXPECT_EQ(s.At(17).end, 18);
  EXPECT_EQ(s.At(18).index, 2);
  EXPECT_EQ(s.At(18).start, 18);
  EXPECT_EQ(s.At(24).end, 25);
  // A plan that starts an epoch afresh: first = per_epoch.
  const EpochSchedule fresh = EpochSchedule::Planned(2, 20, 7, 7, 3, 0);
  EXPECT_EQ(fresh.total(), 27);
  EXPECT_EQ(fresh.At(20).index, 2);
  // A plan past the last epoch: nothing left.
  EXPECT_EQ(EpochSchedule::Planned(3, 30, 7, 7, 3, 0).total(), 30);
}

}  // namespace
}  // namespace kestrel
