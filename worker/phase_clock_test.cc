// PhaseClock: a Scope adds its lifetime to its phase only; Add sums from several threads; Get reports each phase
// in its own field; Reset starts again from zero.
#include "worker/phase_clock.h"

#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

TEST(PhaseClockTest, EachPhaseLandsInItsOwnField) {
  PhaseClock clock;
  clock.Add(PhaseClock::kRead, absl::Seconds(1));
  clock.Add(PhaseClock::kBatch, absl::Seconds(2));
  clock.Add(PhaseClock::kPull, absl::Seconds(3));
  clock.Add(PhaseClock::kCompute, absl::Seconds(4));
  clock.Add(PhaseClock::kPush, absl::Seconds(5));
  clock.Add(PhaseClock::kWait, absl::Seconds(6));
  const PhaseTimes t = clock.Get();
  EXPECT_DOUBLE_EQ(t.read, 1);
  EXPECT_DOUBLE_EQ(t.batch, 2);
  EXPECT_DOUBLE_EQ(t.pull, 3);
  EXPECT_DOUBLE_EQ(t.compute, 4);
  EXPECT_DOUBLE_EQ(t.push, 5);
  EXPECT_DOUBLE_EQ(t.wait, 6);
  clock.Reset();
  const PhaseTimes zero = clock.Get();
  EXPECT_EQ(zero.read + zero.batch + zero.pull + zero.compute + zero.push + zero.wait, 0);
}

TEST(PhaseClockTest, AScopeAddsItsLifetimeToItsPhase) {
  PhaseClock clock;
  {
    PhaseClock::Scope computing(&clock, PhaseClock::kCompute);
    absl::SleepFor(absl::Milliseconds(20));
  }
  const PhaseTimes t = clock.Get();
  EXPECT_GE(t.compute, 0.02);
  EXPECT_EQ(t.read + t.batch + t.pull + t.push + t.wait, 0);
}

TEST(PhaseClockTest, ThreadsAddUp) {
  PhaseClock clock;
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 1000; ++k) clock.Add(PhaseClock::kWait, absl::Milliseconds(1));
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_DOUBLE_EQ(clock.Get().wait, 4.0);
}

}  // namespace
}  // namespace kestrel
