#include "server/recent_requests.h"

#include "gtest/gtest.h"

namespace kestrel {
namespace {

using Seen = RecentRequests::Seen;

TEST(RecentRequestsTest, RepeatsPerWorkerWithinTheWindow) {
  RecentRequests recent(/*per_worker=*/3);
  EXPECT_EQ(recent.Begin(0, 10), Seen::kNew);
  EXPECT_EQ(recent.Begin(0, 10), Seen::kInFlight) << "not yet applied: the repeat must retry";
  recent.Applied(0, 10);
  EXPECT_EQ(recent.Begin(0, 10), Seen::kApplied);
  EXPECT_EQ(recent.Begin(1, 10), Seen::kNew) << "ids are per worker";
  EXPECT_EQ(recent.Begin(0, 11), Seen::kNew);
  EXPECT_EQ(recent.Begin(0, 12), Seen::kNew);
  EXPECT_EQ(recent.Begin(0, 13), Seen::kNew);  // evicts 10
  EXPECT_EQ(recent.Begin(0, 10), Seen::kNew);
  EXPECT_EQ(recent.Begin(0, 13), Seen::kInFlight);
}

}  // namespace
}  // namespace kestrel
