#include "server/recent_requests.h"

#include "gtest/gtest.h"

namespace kestrel {
namespace {

TEST(RecentRequestsTest, DuplicatesPerWorkerWithinTheWindow) {
  RecentRequests recent(/*per_worker=*/3);
  EXPECT_TRUE(recent.Insert(0, 10));
  EXPECT_FALSE(recent.Insert(0, 10));
  EXPECT_TRUE(recent.Insert(1, 10)) << "ids are per worker";
  EXPECT_TRUE(recent.Insert(0, 11));
  EXPECT_TRUE(recent.Insert(0, 12));
  EXPECT_TRUE(recent.Insert(0, 13));  // evicts 10
  EXPECT_TRUE(recent.Insert(0, 10));
  EXPECT_FALSE(recent.Insert(0, 13));
}

}  // namespace
}  // namespace kestrel
