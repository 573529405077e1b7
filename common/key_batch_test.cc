#include "common/key_batch.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/partition.h"
#include "common/test_seed.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

Partition MustUniform(int num_servers, int ranges_per_server) {
  auto p = Partition::Uniform(num_servers, ranges_per_server);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

// `n` keys drawn from `distinct` feature keys (so most keys repeat), in random order, plus the extremes.
std::vector<uint64_t> RandomKeys(size_t n, int distinct, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pick(0, distinct - 1);
  std::vector<uint64_t> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(Partition::FeatureKey(pick(rng)));
  if (n >= 4) {
    keys[n / 4] = 0;
    keys[n / 2] = std::numeric_limits<uint64_t>::max();
    keys[3 * n / 4] = 0;
  }
  return keys;
}

// An integer value (< 2^23, so exact in float) for element j of the row of `key`; distinct keys almost
// always get distinct values.
float RowValue(uint64_t key, int j) { return static_cast<float>((key >> 44) * 8 + j); }

// Checks everything Build() promises against a naive reference built with std::set.
void ExpectValidBatch(const KeyBatch& batch, const std::vector<uint64_t>& keys, const Partition& p) {
  const std::set<uint64_t> reference(keys.begin(), keys.end());
  ASSERT_EQ(batch.num_servers(), p.num_servers());
  ASSERT_EQ(batch.num_keys(), keys.size());
  ASSERT_EQ(batch.num_unique(), reference.size());
  ASSERT_EQ(batch.unique_keys().size(), reference.size());
  ASSERT_EQ(batch.inverse().size(), keys.size());

  // Groups: contiguous, in server order, strictly increasing, each key owned by its group's server.
  size_t offset = 0;
  for (int s = 0; s < p.num_servers(); ++s) {
    EXPECT_EQ(batch.offset_of(s), offset) << "server " << s;
    const auto group = batch.keys_of(s);
    ASSERT_EQ(group.data(), batch.unique_keys().data() + offset) << "server " << s;
    for (size_t i = 0; i < group.size(); ++i) {
      EXPECT_EQ(p.OwnerOf(group[i]), s) << "server " << s << " key " << group[i];
      if (i > 0) {
        EXPECT_LT(group[i - 1], group[i]) << "server " << s << " position " << i;
      }
    }
    offset += group.size();
  }
  EXPECT_EQ(offset, batch.num_unique());

  // The unique keys are exactly the input's distinct keys.
  const std::set<uint64_t> unique(batch.unique_keys().begin(), batch.unique_keys().end());
  EXPECT_EQ(unique, reference);

  // inverse() maps every input position to its own key.
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_LT(batch.inverse()[i], batch.num_unique()) << i;
    EXPECT_EQ(batch.unique_keys()[batch.inverse()[i]], keys[i]) << i;
  }

  // identity(): the unique keys are the input itself.
  if (batch.identity()) {
    EXPECT_EQ(std::vector<uint64_t>(batch.unique_keys().begin(), batch.unique_keys().end()), keys);
    for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(batch.inverse()[i], i);
  }
}

void ExpectScatterCorrect(const KeyBatch& batch, const std::vector<uint64_t>& keys, int dim) {
  std::vector<float> unique_rows(batch.num_unique() * dim);
  for (size_t u = 0; u < batch.num_unique(); ++u) {
    for (int j = 0; j < dim; ++j) unique_rows[u * dim + j] = RowValue(batch.unique_keys()[u], j);
  }
  std::vector<float> out(keys.size() * dim, -1.0f);
  batch.Scatter(unique_rows.data(), dim, out.data());
  for (size_t i = 0; i < keys.size(); ++i) {
    for (int j = 0; j < dim; ++j) ASSERT_EQ(out[i * dim + j], RowValue(keys[i], j)) << i << "," << j;
  }
}

void ExpectReduceCorrect(const KeyBatch& batch, const std::vector<uint64_t>& keys, int dim) {
  // Integer-valued gradients so float sums are exact and comparable with ==.
  std::vector<float> grads(keys.size() * dim);
  std::map<uint64_t, std::vector<double>> reference;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto& sum = reference[keys[i]];
    sum.resize(dim, 0.0);
    for (int j = 0; j < dim; ++j) {
      grads[i * dim + j] = static_cast<float>(static_cast<int>(i % 7) - 3 + j);
      sum[j] += grads[i * dim + j];
    }
  }
  std::vector<float> unique_grads(batch.num_unique() * dim, 12345.0f);  // Reduce must overwrite, not add
  batch.Reduce(grads.data(), dim, unique_grads.data());
  for (size_t u = 0; u < batch.num_unique(); ++u) {
    const auto& expected = reference.at(batch.unique_keys()[u]);
    for (int j = 0; j < dim; ++j) ASSERT_EQ(unique_grads[u * dim + j], expected[j]) << u << "," << j;
  }
}

void ExpectAllCorrect(const KeyBatch& batch, const std::vector<uint64_t>& keys, const Partition& p) {
  ExpectValidBatch(batch, keys, p);
  ExpectScatterCorrect(batch, keys, 3);
  ExpectReduceCorrect(batch, keys, 3);
}

