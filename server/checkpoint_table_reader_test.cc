#include "server/checkpoint_table_reader.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "common/checkpoint_layout.h"
#include "gtest/gtest.h"
#include "proto/checkpoint.pb.h"
#include "proto/table.pb.h"
#include "rocksdb/db.h"
#include "server/checkpoint_row_codec.h"
#include "server/checkpoint_rows.h"
#include "server/store_testing.h"

namespace kestrel {
namespace {

constexpr uint64_t kSequence = 3;

TableConfig Config(const std::string& name, CheckpointCodec codec = CHECKPOINT_FP32) {
  TableConfig c;
  c.set_name(name);
  c.set_dim(4);
  c.mutable_initializer()->set_type(InitializerConfig::ZEROS);
  c.mutable_optimizer()->set_type(OptimizerConfig::SGD);
  c.mutable_optimizer()->set_learning_rate(1.0f);
  c.set_checkpoint_codec(codec);
  return c;
}

std::string Raw(const std::vector<float>& row) {
  return std::string(reinterpret_cast<const char*>(row.data()), row.size() * sizeof(float));
}

// A checkpoint's shard directory, written directly in the rows' encoding.
class CheckpointTableReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = FreshTestDir("checkpoint_table_reader");
    layout_ = std::make_unique<CheckpointLayout>(root_);
    manifest_.set_sequence(kSequence);
  }

  // Writes `entries` (stored key, value) as shard `shard`'s part.
  void WriteShard(int shard, const std::vector<std::pair<std::string, std::string>>& entries) {
    const std::string dir = layout_->ShardDir(CheckpointLayout::CheckpointName(kSequence), shard);
    std::unique_ptr<rocksdb::DB> db = OpenTestStore(dir);
    ASSERT_NE(db, nullptr);
    for (const auto& [key, value] : entries) ASSERT_TRUE(db->Put(StoreWriteOptions(), key, value).ok());
  }

  static std::string Key(absl::string_view table, uint64_t key) {
    std::string out;
    AppendRowKey(table, key, &out);
    return out;
  }

  std::string root_;
  std::unique_ptr<CheckpointLayout> layout_;
  CheckpointManifest manifest_;
};

TEST_F(CheckpointTableReaderTest, StreamsOneTableOrAllInKeyOrder) {
  *manifest_.add_tables() = Config("a");
  *manifest_.add_tables() = Config("b");
  AdmissionSketchState sketch;
  sketch.set_key_lo(1);
  sketch.set_key_hi(99);
  WriteShard(1, {{Key("b", 9), Raw({9, 9, 9, 9})},
                 {Key("a", 300), Raw({3, 0, 0, 0})},
                 {Key("a", 2), Raw({2, 0, 0, 0})},
                 {SketchPrefix() + "b", sketch.SerializeAsString()}});

  auto reader = CheckpointTableReader::Open(*layout_, manifest_, 1, "a");
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_TRUE(absl::StrContains((*reader)->where(), "server 1")) << (*reader)->where();
  std::vector<std::pair<std::string, uint64_t>> seen;
  while ((*reader)->Valid()) {
    seen.emplace_back(std::string((*reader)->table()), (*reader)->key());
    EXPECT_EQ((*reader)->row()[0], static_cast<float>((*reader)->key() == 2 ? 2 : 3));
    ASSERT_TRUE((*reader)->Next().ok());
  }
  EXPECT_EQ(seen, (std::vector<std::pair<std::string, uint64_t>>{{"a", 2}, {"a", 300}}));

  reader = CheckpointTableReader::Open(*layout_, manifest_, 1, "");
  ASSERT_TRUE(reader.ok()) << reader.status();
  seen.clear();
  while ((*reader)->Valid()) {
    seen.emplace_back(std::string((*reader)->table()), (*reader)->key());
    ASSERT_TRUE((*reader)->Next().ok());
  }
  EXPECT_EQ(seen, (std::vector<std::pair<std::string, uint64_t>>{{"a", 2}, {"a", 300}, {"b", 9}}))
      << "every table's rows, no metadata";
  std::vector<std::string> sketches;
  ASSERT_TRUE((*reader)
                  ->ForEachSketch([&](absl::string_view table, const AdmissionSketchState& state) {
                    sketches.push_back(std::string(table));
                    EXPECT_EQ(state.key_hi(), 99u);
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(sketches, std::vector<std::string>{"b"});
}

TEST_F(CheckpointTableReaderTest, DecodesCompactRowsByTheirTablesCodec) {
  const TableConfig config = Config("q", CHECKPOINT_Q8);
  *manifest_.add_tables() = config;
  absl::StatusOr<CheckpointRowCodec> codec = CheckpointRowCodec::Create(config);
  ASSERT_TRUE(codec.ok()) << codec.status();
  const std::vector<float> row = {0.5f, -0.25f, 1.0f, 0.0f};
  std::string record;
  codec->Encode(row, &record);
  ASSERT_TRUE(CheckpointRowCodec::IsQ8(record));
  std::vector<float> decoded;
  ASSERT_TRUE(codec->Decode(record, &decoded).ok());
  WriteShard(0, {{Key("q", 5), record}});
  auto reader = CheckpointTableReader::Open(*layout_, manifest_, 0, "q");
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_TRUE((*reader)->Valid());
  EXPECT_EQ(std::vector<float>((*reader)->row().begin(), (*reader)->row().end()), decoded);
}

TEST_F(CheckpointTableReaderTest, MalformedEntriesAreDataLossNamingTheShard) {
  *manifest_.add_tables() = Config("a");
  WriteShard(2, {{std::string("a\0xyz", 5), Raw({1, 2, 3, 4})}, {Key("z", 1), "Q" + std::string(6, 'x')}});
  auto reader = CheckpointTableReader::Open(*layout_, manifest_, 2, "a");
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(reader.status().message(), "server 2")) << reader.status();
  EXPECT_TRUE(absl::StrContains(reader.status().message(), "malformed row")) << reader.status();
  reader = CheckpointTableReader::Open(*layout_, manifest_, 2, "z");
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(reader.status().message(), "a compact row of table 'z', which the manifest lacks"))
      << reader.status();
  EXPECT_EQ(CheckpointTableReader::Open(*layout_, manifest_, 7, "a").status().code(), absl::StatusCode::kDataLoss)
      << "no such shard directory";
}

}  // namespace
}  // namespace kestrel
