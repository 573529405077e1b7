#include "server/disk_tier.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/test_seed.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "server/checkpoint_rows.h"
#include "server/cut_memory.h"
#include "server/store_testing.h"

namespace kestrel {
namespace {

constexpr int kFloats = 3;

std::vector<float> RowsOf(const std::vector<uint64_t>& keys, float salt) {
  std::vector<float> rows;
  for (uint64_t k : keys) {
    for (int f = 0; f < kFloats; ++f) rows.push_back(static_cast<float>(k) * 10 + f + salt);
  }
  return rows;
}

// A working store and a disk tier writing into it.
class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir("disk_tier");
    db_ = OpenTestStore(dir_ + "/store");
    ASSERT_NE(db_, nullptr);
    tier_ = std::make_unique<DiskTier>(dir_ + "/cold", /*shard=*/5);
    tier_->Attach(db_.get());
  }
  void TearDown() override {
    tier_->Detach();
    tier_.reset();
    db_.reset();
  }

  // The row the store holds for `key` of `table`, empty when none.
  std::vector<float> Stored(absl::string_view table, uint64_t key) {
    std::string stored_key, value;
    AppendRowKey(table, key, &stored_key);
    if (!db_->Get(rocksdb::ReadOptions(), stored_key, &value).ok()) return {};
    std::vector<float> row(value.size() / sizeof(float));
    std::memcpy(row.data(), value.data(), value.size());
    return row;
  }

  // The rows Read answers for `keys` (found ones; others stay -1), and which were found.
  std::vector<float> Read(absl::string_view table, const std::vector<uint64_t>& keys, std::vector<uint8_t>* found) {
    std::vector<float> rows(keys.size() * kFloats, -1.0f);
    EXPECT_TRUE(tier_->Read(table, keys, kFloats, rows.data(), found).ok());
    return rows;
  }

  std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<DiskTier> tier_;
};