TEST(KeyBatchTest, RandomBatchesWithDuplicatesMatchReference) {
  uint64_t seed = 1;
  for (int servers : {1, 2, 5}) {
    for (int ranges_per_server : {1, 3}) {
      const Partition p = MustUniform(servers, ranges_per_server);
      for (size_t n : {1, 2, 17, 1000, 5000}) {
        const uint64_t keys_seed = seed++;
        SCOPED_TRACE(absl::StrCat("servers=", servers, " ranges_per_server=", ranges_per_server, " n=", n,
                                  " seed=", keys_seed));
        const std::vector<uint64_t> keys = RandomKeys(n, /*distinct=*/static_cast<int>(n / 4 + 1), keys_seed);
        KeyBatch batch;
        batch.Build(keys, p);
        ExpectAllCorrect(batch, keys, p);
        EXPECT_EQ(batch.identity(), n == 1);  // larger batches have duplicates
      }
    }
  }
}

// Build dedups by hashing after a batch with many repeats and sorts every key after one with few; both ways
// must give the same batch, whatever came before.
TEST(KeyBatchTest, BothDedupWaysMatchReferenceInAnyOrder) {
  const Partition p = MustUniform(3, 2);
  const std::vector<uint64_t> repeats = RandomKeys(5000, 300, 11);      // ~6% unique
  const std::vector<uint64_t> distinct = RandomKeys(5000, 1u << 30, 12);  // nearly all unique, unsorted
  const std::vector<uint64_t> half = RandomKeys(4000, 2000, 13);
  KeyBatch batch;
  for (const std::vector<uint64_t>* keys : {&repeats, &distinct, &distinct, &repeats, &half, &distinct, &half}) {
    batch.Build(*keys, p);
    ExpectAllCorrect(batch, *keys, p);
    KeyBatch fresh;  // what a batch with no history builds
    fresh.Build(*keys, p);
    EXPECT_EQ(std::vector<uint64_t>(batch.unique_keys().begin(), batch.unique_keys().end()),
              std::vector<uint64_t>(fresh.unique_keys().begin(), fresh.unique_keys().end()));
    EXPECT_EQ(std::vector<uint32_t>(batch.inverse().begin(), batch.inverse().end()),
              std::vector<uint32_t>(fresh.inverse().begin(), fresh.inverse().end()));
  }
}

TEST(KeyBatchTest, NonUniformPartition) {
  auto p = Partition::Parse(
      "0x0-0x3fffffffffffffff:2,0x4000000000000000-0x9fffffffffffffff:0,"
      "0xa000000000000000-0xdfffffffffffffff:1,0xe000000000000000-0xffffffffffffffff:2");
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<uint64_t> keys = RandomKeys(3000, 500, 99);
  KeyBatch batch;
  batch.Build(keys, *p);
  ExpectAllCorrect(batch, keys, *p);
}

TEST(KeyBatchTest, AlreadySortedFastPath) {
  std::vector<uint64_t> keys;
  for (uint64_t i = 0; i < 2000; ++i) keys.push_back(i * (std::numeric_limits<uint64_t>::max() / 2000) + i % 3);
  ASSERT_TRUE(std::is_sorted(keys.begin(), keys.end(), std::less_equal<uint64_t>()));  // strictly increasing
  for (int servers : {1, 2, 5}) {
    for (int ranges_per_server : {1, 3}) {
      SCOPED_TRACE(absl::StrCat("servers=", servers, " ranges_per_server=", ranges_per_server));
      const Partition p = MustUniform(servers, ranges_per_server);
      KeyBatch batch;
      batch.Build(keys, p);
      ExpectAllCorrect(batch, keys, p);
      // Already grouped unless a server owns several slices of the key space.
      EXPECT_EQ(batch.identity(), servers == 1 || ranges_per_server == 1);
      if (batch.identity()) {
        for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(batch.inverse()[i], i);
      }
    }
  }
}

TEST(KeyBatchTest, SortedWithDuplicatesIsNotTheFastPath) {
  const std::vector<uint64_t> keys = {1, 1, 2, 5, 5, 5, 0xf000000000000000ULL, 0xf000000000000000ULL};
  const Partition p = MustUniform(2, 3);
  KeyBatch batch;
  batch.Build(keys, p);
  ExpectAllCorrect(batch, keys, p);
  EXPECT_EQ(batch.num_unique(), 4u);
  EXPECT_FALSE(batch.identity());
}

TEST(KeyBatchTest, SingleKey) {
  const std::vector<uint64_t> keys = {0x9000000000000000ULL};
  const Partition p = MustUniform(2, 1);
  KeyBatch batch;
  batch.Build(keys, p);
  ExpectAllCorrect(batch, keys, p);
  EXPECT_EQ(batch.keys_of(0).size(), 0u);
  EXPECT_EQ(batch.keys_of(1).size(), 1u);
  EXPECT_TRUE(batch.identity());
}

