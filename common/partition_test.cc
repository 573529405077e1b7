#include "common/partition.h"

#include <random>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/container/flat_hash_set.h"
#include "common/test_seed.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

constexpr uint64_t kMaxKey = std::numeric_limits<uint64_t>::max();

Partition MustUniform(int num_servers, int ranges_per_server) {
  auto p = Partition::Uniform(num_servers, ranges_per_server);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

Partition MustParse(const std::string& spec) {
  auto p = Partition::Parse(spec);
  EXPECT_TRUE(p.ok()) << spec << ": " << p.status();
  return *std::move(p);
}

// The owner of `key` found by a linear scan over ranges(); -1 when no range holds it.
int BruteForceOwner(const Partition& p, uint64_t key) {
  for (int i = 0; i < p.num_ranges(); ++i) {
    if (p.ranges()[i].Contains(key)) return p.owners()[i];
  }
  return -1;
}

// Every range boundary and its neighbours: first, last, first - 1, last + 1.
std::vector<uint64_t> BoundaryKeys(const Partition& p) {
  std::vector<uint64_t> keys;
  for (const KeyRange& r : p.ranges()) {
    keys.push_back(r.first);
    keys.push_back(r.last);
    if (r.first > 0) keys.push_back(r.first - 1);
    if (r.last < kMaxKey) keys.push_back(r.last + 1);
  }
  return keys;
}

// The ranges are sorted, tile [0, 2^64-1] without gaps or overlaps, and every owner is a valid server.
void ExpectTiles(const Partition& p) {
  ASSERT_GT(p.num_ranges(), 0);
  ASSERT_EQ(p.ranges().size(), p.owners().size());
  EXPECT_EQ(p.ranges().front().first, 0u);
  EXPECT_EQ(p.ranges().back().last, kMaxKey);
  for (int i = 0; i < p.num_ranges(); ++i) {
    EXPECT_LE(p.ranges()[i].first, p.ranges()[i].last) << i;
    if (i > 0) {
      EXPECT_EQ(p.ranges()[i].first, p.ranges()[i - 1].last + 1) << i;
    }
    EXPECT_GE(p.owners()[i], 0);
    EXPECT_LT(p.owners()[i], p.num_servers());
  }
}

void ExpectOwnerOfMatchesBruteForce(const Partition& p) {
  for (uint64_t key : BoundaryKeys(p)) {
    EXPECT_EQ(p.OwnerOf(key), BruteForceOwner(p, key)) << "key 0x" << std::hex << key;
  }
}

void ExpectInvalid(const std::string& spec) {
  auto p = Partition::Parse(spec);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << "spec '" << spec << "'";
}

TEST(KeyRangeTest, ContainsIsClosedAndToStringIsHex) {
  const KeyRange r{10, 20};
  EXPECT_FALSE(r.Contains(9));
  EXPECT_TRUE(r.Contains(10));
  EXPECT_TRUE(r.Contains(20));
  EXPECT_FALSE(r.Contains(21));
  EXPECT_EQ((KeyRange{0, 0x7fffffffffffffffULL}).ToString(), "[0x0000000000000000, 0x7fffffffffffffff]");
}

TEST(PartitionTest, UniformTilesKeySpaceWithRoundRobinOwners) {
  for (int n : {1, 2, 3, 7, 64}) {
    for (int k : {1, 3}) {
      SCOPED_TRACE(absl::StrCat("n=", n, " k=", k));
      const Partition p = MustUniform(n, k);
      EXPECT_EQ(p.num_servers(), n);
      ASSERT_EQ(p.num_ranges(), n * k);
      ExpectTiles(p);
      uint64_t min_width = kMaxKey, max_width = 0;
      for (int r = 0; r < p.num_ranges(); ++r) {
        EXPECT_EQ(p.owners()[r], r % n);
        const uint64_t width = p.ranges()[r].last - p.ranges()[r].first;  // + 1 may overflow for n*k == 1
        min_width = std::min(min_width, width);
        max_width = std::max(max_width, width);
      }
      EXPECT_LE(max_width - min_width, 1u);
    }
  }
}

TEST(PartitionTest, UniformOwnerOfMatchesBruteForceAtBoundaries) {
  for (int n : {1, 2, 3, 7, 64}) {
    for (int k : {1, 3}) {
      SCOPED_TRACE(absl::StrCat("n=", n, " k=", k));
      ExpectOwnerOfMatchesBruteForce(MustUniform(n, k));
    }
  }
}

TEST(PartitionTest, RangesOfListsEachServersRangesInOrder) {
  const Partition p = MustUniform(3, 3);
  for (int s = 0; s < 3; ++s) {
    const std::vector<KeyRange> ranges = p.RangesOf(s);
    ASSERT_EQ(ranges.size(), 3u);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(ranges[i], p.ranges()[s + 3 * i]);
  }
  EXPECT_TRUE(p.RangesOf(3).empty());
}

TEST(PartitionTest, UniformRejectsBadArguments) {
  EXPECT_EQ(Partition::Uniform(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Partition::Uniform(-1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Partition::Uniform(65537).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Partition::Uniform(2, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Partition::Uniform(2, 1025).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PartitionTest, UniformRoundTripsThroughParse) {
  for (int n : {1, 2, 3, 7, 64}) {
    for (int k : {1, 3}) {
      SCOPED_TRACE(absl::StrCat("n=", n, " k=", k));
      const Partition p = MustUniform(n, k);
      const Partition q = MustParse(p.ToString());
      EXPECT_EQ(q.Fingerprint(), p.Fingerprint());
      EXPECT_EQ(q.num_servers(), p.num_servers());
      EXPECT_EQ(q.ranges(), p.ranges());
      EXPECT_EQ(q.owners(), p.owners());
      for (uint64_t key : BoundaryKeys(p)) EXPECT_EQ(q.OwnerOf(key), p.OwnerOf(key)) << key;
    }
  }
}

TEST(PartitionTest, ExplicitNonUniformSpecRoundTrips) {
  // Uneven widths, a server with two non-adjacent ranges, decimal and hex bounds, a one-key last range.
  const std::string spec =
      "0x0-0xff:1, 256-0x7fffffffffffffff:0,0x8000000000000000-0xfffffffffffffffe:2,"
      "18446744073709551615-0xffffffffffffffff:1";
  const Partition p = MustParse(spec);
  EXPECT_EQ(p.num_servers(), 3);
  ASSERT_EQ(p.num_ranges(), 4);
  EXPECT_EQ(p.owners(), (std::vector<int>{1, 0, 2, 1}));
  EXPECT_EQ(p.ranges()[1], (KeyRange{256, 0x7fffffffffffffffULL}));
  ExpectTiles(p);
  ExpectOwnerOfMatchesBruteForce(p);
  EXPECT_EQ(p.OwnerOf(0), 1);
  EXPECT_EQ(p.OwnerOf(255), 1);
  EXPECT_EQ(p.OwnerOf(256), 0);
  EXPECT_EQ(p.OwnerOf(kMaxKey - 1), 2);
  EXPECT_EQ(p.OwnerOf(kMaxKey), 1);

  const Partition q = MustParse(p.ToString());
  EXPECT_EQ(q.Fingerprint(), p.Fingerprint());
  EXPECT_EQ(q.ToString(), p.ToString());
  for (uint64_t key : BoundaryKeys(p)) EXPECT_EQ(q.OwnerOf(key), p.OwnerOf(key)) << key;
}

TEST(PartitionTest, ParseOfUniformLayoutEqualsUniform) {
  const Partition q = MustParse("0x0-0x7fffffffffffffff:0,0x8000000000000000-0xffffffffffffffff:1");
  const Partition p = MustUniform(2, 1);
  EXPECT_EQ(q.Fingerprint(), p.Fingerprint());
  ExpectOwnerOfMatchesBruteForce(q);
}

TEST(PartitionTest, FingerprintDistinguishesLayouts) {
  EXPECT_NE(MustUniform(2, 1).Fingerprint(), MustUniform(3, 1).Fingerprint());
  EXPECT_NE(MustUniform(2, 1).Fingerprint(), MustUniform(2, 2).Fingerprint());
  EXPECT_NE(MustUniform(2, 1).Fingerprint(),
            MustParse("0x0-0x7fffffffffffffff:1,0x8000000000000000-0xffffffffffffffff:0").Fingerprint());
  EXPECT_NE(MustUniform(2, 1).Fingerprint(),
            MustParse("0x0-0x7ffffffffffffffe:0,0x7fffffffffffffff-0xffffffffffffffff:1").Fingerprint());
}

TEST(PartitionTest, ParseRejectsInvalidSpecs) {
  // Gap between the ranges.
  ExpectInvalid("0x0-0x10:0,0x12-0xffffffffffffffff:1");
  // Overlap.
  ExpectInvalid("0x0-0x10:0,0x10-0xffffffffffffffff:1");
  // Unsorted (each range alone is fine).
  ExpectInvalid("0x11-0xffffffffffffffff:1,0x0-0x10:0");
  // A range after the one ending at 2^64-1 (its "next first key" wraps around to 0).
  ExpectInvalid("0x0-0xffffffffffffffff:0,0x0-0x10:1");
  // Server 1 has no range.
  ExpectInvalid("0x0-0x7fffffffffffffff:0,0x8000000000000000-0xffffffffffffffff:2");
  // Does not reach 0xffffffffffffffff.
  ExpectInvalid("0x0-0x7fffffffffffffff:0,0x8000000000000000-0xfffffffffffffffe:1");
  // Does not start at 0.
  ExpectInvalid("0x1-0xffffffffffffffff:0");
  // first > last.
  ExpectInvalid("0x0-0x10:0,0x20-0x11:1,0x21-0xffffffffffffffff:1");
  // Garbage and malformed items.
  ExpectInvalid("");
  ExpectInvalid("garbage");
  ExpectInvalid("0x0-0xffffffffffffffff");
  ExpectInvalid("0x0-0xffffffffffffffff:x");
  ExpectInvalid("0x0-0xffffffffffffffff:-1");
  ExpectInvalid("0x0-0xffffffffffffffff:65536");
  ExpectInvalid("0x0:0");
  ExpectInvalid("0x0-0x1-0xffffffffffffffff:0");
  ExpectInvalid("0xg-0xffffffffffffffff:0");
  ExpectInvalid("0x0-0x1ffffffffffffffff:0");  // does not fit in 64 bits
  ExpectInvalid("0x0-0xffffffffffffffff:0:1");
}

// Replicas: R copies of every range on R distinct servers, replica 0 the owner; the count round-trips through
// the partition string (an unreplicated string is unchanged, so existing manifests still parse) and changes
// the fingerprint.
TEST(PartitionTest, ReplicasAreOnDistinctServersAndRoundTrip) {
  const Partition one = *Partition::Uniform(4, 2);
  absl::StatusOr<Partition> two = one.WithReplicas(2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->replicas(), 2);
  EXPECT_EQ(one.ToString().find("replicas"), std::string::npos);
  EXPECT_NE(one.Fingerprint(), two->Fingerprint());
  absl::StatusOr<Partition> parsed = Partition::Parse(two->ToString());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->replicas(), 2);
  EXPECT_EQ(parsed->Fingerprint(), two->Fingerprint());
  EXPECT_EQ(parsed->OwnerOf(123456789), two->OwnerOf(123456789)) << "still the O(1) uniform layout";
  for (int owner = 0; owner < 4; ++owner) {
    EXPECT_EQ(two->ReplicaOfOwner(owner, 0), owner);
    EXPECT_NE(two->ReplicaOfOwner(owner, 1), owner);
  }
  // Every server backs up exactly the ranges of its predecessor.
  for (int s = 0; s < 4; ++s) EXPECT_EQ(two->ReplicaRangesOf(s, 1), one.RangesOf((s + 3) % 4)) << s;
  EXPECT_EQ(two->ReplicaRangesOf(0, 0), one.RangesOf(0));
  EXPECT_TRUE(two->ReplicaRangesOf(0, 2).empty());
  EXPECT_EQ(one.WithReplicas(5).status().code(), absl::StatusCode::kInvalidArgument) << "more copies than servers";
  EXPECT_EQ(one.WithReplicas(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Partition::Parse(one.ToString() + ";replicas=9").ok());
  EXPECT_FALSE(Partition::Parse(one.ToString() + ";copies=2").ok());
  EXPECT_FALSE(Partition::Parse(one.ToString() + ";replicas=x").ok());
}

// Routing: a range is served by its first replica in service; losing its owner moves it to the backup,
// losing every copy is reported so the job can roll back.
TEST(RoutingTest, FailoverFollowsReplicaOrder) {
  const Partition p = *Partition::Uniform(3)->WithReplicas(2);
  absl::StatusOr<Routing> healthy = Routing::Create(p);
  ASSERT_TRUE(healthy.ok());
  for (int owner = 0; owner < 3; ++owner) {
    EXPECT_EQ(healthy->PrimaryOfOwner(owner), owner);
    EXPECT_EQ(healthy->BackupsOfOwner(owner), std::vector<int>({(owner + 1) % 3}));
  }
  EXPECT_FALSE(healthy->AnyRangeLost());
  absl::StatusOr<Routing> one_down = Routing::Create(p, {false, true, false});
  ASSERT_TRUE(one_down.ok());
  EXPECT_EQ(one_down->PrimaryOfOwner(1), 2) << "server 1's ranges move to their backup";
  EXPECT_TRUE(one_down->BackupsOfOwner(1).empty()) << "under-replicated until a new backup syncs";
  EXPECT_EQ(one_down->PrimaryOfOwner(0), 0);
  EXPECT_TRUE(one_down->BackupsOfOwner(0).empty()) << "server 0's backup was server 1";
  EXPECT_FALSE(one_down->AnyRangeLost());
  for (uint64_t id = 0; id < 1000; ++id) {
    const uint64_t key = Partition::FeatureKey(id);
    EXPECT_NE(one_down->ServerOf(key), 1);
    EXPECT_EQ(one_down->ServerOf(key), p.OwnerOf(key) == 1 ? 2 : p.OwnerOf(key));
  }
  absl::StatusOr<Routing> both_down = Routing::Create(p, {false, true, true});
  ASSERT_TRUE(both_down.ok());
  EXPECT_EQ(both_down->PrimaryOfOwner(1), -1);
  EXPECT_TRUE(both_down->AnyRangeLost()) << "both copies of server 1's ranges are gone: roll back";
  // Unreplicated: any server down loses its ranges.
  EXPECT_TRUE(Routing::Create(*Partition::Uniform(3), {false, true, false})->AnyRangeLost());
  EXPECT_FALSE(Routing::Create(p, {true, false}).ok()) << "one state per server";
}

TEST(PartitionTest, FeatureKeySpreadsSequentialIdsEvenly) {
  const Partition p = MustUniform(4, 1);
  constexpr int kIds = 200000;
  std::vector<int> counts(4, 0);
  for (uint64_t id = 0; id < kIds; ++id) ++counts[p.OwnerOf(Partition::FeatureKey(id))];
  const double expected = kIds / 4.0;
  for (int s = 0; s < 4; ++s) {
    EXPECT_NEAR(counts[s], expected, 0.03 * expected) << "server " << s;
  }
}

TEST(PartitionTest, FeatureKeysOfDistinctIdsDiffer) {
  EXPECT_NE(Partition::FeatureKey(0), Partition::FeatureKey(1));
  EXPECT_NE(Partition::FieldFeatureKey(1, 7), Partition::FieldFeatureKey(2, 7));
  EXPECT_NE(Partition::FieldFeatureKey(1, 7), Partition::FieldFeatureKey(1, 8));
  // Small values of nearby fields (bucketized integers, ids) never collide across fields.
  absl::flat_hash_set<uint64_t> seen;
  for (uint32_t field = 0; field < 2100; ++field) {
    for (uint64_t value = 0; value < 64; ++value) {
      EXPECT_TRUE(seen.insert(Partition::FieldFeatureKey(field, value)).second) << field << " " << value;
    }
  }
  // Stable across calls (a pure function).
  EXPECT_EQ(Partition::FeatureKey(12345), Partition::FeatureKey(12345));
}

TEST(PartitionTest, DenseBlockKeyDiffersForTablesAndBlocks) {
  EXPECT_EQ(Partition::DenseBlockKey("w", 0), Partition::DenseBlockKey("w", 0));
  EXPECT_NE(Partition::DenseBlockKey("w", 0), Partition::DenseBlockKey("w", 1));
  EXPECT_NE(Partition::DenseBlockKey("w", 0), Partition::DenseBlockKey("b", 0));
  EXPECT_NE(Partition::DenseBlockKey("dense_a", 3), Partition::DenseBlockKey("dense_b", 3));
  // No collisions among a few tables x many blocks.
  std::vector<uint64_t> keys;
  for (const char* table : {"w", "b", "dense_a", "dense_b"}) {
    for (uint64_t block = 0; block < 1000; ++block) keys.push_back(Partition::DenseBlockKey(table, block));
  }
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end());
}

// The moves cover exactly the keys whose owner changes, each from its old owner to its new one.
TEST(MovesBetweenTest, CoverExactlyTheKeysThatChangeOwner) {
  const TestSeed seed(7);
  std::mt19937_64 rng(seed.value());
  const std::vector<std::pair<Partition, Partition>> cases = {
      {*Partition::Uniform(2), *Partition::Uniform(3)},       {*Partition::Uniform(3), *Partition::Uniform(2)},
      {*Partition::Uniform(2, 4), *Partition::Uniform(3, 2)}, {*Partition::Uniform(4), *Partition::Uniform(4)},
      {*Partition::Uniform(1), *Partition::Uniform(5, 3)},
  };
  for (const auto& [from, to] : cases) {
    const std::vector<RangeMove> moves = MovesBetween(from, to);
    for (size_t m = 1; m < moves.size(); ++m) ASSERT_LT(moves[m - 1].range.last, moves[m].range.first);
    std::vector<uint64_t> keys = {0, ~uint64_t{0}};
    for (const KeyRange& r : from.ranges()) keys.insert(keys.end(), {r.first, r.last});
    for (const KeyRange& r : to.ranges()) keys.insert(keys.end(), {r.first, r.last});
    for (int k = 0; k < 20000; ++k) keys.push_back(rng());
    for (uint64_t key : keys) {
      const RangeMove* hit = nullptr;
      for (const RangeMove& m : moves) {
        if (m.range.Contains(key)) hit = &m;
      }
      const int a = from.OwnerOf(key), b = to.OwnerOf(key);
      if (a == b) {
        EXPECT_EQ(hit, nullptr) << key << " stays on server " << a;
      } else {
        ASSERT_NE(hit, nullptr) << key << " moves from " << a << " to " << b;
        EXPECT_EQ(hit->from, a);
        EXPECT_EQ(hit->to, b);
      }
    }
  }
  EXPECT_TRUE(MovesBetween(*Partition::Uniform(4), *Partition::Uniform(4)).empty());
}

TEST(RoutingTableTest, TakesNewerAnnouncementsOnlyAndRefusesBadServers) {
  Partition p = *Partition::Uniform(3)->WithReplicas(2);
  RoutingTable table(p);
  EXPECT_EQ(table.generation(), 0u);
  EXPECT_EQ(table.Current()->PrimaryOfOwner(1), 1);
  std::shared_ptr<const Routing> before = table.Current();

  ASSERT_TRUE(table.Update(2, {1}).ok());
  EXPECT_EQ(table.generation(), 2u);
  EXPECT_EQ(table.Current()->PrimaryOfOwner(1), 2);  // failed over to replica 1
  EXPECT_EQ(before->PrimaryOfOwner(1), 1);           // a held routing never changes
  EXPECT_TRUE(table.Current()->BackupsOfOwner(0).empty());  // owner 0's backup was server 1

  EXPECT_EQ(table.Current()->UnderReplicatedRanges(), 2);  // owner 1's range and owner 0's (backup on 1)
  EXPECT_EQ(before->UnderReplicatedRanges(), 0);
  ASSERT_TRUE(table.Update(1, {}).ok());  // older: ignored
  EXPECT_EQ(table.Current()->PrimaryOfOwner(1), 2);
  ASSERT_TRUE(table.Update(3, {}).ok());  // back in service
  EXPECT_EQ(table.Current()->PrimaryOfOwner(1), 1);

  absl::Status bad = table.Update(4, {3});
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  EXPECT_EQ(table.generation(), 3u);
  EXPECT_TRUE(absl::IsInvalidArgument(table.Update(5, {-1})));

  // Addresses: a replacement's new one moves the version; a dead server's "" keeps the one held.
  table.addresses().Update({"a:1", "b:1", "c:1"});
  const uint64_t v = table.addresses().version();
  table.addresses().Update({"a:1", "", "c:1"});
  EXPECT_EQ(table.addresses().version(), v);
  EXPECT_EQ(table.addresses().Last()[1], "b:1");
  table.addresses().Update({"a:1", "b:2", "c:1", "d:1", "e:1"});  // more than the 3 servers
  EXPECT_EQ(table.addresses().version(), v + 1);
  EXPECT_EQ(table.addresses().Last(), (std::vector<std::string>{"a:1", "b:2", "c:1"}));
}

}  // namespace
}  // namespace kestrel
