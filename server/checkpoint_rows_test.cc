#include "server/checkpoint_rows.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "common/test_seed.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/iterator.h"
#include "rocksdb/options.h"
#include "server/store_testing.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

// The bytes every checkpoint holds: a change here breaks them all.
TEST(CheckpointRowsTest, TheFormatIsPinned) {
  std::string key;
  AppendRowKey("emb", 0x0102030405060708, &key);
  EXPECT_EQ(key, std::string("emb\0\x01\x02\x03\x04\x05\x06\x07\x08", 12));
  AppendRowKey("t", 0, &key);
  EXPECT_EQ(key, std::string("t\0\0\0\0\0\0\0\0\0", 10)) << "AppendRowKey replaces what `out` held";
  EXPECT_EQ(SketchPrefix(), std::string("\x01sketch\0", 8));
  EXPECT_EQ(kMetaPrefix, '\x01');
  EXPECT_EQ(kTablesStart, absl::string_view("\x02"));
  EXPECT_LT(SketchPrefix(), std::string(kTablesStart)) << "metadata sorts before every row";
  for (char first : std::string("AZaz09_.-")) {
    EXPECT_GT(std::string(1, first), std::string(kTablesStart)) << first;
  }
}

TEST(CheckpointRowsTest, ParseRowKeyRefusesWhatIsNotARowKey) {
  absl::string_view table;
  uint64_t key = 0;
  EXPECT_FALSE(ParseRowKey(rocksdb::Slice(std::string("t\0\0\0\0\0\0\0\0", 9)), &table, &key)) << "too short";
  EXPECT_FALSE(ParseRowKey(rocksdb::Slice(std::string("ta\0\0\0\0\0\0\0\0", 10)), &table, &key))
      << "no zero byte before the key";
  const std::string sketch = SketchPrefix() + "emb";
  EXPECT_FALSE(ParseRowKey(rocksdb::Slice(sketch), &table, &key));
}

// Random tables and keys: parsing gives back what was appended, and stored keys sort as (table, key).
TEST(CheckpointRowsTest, RandomKeysRoundTripAndSortByTableThenKey) {
  const TestSeed seed;
  std::mt19937_64 rng(seed.value());
  const std::string alphabet = "abcXYZ019_.-";
  std::vector<std::pair<std::string, uint64_t>> rows;
  for (int i = 0; i < 2000; ++i) {
    std::string table(1 + rng() % 12, 'a');
    for (char& c : table) c = alphabet[rng() % alphabet.size()];
    const uint64_t key = rng() % 3 == 0 ? rng() % 300 : rng();
    rows.emplace_back(table, key);
    std::string stored;
    AppendRowKey(table, key, &stored);
    absl::string_view parsed_table;
    uint64_t parsed_key = 0;
    ASSERT_TRUE(ParseRowKey(rocksdb::Slice(stored), &parsed_table, &parsed_key)) << table << " " << key;
    ASSERT_EQ(parsed_table, table);
    ASSERT_EQ(parsed_key, key);
  }
  for (int i = 0; i + 1 < static_cast<int>(rows.size()); ++i) {
    std::string a, b;
    AppendRowKey(rows[i].first, rows[i].second, &a);
    AppendRowKey(rows[i + 1].first, rows[i + 1].second, &b);
    if (rows[i].first == rows[i + 1].first) {
      ASSERT_EQ(a < b, rows[i].second < rows[i + 1].second) << "a table's rows are in key order";
    }
    // Different tables: every row of one sorts before every row of the other (the zero byte ends the name).
    std::string a_last, b_first;
    AppendRowKey(rows[i].first, ~uint64_t{0}, &a_last);
    AppendRowKey(rows[i + 1].first, 0, &b_first);
    if (rows[i].first < rows[i + 1].first) ASSERT_LT(a_last, b_first) << rows[i].first << " " << rows[i + 1].first;
  }
}

TEST(CheckpointRowsTest, RocksStatusesMapToDataLossOrUnavailable) {
  EXPECT_TRUE(FromRocks(rocksdb::Status::OK(), "x").ok());
  const absl::Status corrupt = FromRocks(rocksdb::Status::Corruption("bad block"), "reading ckpt");
  EXPECT_EQ(corrupt.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StartsWith(corrupt.message(), "reading ckpt: ")) << corrupt;
  EXPECT_TRUE(absl::StrContains(corrupt.message(), "bad block")) << corrupt;
  EXPECT_EQ(FromRocks(rocksdb::Status::NotFound("f"), "x").code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(FromRocks(rocksdb::Status::PathNotFound("f"), "x").code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(FromRocks(rocksdb::Status::IOError("disk"), "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(StoreWriteOptions().disableWAL);
  EXPECT_TRUE(SnapshotReadOptions().verify_checksums);
  EXPECT_FALSE(SnapshotReadOptions().fill_cache);
}

TEST(CheckpointRowsTest, OpenSnapshotReadsWithoutWritingALog) {
  const std::string dir = FreshTestDir("checkpoint_rows") + "/snapshot";
  {
    std::unique_ptr<rocksdb::DB> db = OpenTestStore(dir);
    ASSERT_NE(db, nullptr);
    std::string key;
    AppendRowKey("emb", 7, &key);
    ASSERT_TRUE(db->Put(StoreWriteOptions(), key, "row!").ok());
    ASSERT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (absl::StartsWith(entry.path().filename().string(), "LOG")) fs::remove(entry.path());
  }
  absl::StatusOr<std::unique_ptr<rocksdb::DB>> db = OpenSnapshot(dir, "the test's snapshot");
  ASSERT_TRUE(db.ok()) << db.status();
  std::unique_ptr<rocksdb::Iterator> it((*db)->NewIterator(SnapshotReadOptions()));
  it->Seek(rocksdb::Slice(kTablesStart.data(), kTablesStart.size()));
  ASSERT_TRUE(it->Valid());
  absl::string_view table;
  uint64_t key = 0;
  ASSERT_TRUE(ParseRowKey(it->key(), &table, &key));
  EXPECT_EQ(table, "emb");
  EXPECT_EQ(key, 7u);
  EXPECT_EQ(it->value().ToString(), "row!");
  it.reset();
  db->reset();
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    EXPECT_FALSE(absl::StartsWith(entry.path().filename().string(), "LOG")) << entry.path();
  }
  const absl::Status missing = OpenSnapshot(dir + "/nothing", "shard 9").status();
  EXPECT_FALSE(missing.ok());
  EXPECT_TRUE(absl::StartsWith(missing.message(), "shard 9: cannot open")) << missing;
}

}  // namespace
}  // namespace kestrel