TEST_F(DiskTierTest, RowsAreInTheFileAndTheStoreAlike) {
  const std::vector<uint64_t> keys = {4, 8, 15};
  ASSERT_TRUE(tier_->Write("emb", keys, RowsOf(keys, 0.5f)).ok());
  std::vector<uint8_t> found;
  std::vector<float> rows = Read("emb", {8, 16, 4}, &found);
  EXPECT_EQ(found, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(std::vector<float>(rows.begin(), rows.begin() + kFloats), RowsOf({8}, 0.5f));
  EXPECT_EQ(std::vector<float>(rows.begin() + kFloats, rows.begin() + 2 * kFloats), std::vector<float>(kFloats, -1))
      << "a key not held leaves its row untouched";
  EXPECT_EQ(Stored("emb", 15), RowsOf({15}, 0.5f));
  EXPECT_EQ(tier_->file_stats().rows, 3u);
  EXPECT_GT(tier_->file_stats().file_bytes, 0u);

  ASSERT_TRUE(tier_->Delete("emb", {8, 99}).ok());
  rows = Read("emb", {8, 4}, &found);
  EXPECT_EQ(found, (std::vector<uint8_t>{0, 1}));
  EXPECT_TRUE(Stored("emb", 8).empty());
  EXPECT_EQ(tier_->file_stats().rows, 2u);
  rows = Read("other", {4}, &found);
  EXPECT_EQ(found, std::vector<uint8_t>{0}) << "a table without a file holds nothing";
}

TEST_F(DiskTierTest, RefusesBadRowsNamesAndWidths) {
  const absl::Status ragged = tier_->Write("emb", {1, 2}, std::vector<float>(5, 1.0f));
  EXPECT_EQ(ragged.code(), absl::StatusCode::kInvalidArgument) << ragged;
  EXPECT_TRUE(absl::StrContains(ragged.message(), "server 5")) << ragged;
  EXPECT_EQ(tier_->Write("", {1}, RowsOf({1}, 0)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier_->Write(std::string(DiskTier::kMaxTableName + 1, 't'), {1}, RowsOf({1}, 0)).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(tier_->Write(std::string(DiskTier::kMaxTableName, 't'), {1}, RowsOf({1}, 0)).ok());
  ASSERT_TRUE(tier_->Write("emb", {1}, RowsOf({1}, 0)).ok());
  const absl::Status wider = tier_->Write("emb", {2}, std::vector<float>(kFloats + 1, 1.0f));
  EXPECT_EQ(wider.code(), absl::StatusCode::kFailedPrecondition) << wider;
  EXPECT_TRUE(Stored("emb", 2).empty()) << "nothing written";
  std::vector<float> rows(kFloats + 1);
  std::vector<uint8_t> found;
  EXPECT_EQ(tier_->Read("emb", {1}, kFloats + 1, rows.data(), &found).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(tier_->Write("emb", {}, {}).ok());
}

TEST_F(DiskTierTest, WritesIntoTheStoreWaitWhileACutIsWritten) {
  CutMemory memory;
  ASSERT_TRUE(tier_->Write("emb", {1}, RowsOf({1}, 0)).ok());
  tier_->StartDeferring(&memory);
  ASSERT_TRUE(tier_->Write("emb", {2}, RowsOf({2}, 0)).ok());
  ASSERT_TRUE(tier_->Delete("emb", {1}).ok());
  EXPECT_EQ(Stored("emb", 1), RowsOf({1}, 0)) << "the store is as of the cut";
  EXPECT_TRUE(Stored("emb", 2).empty());
  EXPECT_GT(memory.bytes(), 0u) << "held back writes count in the cut's memory";
  std::vector<uint8_t> found;
  Read("emb", {1, 2}, &found);
  EXPECT_EQ(found, (std::vector<uint8_t>{0, 1})) << "reads are served by the files, which stay current";
  ASSERT_TRUE(tier_->ApplyDeferred().ok());
  EXPECT_EQ(memory.bytes(), 0u);
  EXPECT_TRUE(Stored("emb", 1).empty());
  EXPECT_EQ(Stored("emb", 2), RowsOf({2}, 0));
  ASSERT_TRUE(tier_->Write("emb", {3}, RowsOf({3}, 0)).ok());
  EXPECT_EQ(Stored("emb", 3), RowsOf({3}, 0)) << "no longer held back";
}

TEST_F(DiskTierTest, HeldBackWritesThatFailAreDroppedAndTheirMemoryFreed) {
  CutMemory memory;
  tier_->StartDeferring(&memory);
  ASSERT_TRUE(tier_->Write("emb", {2}, RowsOf({2}, 0)).ok());
  tier_->TEST_FailHeldBackWrites(true);
  EXPECT_EQ(tier_->ApplyDeferred().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(memory.bytes(), 0u);
  EXPECT_TRUE(Stored("emb", 2).empty());
  EXPECT_TRUE(tier_->ApplyDeferred().ok()) << "nothing left to apply";
}

TEST_F(DiskTierTest, DetachForgetsTheFilesAndTheHeldBackWrites) {
  CutMemory memory;
  ASSERT_TRUE(tier_->Write("emb", {1}, RowsOf({1}, 0)).ok());
  tier_->StartDeferring(&memory);
  ASSERT_TRUE(tier_->Write("emb", {2}, RowsOf({2}, 0)).ok());
  tier_->Detach();
  EXPECT_EQ(memory.bytes(), 0u);
  EXPECT_EQ(tier_->file_stats().rows, 0u);
  tier_->Attach(db_.get());
  std::vector<uint8_t> found;
  Read("emb", {1, 2}, &found);
  EXPECT_EQ(found, (std::vector<uint8_t>{0, 0}));
  ASSERT_TRUE(tier_->Write("emb", {3}, std::vector<float>(kFloats + 2, 1.0f)).ok()) << "a new width after Detach";
  EXPECT_FALSE(Stored("emb", 3).empty()) << "writes are no longer held back";
}

// Random writes and deletes against a shadow: the files and the store answer the same rows.
TEST_F(DiskTierTest, RandomUpdatesReadTheSameFromTheFilesAndTheStore) {
  const TestSeed seed;
  std::mt19937_64 rng(seed.value());
  std::map<uint64_t, std::vector<float>> shadow;
  for (int step = 0; step < 300; ++step) {
    std::vector<uint64_t> keys;
    for (uint64_t k = rng() % 8; k < 400; k += 1 + rng() % 40) keys.push_back(k);
    if (rng() % 3 == 0) {
      ASSERT_TRUE(tier_->Delete("emb", keys).ok());
      for (uint64_t k : keys) shadow.erase(k);
    } else {
      const std::vector<float> rows = RowsOf(keys, static_cast<float>(step));
      ASSERT_TRUE(tier_->Write("emb", keys, rows).ok());
      for (size_t i = 0; i < keys.size(); ++i) {
        shadow[keys[i]].assign(rows.begin() + i * kFloats, rows.begin() + (i + 1) * kFloats);
      }
    }
  }
  std::vector<uint64_t> all;
  for (uint64_t k = 0; k < 400; ++k) all.push_back(k);
  std::vector<uint8_t> from_files, from_store;
  const std::vector<float> files = Read("emb", all, &from_files);
  tier_->TEST_ReadFromStore(true);
  const std::vector<float> store = Read("emb", all, &from_store);
  tier_->TEST_ReadFromStore(false);
  EXPECT_EQ(from_files, from_store);
  EXPECT_EQ(files, store);
  for (uint64_t k : all) {
    ASSERT_EQ(from_files[k] != 0, shadow.count(k) > 0) << k;
    if (from_files[k]) {
      ASSERT_EQ(std::vector<float>(files.begin() + k * kFloats, files.begin() + (k + 1) * kFloats), shadow[k]) << k;
    }
  }
  EXPECT_EQ(tier_->file_stats().rows, shadow.size());
}

}  // namespace
}  // namespace kestrel