TEST(KeyBatchTest, EmptyBatch) {
  const Partition p = MustUniform(3, 2);
  KeyBatch batch;
  batch.Build({}, p);
  EXPECT_EQ(batch.num_keys(), 0u);
  EXPECT_EQ(batch.num_unique(), 0u);
  EXPECT_EQ(batch.num_servers(), 3);
  EXPECT_TRUE(batch.identity());
  for (int s = 0; s < 3; ++s) {
    EXPECT_TRUE(batch.keys_of(s).empty());
    EXPECT_EQ(batch.offset_of(s), 0u);
  }
  float dummy = 7.0f;
  batch.Scatter(&dummy, 1, &dummy);
  batch.Reduce(&dummy, 1, &dummy);
  EXPECT_EQ(dummy, 7.0f);
}

TEST(KeyBatchTest, ScatterAndReduceSmallExample) {
  const Partition p = MustUniform(2, 1);
  const uint64_t a = 0x1000000000000000ULL, b = 0x9000000000000000ULL, c = 0x2000000000000000ULL;
  const std::vector<uint64_t> keys = {b, a, b, c, a, b};
  KeyBatch batch;
  batch.Build(keys, p);
  ASSERT_EQ(batch.num_unique(), 3u);
  EXPECT_EQ(std::vector<uint64_t>(batch.unique_keys().begin(), batch.unique_keys().end()),
            (std::vector<uint64_t>{a, c, b}));
  EXPECT_EQ(std::vector<uint32_t>(batch.inverse().begin(), batch.inverse().end()),
            (std::vector<uint32_t>{2, 0, 2, 1, 0, 2}));
  EXPECT_FALSE(batch.identity());

  const std::vector<float> unique_rows = {1, 10, 2, 20, 3, 30};  // a, c, b; dim 2
  std::vector<float> out(12);
  batch.Scatter(unique_rows.data(), 2, out.data());
  EXPECT_EQ(out, (std::vector<float>{3, 30, 1, 10, 3, 30, 2, 20, 1, 10, 3, 30}));

  const std::vector<float> grads = {1, -1, 2, -2, 4, -4, 8, -8, 16, -16, 32, -32};
  std::vector<float> unique_grads(6);
  batch.Reduce(grads.data(), 2, unique_grads.data());
  EXPECT_EQ(unique_grads, (std::vector<float>{18, -18, 8, -8, 37, -37}));
}

TEST(KeyBatchTest, BuildReusedOnDifferentBatches) {
  const Partition p5 = MustUniform(5, 3);
  const Partition p2 = MustUniform(2, 1);
  const std::vector<uint64_t> big = RandomKeys(6000, 1500, 7);
  const std::vector<uint64_t> small = RandomKeys(50, 10, 8);
  std::vector<uint64_t> sorted;
  for (uint64_t i = 1; i <= 300; ++i) sorted.push_back(i << 52);

  KeyBatch batch;
  batch.Build(big, p5);
  ExpectAllCorrect(batch, big, p5);
  batch.Build(small, p5);
  ExpectAllCorrect(batch, small, p5);
  EXPECT_FALSE(batch.identity());
  batch.Build(sorted, p5);  // covers the first two ranges only, owned by servers 0 and 1: grouped
  ExpectAllCorrect(batch, sorted, p5);
  EXPECT_TRUE(batch.identity());
  batch.Build(big, p2);
  ExpectAllCorrect(batch, big, p2);
  EXPECT_FALSE(batch.identity());
  batch.Build({}, p5);
  ExpectValidBatch(batch, {}, p5);
  batch.Build(small, p2);
  ExpectAllCorrect(batch, small, p2);
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

TEST(KeyBatchSortTest, SortByKeyMatchesStdSortOnKeys) {
  const TestSeed seed(42);
  std::mt19937_64 rng(seed.value());
  for (size_t n : {0, 1, 5, 511, 512, 513, 4096, 100000}) {
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<std::pair<uint64_t, uint32_t>> a(n), tmp;
      for (size_t i = 0; i < n; ++i) {
        uint64_t k = rng();
        if (kind == 1) k %= 1000;                     // many duplicates, high digits all zero
        if (kind == 2) k = (k % 7) << 60 | (k % 3);  // only the top and bottom digits vary
        a[i] = {k, static_cast<uint32_t>(i)};
      }
      auto expected = a;
      std::stable_sort(expected.begin(), expected.end(),
                       [](const auto& x, const auto& y) { return x.first < y.first; });
      KeyBatch::SortByKey(&a, &tmp);
      ASSERT_EQ(a.size(), n);
      // Equal keys keep their input order (the BSP aggregator's rank-order sums rely on it).
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(a[i], expected[i]) << n << " " << kind << " " << i;
      // Every position appears once.
      std::vector<bool> seen(n, false);
      for (const auto& e : a) {
        ASSERT_FALSE(seen[e.second]);
        seen[e.second] = true;
      }
    }
  }
}

}  // namespace
}  // namespace kestrel
