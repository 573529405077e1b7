#include "server/bsp_undo.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "common/partition.h"
#include "common/test_seed.h"
#include "gtest/gtest.h"
#include "proto/table.pb.h"
#include "server/bsp_aggregator.h"
#include "server/table.h"
#include "server/tables_testing.h"
#include "server/tier_health.h"

namespace kestrel {
namespace {

constexpr int kDim = 2;

BspAggregator::Batch Batch(int64_t clock, std::vector<uint64_t> keys, float grad) {
  BspAggregator::Batch batch;
  batch.clock = clock;
  batch.keys = std::move(keys);
  batch.grads.assign(batch.keys.size() * kDim, grad);
  return batch;
}

std::vector<float> Pull(const BspUndo& undo, const Table& table, const std::vector<uint64_t>& keys, int64_t clock) {
  std::vector<float> out(keys.size() * kDim, -1234.0f);
  EXPECT_TRUE(undo.Pull(table, keys, clock, out.data()).ok());
  return out;
}

TEST(BspUndoTest, APullForTheLastClockAppliedSeesTheRowsBeforeIt) {
  auto table = MustCreateTable(ZeroSgdTable("emb", kDim));
  BspUndo undo;
  TierHealth health(0);
  ASSERT_TRUE(undo.Apply(*table, Batch(0, {1, 5, 9}, 1.0f), health).ok());
  // Clock 0 was applied: a (replacement's) pull for clock 0 sees the rows before it; a pull for clock 1 now.
  EXPECT_EQ(Pull(undo, *table, {1, 3, 5}, 0), std::vector<float>(6, 0.0f));
  EXPECT_EQ(Pull(undo, *table, {1, 3, 5}, 1), (std::vector<float>{-1, -1, 0, 0, -1, -1}));
  ASSERT_TRUE(undo.Apply(*table, Batch(1, {5}, 2.0f), health).ok());
  EXPECT_EQ(Pull(undo, *table, {1, 5}, 1), (std::vector<float>{-1, -1, -1, -1})) << "only key 5 changed at 1";
  EXPECT_EQ(Pull(undo, *table, {1, 5}, 0), (std::vector<float>{-1, -1, -3, -3})) << "clock 0's record is gone";
  EXPECT_TRUE(health.Check().ok());
  undo.Clear();
  EXPECT_EQ(Pull(undo, *table, {1, 5}, 1), (std::vector<float>{-1, -1, -3, -3})) << "cleared";
}

TEST(BspUndoTest, DenseBlockKeysAreLookedUpInAnyOrder) {
  auto table = MustCreateTable(ZeroSgdDenseTable("mlp", kDim, /*blocks=*/8));
  std::vector<uint64_t> blocks;
  for (uint64_t b = 0; b < table->num_blocks(); ++b) blocks.push_back(Partition::DenseBlockKey("mlp", b));
  std::vector<uint64_t> sorted = {blocks[2], blocks[5], blocks[6]};
  std::sort(sorted.begin(), sorted.end());
  BspUndo undo;
  TierHealth health(0);
  ASSERT_TRUE(undo.Apply(*table, Batch(3, sorted, 1.0f), health).ok());
  // Block keys in block order, not key order (a dense pull's).
  const std::vector<uint64_t> asked = {blocks[1], blocks[2], blocks[5], blocks[6], blocks[7]};
  EXPECT_EQ(Pull(undo, *table, asked, 3), std::vector<float>(asked.size() * kDim, 0.0f));
  EXPECT_EQ(Pull(undo, *table, asked, 4), (std::vector<float>{0, 0, -1, -1, -1, -1, -1, -1, 0, 0}));
}

// Random clocks of random batches against a shadow of every row: a pull for the last clock applied sees the
// shadow as it was before that clock, any other pull the shadow now.
TEST(BspUndoTest, RandomClocksMatchAShadow) {
  const TestSeed seed;
  std::mt19937_64 rng(seed.value());
  auto table = MustCreateTable(ZeroSgdTable("emb", kDim));
  BspUndo undo;
  TierHealth health(0);
  std::map<uint64_t, float> now, before;  // one value per row (every element gets the same gradient)
  auto shadow = [](const std::map<uint64_t, float>& rows, const std::vector<uint64_t>& keys) {
    std::vector<float> out;
    for (uint64_t k : keys) {
      auto it = rows.find(k);
      out.insert(out.end(), kDim, it == rows.end() ? 0.0f : it->second);
    }
    return out;
  };
  auto some_keys = [&rng] {
    std::vector<uint64_t> keys(1 + rng() % 20);
    for (uint64_t& k : keys) k = rng() % 64;
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    return keys;
  };
  for (int64_t clock = 0; clock < 200; ++clock) {
    const std::vector<uint64_t> keys = some_keys();
    const float grad = static_cast<float>(rng() % 7) - 3.0f;
    before = now;
    for (uint64_t k : keys) now[k] -= grad;
    ASSERT_TRUE(undo.Apply(*table, Batch(clock, keys, grad), health).ok());
    const std::vector<uint64_t> asked = some_keys();
    ASSERT_EQ(Pull(undo, *table, asked, clock), shadow(before, asked)) << "clock " << clock;
    ASSERT_EQ(Pull(undo, *table, asked, clock + 1), shadow(now, asked)) << "clock " << clock;
  }
}

// A ColdTier whose reads fail once told to.
class FlakyTier : public ColdTier {
 public:
  absl::Status Write(absl::string_view, absl::Span<const uint64_t> keys, absl::Span<const float>) override {
    written += keys.size();
    return absl::OkStatus();
  }
  absl::Status Read(absl::string_view, absl::Span<const uint64_t>, int, float*, std::vector<uint8_t>*) override {
    return fail ? absl::UnavailableError("disk gone") : absl::OkStatus();
  }
  absl::Status Delete(absl::string_view, absl::Span<const uint64_t>) override { return absl::OkStatus(); }
  bool fail = false;
  size_t written = 0;
};

TEST(BspUndoTest, AFailedApplyIsRecordedInTheTiersHealth) {
  TableConfig config = ZeroSgdTable("emb", kDim);
  config.mutable_capacity()->set_max_memory_bytes(64 << 10);
  config.mutable_capacity()->set_max_disk_bytes(64 << 20);
  auto table = MustCreateTable(config);
  table->SetMemoryBudget(64 << 10);
  FlakyTier disk;
  table->SetColdTier(&disk);
  BspUndo undo;
  TierHealth health(/*owner=*/2);
  std::vector<uint64_t> all;
  for (int64_t clock = 0; disk.written == 0; ++clock) {
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < 500; ++k) keys.push_back(clock * 500 + k);
    all.insert(all.end(), keys.begin(), keys.end());
    ASSERT_TRUE(undo.Apply(*table, Batch(clock, keys, 1.0f), health).ok());
    ASSERT_LT(clock, 10000) << "nothing moved to disk";
  }
  disk.fail = true;
  const absl::Status failed = undo.Apply(*table, Batch(1 << 20, all, 1.0f), health);
  EXPECT_EQ(failed.code(), absl::StatusCode::kFailedPrecondition) << failed;
  EXPECT_TRUE(absl::StrContains(failed.message(), "disk gone")) << failed;
  EXPECT_EQ(health.Check(), failed);
}

}  // namespace
}  // namespace kestrel
