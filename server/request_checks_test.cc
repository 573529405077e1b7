#include "server/request_checks.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "common/gradients.h"
#include "common/partition.h"
#include "common/test_seed.h"
#include "gtest/gtest.h"
#include "proto/table.pb.h"
#include "server/table.h"
#include "server/tables_testing.h"

namespace kestrel {
namespace {

// The checks of server `owner` of `partition` (both must outlive it).
struct Checks {
  Checks(Partition p, int owner, size_t max_keys)
      : partition(std::move(p)), ranges(partition.RangesOf(owner)), checks(partition, owner, ranges, max_keys) {}
  const Partition partition;
  const std::vector<KeyRange> ranges;
  const RequestChecks checks;
};

void ExpectInvalid(const absl::Status& status, absl::string_view text) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), text)) << status << "\nwanted: " << text;
}

TEST(RequestChecksTest, KeysMustBeFewSortedAndOwned) {
  Checks c(*Partition::Uniform(2), /*owner=*/1, /*max_keys=*/3);
  const uint64_t base = uint64_t{1} << 63;
  EXPECT_TRUE(c.checks.CheckKeys({base, base + 1, base + 9}, /*sorted=*/true, "keys").ok());
  EXPECT_TRUE(c.checks.CheckKeys({}, /*sorted=*/true, "keys").ok());
  ExpectInvalid(c.checks.CheckKeys({base, base + 1, base + 2, base + 3}, true, "keys"),
                "4 keys in one request exceed the limit of 3: split it");
  ExpectInvalid(c.checks.CheckKeys({base + 2, base + 1}, true, "keys"), "keys[1] = 0x8000000000000001 follows");
  ExpectInvalid(c.checks.CheckKeys({base + 2, base + 2}, true, "keys"), "strictly increasing");
  EXPECT_TRUE(c.checks.CheckKeys({base + 2, base + 1}, /*sorted=*/false, "ids").ok()) << "order not required";
  ExpectInvalid(c.checks.CheckKeys({base, 5}, false, "ids"),
                "key 0x0000000000000005 (ids[1]) is outside shard 1's key ranges "
                "[0x8000000000000000, 0xffffffffffffffff]; it belongs to shard 0");
}

TEST(RequestChecksTest, ErrorsListAFewRangesOnly) {
  Checks c(*Partition::Uniform(2, /*ranges_per_server=*/8), /*owner=*/0, 10);
  const absl::Status status = c.checks.CheckKeys({~uint64_t{0}}, true, "keys");
  ExpectInvalid(status, " and 4 more; it belongs to shard 1");
}

// Random key sets against the partition's owner of each key: sorted and unsorted checks agree with it.
TEST(RequestChecksTest, RandomKeysAreTakenExactlyWhenOwned) {
  const TestSeed seed;
  std::mt19937_64 rng(seed.value());
  for (int round = 0; round < 200; ++round) {
    const int servers = 1 + static_cast<int>(rng() % 5);
    const int owner = static_cast<int>(rng() % servers);
    Checks c(*Partition::Uniform(servers, 1 + static_cast<int>(rng() % 4)), owner, 64);
    std::vector<uint64_t> keys(rng() % 40);
    for (uint64_t& key : keys) {
      // Mostly keys of the owner's ranges, some anywhere.
      const KeyRange& range = c.ranges[rng() % c.ranges.size()];
      const uint64_t width = range.last - range.first + 1;  // 0: the whole key space
      key = rng() % 4 == 0 || width == 0 ? rng() : range.first + rng() % width;
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    bool owned = true;
    for (uint64_t key : keys) owned &= c.partition.OwnerOf(key) == owner;
    EXPECT_EQ(c.checks.CheckKeys(keys, /*sorted=*/true, "keys").ok(), owned) << "round " << round;
    std::shuffle(keys.begin(), keys.end(), rng);
    EXPECT_EQ(c.checks.CheckKeys(keys, /*sorted=*/false, "keys").ok(), owned) << "round " << round;
  }
}

TEST(RequestChecksTest, GradientsAreOneFiniteRowPerKey) {
  Checks c(*Partition::Uniform(1), 0, 10);
  auto table = MustCreateTable(ZeroSgdTable("emb", 2));
  const std::vector<uint64_t> keys = {3, 7};
  EXPECT_TRUE(c.checks.CheckGrads(*table, keys, {1, 2, 3, 4}).ok());
  ExpectInvalid(c.checks.CheckGrads(*table, keys, {1, 2, 3}),
                "table 'emb' has dim 2: 2 keys need 4 gradient values, got 3");
  ExpectInvalid(c.checks.CheckGrads(*table, keys, {1, 2, 3, std::numeric_limits<float>::quiet_NaN()}),
                "for key 0x0000000000000007 element 1 of table 'emb'");
  ExpectInvalid(c.checks.CheckGrads(*table, keys, {2 * kMaxGradientMagnitude, 0, 0, 0}),
                "for key 0x0000000000000003 element 0");
}

TEST(RequestChecksTest, DenseBlocksMapToTheirBlockKeys) {
  Checks c(*Partition::Uniform(1), 0, 10);
  auto dense = MustCreateTable(ZeroSgdDenseTable("mlp", 4, /*blocks=*/10));
  ASSERT_EQ(dense->num_blocks(), 10u);
  std::vector<uint64_t> keys;
  ASSERT_TRUE(c.checks.BlockKeys(*dense, {0, 3, 9}, &keys).ok());
  EXPECT_EQ(keys, (std::vector<uint64_t>{Partition::DenseBlockKey("mlp", 0), Partition::DenseBlockKey("mlp", 3),
                                         Partition::DenseBlockKey("mlp", 9)}));
  ExpectInvalid(c.checks.BlockKeys(*dense, {3, 3}, &keys), "block 3 follows block 3");
  ExpectInvalid(c.checks.BlockKeys(*dense, {10}, &keys), "dense table 'mlp' has 10 blocks; block 10 does not exist");

  absl::StatusOr<absl::Span<const uint64_t>> checked = c.checks.CheckedKeys(*dense, {1, 2});
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(std::vector<uint64_t>(checked->begin(), checked->end()),
            (std::vector<uint64_t>{Partition::DenseBlockKey("mlp", 1), Partition::DenseBlockKey("mlp", 2)}));

  auto sparse = MustCreateTable(ZeroSgdTable("emb", 4));
  const std::vector<uint64_t> ids = {1, 2};
  checked = c.checks.CheckedKeys(*sparse, ids);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked->data(), ids.data()) << "sparse keys are checked in place";
  ExpectInvalid(c.checks.CheckedKeys(*sparse, {2, 1}).status(), "strictly increasing");
}

TEST(RequestChecksTest, DenseBlockKeysMustBeOwned) {
  // Of two servers, each owns some of a table's block keys; the other's are refused.
  Checks c(*Partition::Uniform(2), 0, 100);
  auto dense = MustCreateTable(ZeroSgdDenseTable("mlp", 4, /*blocks=*/10));
  std::vector<uint64_t> mine, theirs, keys;
  for (uint64_t b = 0; b < dense->num_blocks(); ++b) {
    (c.partition.OwnerOf(Partition::DenseBlockKey("mlp", b)) == 0 ? mine : theirs).push_back(b);
  }
  ASSERT_FALSE(mine.empty());
  ASSERT_FALSE(theirs.empty());
  EXPECT_TRUE(c.checks.BlockKeys(*dense, mine, &keys).ok());
  ExpectInvalid(c.checks.BlockKeys(*dense, theirs, &keys), "(dense block keys[0]) is outside shard 0's key ranges");
}

}  // namespace
}  // namespace kestrel
