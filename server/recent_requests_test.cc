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

TEST(RecentRequestsTest, WindowsAreBoundedByTheJobsWorkers) {
  // Senders are the network's: ids from ever more "workers" once grew memory without bound. Now a worker
  // beyond the bound is refused, and nobody's window is dropped to make room (its retries would apply twice).
  RecentRequests recent(/*per_worker=*/2, /*max_workers=*/2);
  EXPECT_EQ(recent.Begin(0, 1), Seen::kNew);
  recent.Applied(0, 1);
  EXPECT_EQ(recent.Begin(7, 1), Seen::kNew);
  for (int rogue = 8; rogue < 1000; ++rogue) ASSERT_EQ(recent.Begin(rogue, 1), Seen::kNoRoom) << rogue;
  EXPECT_EQ(recent.Begin(0, 1), Seen::kApplied) << "worker 0's window survived the flood";
  recent.SetMaxWorkers(3);  // the scheduler says the job has 3 workers
  EXPECT_EQ(recent.max_workers(), 3u);
  EXPECT_EQ(recent.Begin(8, 1), Seen::kNew);
  EXPECT_EQ(recent.Begin(9, 1), Seen::kNoRoom);
}

}  // namespace
}  // namespace kestrel
