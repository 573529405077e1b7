#include "worker/prepared_batch.h"

#include "gtest/gtest.h"

namespace kestrel {
namespace {

TEST(PreparedBatchTest, SegmentsListEachUniqueKeysPositionsInOrder) {
  PreparedBatch p;
  p.batch.Reset(2, 0);
  p.batch.keys = {30, 10, 10, 20, 30, 10};
  p.batch.values.assign(6, 1.0f);
  p.batch.labels = {0, 1, 0};
  p.batch.size = 3;
  p.Prepare(*Partition::Uniform(1));
  ASSERT_EQ(p.keys.num_unique(), 3u);
  // Unique keys sorted: 10, 20, 30.
  EXPECT_EQ(p.offsets, (std::vector<uint32_t>{0, 3, 4, 6}));
  EXPECT_EQ(p.positions, (std::vector<uint32_t>{1, 2, 5, 3, 0, 4}));
  for (size_t u = 0; u < 3; ++u) {
    for (uint32_t j = p.offsets[u]; j < p.offsets[u + 1]; ++j) EXPECT_EQ(p.keys.inverse()[p.positions[j]], u);
  }
}

}  // namespace
}  // namespace kestrel
