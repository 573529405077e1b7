#include "common/consistency.h"

#include "gtest/gtest.h"

namespace kestrel {
namespace {

TEST(ConsistencyTest, ParsesTheThreeNamesAndNothingElse) {
  EXPECT_EQ(ConsistencyPolicy::Parse("bsp", 5)->mode, CONSISTENCY_BSP);
  EXPECT_EQ(ConsistencyPolicy::Parse("bsp", 5)->staleness, 0);
  EXPECT_EQ(ConsistencyPolicy::Parse("ssp", 2)->staleness, 2);
  EXPECT_EQ(ConsistencyPolicy::Parse("asp", 0)->mode, CONSISTENCY_ASP);
  for (const char* bad : {"", "BSP", "sync", "ssp "}) {
    EXPECT_EQ(ConsistencyPolicy::Parse(bad, 0).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ConsistencyPolicy::Parse("ssp", -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConsistencyPolicy::FromProto(CONSISTENCY_UNSPECIFIED, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConsistencyPolicy::FromProto(static_cast<Consistency>(42), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConsistencyTest, NamesRoundTrip) {
  for (ConsistencyPolicy p : {ConsistencyPolicy::Bsp(), ConsistencyPolicy::Ssp(3), ConsistencyPolicy::Asp()}) {
    absl::StatusOr<ConsistencyPolicy> back = ConsistencyPolicy::Parse(p.name(), p.staleness);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->mode, p.mode);
    EXPECT_EQ(back->staleness, p.staleness);
  }
  EXPECT_EQ(ConsistencyPolicy::Ssp(2).ToString(), "ssp(2)");
  EXPECT_EQ(ConsistencyPolicy::Asp().ToString(), "asp");
}

TEST(ConsistencyTest, WhatEachModeMeansForAWorker) {
  const ConsistencyPolicy bsp = ConsistencyPolicy::Bsp(), ssp0 = ConsistencyPolicy::Ssp(0),
                          ssp2 = ConsistencyPolicy::Ssp(2), asp = ConsistencyPolicy::Asp();
  EXPECT_TRUE(bsp.bsp());
  EXPECT_FALSE(ssp2.bsp());
  EXPECT_FALSE(asp.bsp());
  EXPECT_FALSE(bsp.prefetch_pulls());
  EXPECT_FALSE(ssp0.prefetch_pulls());
  EXPECT_TRUE(ssp2.prefetch_pulls());
  EXPECT_TRUE(asp.prefetch_pulls());
  EXPECT_TRUE(asp.overlap_pushes());
  EXPECT_FALSE(ssp2.overlap_pushes());
  EXPECT_EQ(bsp.row_cache_bound(4), 0);
  EXPECT_EQ(ssp0.row_cache_bound(4), 0);
  EXPECT_EQ(ssp2.row_cache_bound(4), 2);
  EXPECT_EQ(asp.row_cache_bound(4), 4);
  EXPECT_EQ(asp.row_cache_bound(0), 0);
  EXPECT_TRUE(asp.row_cache_own_clock());
  EXPECT_FALSE(ssp2.row_cache_own_clock());
  EXPECT_EQ(bsp.RequiredMinClock(7), 7);
  EXPECT_EQ(ssp2.RequiredMinClock(7), 5);
  EXPECT_EQ(asp.RequiredMinClock(7), std::numeric_limits<int64_t>::min());
}

}  // namespace
}  // namespace kestrel
