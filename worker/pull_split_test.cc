#include "worker/pull_split.h"

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "common/test_seed.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

std::vector<uint64_t> RandomKeys(std::mt19937_64& rng, size_t n, uint64_t distinct) {
  std::vector<uint64_t> keys(n);
  for (uint64_t& k : keys) k = (rng() % distinct) * 0x9e3779b97f4a7c15ULL;  // spread over every server's range
  return keys;
}

// Early and late partition next's unique keys by membership in current; each part's keys are in next's order and
// its positions find them there; Place puts every part row where a whole pull would.
TEST(PullSplitTest, PartsCoverTheNextBatchByMembershipInTheCurrent) {
  const TestSeed seed;
  std::mt19937_64 rng(seed.value());
  const Partition partition = *Partition::Uniform(3, 2);
  PullSplit split;
  for (int round = 0; round < 20; ++round) {
    const uint64_t distinct = 50 + rng() % 5000;
    KeyBatch current, next;
    current.Build(RandomKeys(rng, rng() % 3000, distinct), partition);
    next.Build(RandomKeys(rng, rng() % 3000, distinct), partition);
    split.Build(current, next, partition);
    const std::set<uint64_t> held(current.unique_keys().begin(), current.unique_keys().end());
    std::vector<int> covered(next.num_unique(), 0);
    for (const PullSplit::Part* part : {&split.early(), &split.late()}) {
      const bool late = part == &split.late();
      ASSERT_EQ(part->positions.size(), part->keys.num_unique());
      for (size_t i = 0; i < part->positions.size(); ++i) {
        const uint64_t key = part->keys.unique_keys()[i];
        ASSERT_LT(part->positions[i], next.num_unique());
        EXPECT_EQ(next.unique_keys()[part->positions[i]], key);
        EXPECT_EQ(held.count(key) == 1, late) << "key " << key;
        ++covered[part->positions[i]];
      }
      // Rows placed by position land on their keys' rows.
      std::vector<float> part_rows(part->positions.size() * 2), rows(next.num_unique() * 2, -1.0f);
      for (size_t i = 0; i < part->positions.size(); ++i) {
        part_rows[2 * i] = static_cast<float>(part->keys.unique_keys()[i] % 1000);
        part_rows[2 * i + 1] = static_cast<float>(i);
      }
      PullSplit::Place(*part, part_rows.data(), 2, rows.data());
      for (size_t i = 0; i < part->positions.size(); ++i) {
        EXPECT_EQ(rows[2 * part->positions[i]], static_cast<float>(next.unique_keys()[part->positions[i]] % 1000));
        EXPECT_EQ(rows[2 * part->positions[i] + 1], static_cast<float>(i));
      }
    }
    EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }));
  }
}

}  // namespace
}  // namespace kestrel
