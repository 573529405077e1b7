#include "client/liveness.h"
#include "server/primary_lease.h"

#include "gtest/gtest.h"

namespace kestrel {
namespace {

using Clock = PrimaryLease::Clock;

TEST(PrimaryLeaseTest, HeldFromTheSendingOfAnAnsweredCallForItsLength) {
  PrimaryLease lease;
  EXPECT_FALSE(lease.Held()) << "held before the scheduler answered anything";
  const Clock::time_point now = Clock::now();
  lease.Renew(now - std::chrono::seconds(10), absl::Seconds(1));  // an answer to a call sent 10 s ago
  EXPECT_FALSE(lease.Held());
  EXPECT_GE(lease.LapsedFor(), absl::Seconds(9));
  lease.Renew(now, absl::Hours(1));
  EXPECT_TRUE(lease.Held());
  EXPECT_EQ(lease.LapsedFor(), absl::ZeroDuration());
  lease.Renew(now - std::chrono::seconds(10), absl::Seconds(1));  // a late answer to an older call: never shortens
  EXPECT_TRUE(lease.Held());
}

TEST(PrimaryLeaseTest, ShorterThanTheSchedulersFailureTimeout) {
  for (absl::Duration interval : {absl::Milliseconds(100), absl::Milliseconds(300), absl::Seconds(1)}) {
    const absl::Duration lease = PrimaryLease::LengthFor(interval);
    EXPECT_LT(lease, HeartbeatTimeoutFor(interval)) << interval;
    EXPECT_GT(lease, interval / 2) << "a server heartbeats twice per interval: its lease must outlast the gap";
  }
}

}  // namespace
}  // namespace kestrel
