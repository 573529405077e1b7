#include "server/checkpoint_cut.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/partition.h"
#include "common/test_seed.h"
#include "gtest/gtest.h"
#include "proto/checkpoint.pb.h"
#include "proto/table.pb.h"
#include "rocksdb/db.h"
#include "rocksdb/iterator.h"
#include "rocksdb/options.h"
#include "server/checkpoint_rows.h"
#include "server/shard.h"
#include "server/store_testing.h"
#include "server/table.h"

namespace kestrel {
namespace {

constexpr int kDim = 4;

RequestContext Ctx() {
  RequestContext ctx;
  ctx.job_id = "job";
  return ctx;
}

TableConfig Config(const std::string& name) {
  TableConfig c;
  c.set_name(name);
  c.set_dim(kDim);
  c.set_seed(3);
  c.mutable_initializer()->set_type(InitializerConfig::NORMAL);
  c.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  c.mutable_optimizer()->set_learning_rate(0.1f);
  return c;
}

std::unique_ptr<Shard> MakeShard() {
  ShardOptions options;
  options.job_id = "job";
  auto shard = Shard::Create(options, *Partition::Uniform(1));
  EXPECT_TRUE(shard.ok()) << shard.status();
  for (const char* name : {"emb", "wide"}) EXPECT_TRUE((*shard)->CreateTable(Ctx(), Config(name)).ok());
  return *std::move(shard);
}

// Pushes to both tables of `shard`: the keys and gradients drawn from `rng`.
void PushSome(Shard& shard, std::mt19937_64& rng) {
  for (const char* name : {"emb", "wide"}) {
    std::vector<uint64_t> keys;
    for (uint64_t k = rng() % 50; k < 20000; k += 1 + rng() % 200) keys.push_back(k * 0x9e3779b97f4a7c15ULL >> 4);
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    std::vector<float> grads(keys.size() * kDim);
    for (float& g : grads) g = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
    ASSERT_TRUE(shard.Push(Ctx(), name, keys, grads, kDim).ok());
  }
}

class CheckpointCutTest : public ::testing::Test {
 protected:
  // A fresh working store named `name` in the test's directory.
  static std::unique_ptr<rocksdb::DB> OpenStore(const std::string& name) {
    return OpenTestStore(FreshTestDir("checkpoint_cut") + "/" + name);
  }

  // Everything `db` holds, by stored key.
  static std::map<std::string, std::string> Contents(rocksdb::DB& db) {
    std::map<std::string, std::string> out;
    std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(rocksdb::ReadOptions()));
    for (it->SeekToFirst(); it->Valid(); it->Next()) out[it->key().ToString()] = it->value().ToString();
    EXPECT_TRUE(it->status().ok());
    return out;
  }

  // Takes the cut of `shard` in its exclusive section; copy-on-write unless `inside`, which writes into `db` there.
  static void Cut(Shard& shard, CheckpointCut& cut, bool inside, rocksdb::DB* db) {
    ASSERT_TRUE(shard
                    .Exclusive([&](const std::vector<Table*>& tables) -> absl::Status {
                      cut.Take(tables);
                      if (inside) return cut.WriteInside(db);
                      cut.BeginCopyOnWrite();
                      return absl::OkStatus();
                    })
                    .ok());
  }
};

TEST_F(CheckpointCutTest, InsideAndCopyOnWriteWriteTheSameBytes) {
  const TestSeed seed;
  std::mt19937_64 rng(seed.value());
  auto inside_shard = MakeShard();
  auto cow_shard = MakeShard();
  for (int round = 0; round < 3; ++round) {
    std::mt19937_64 twin = rng;
    PushSome(*inside_shard, rng);
    PushSome(*cow_shard, twin);
  }
  auto inside_db = OpenStore("inside");
  auto cow_db = OpenStore("cow");
  CheckpointCut inside("ckpt-1", "/nowhere", *inside_shard);
  Cut(*inside_shard, inside, /*inside=*/true, inside_db.get());
  EXPECT_FALSE(inside.copy_on_write());
  CheckpointCut cow("ckpt-1", "/nowhere", *cow_shard);
  Cut(*cow_shard, cow, /*inside=*/false, nullptr);
  EXPECT_TRUE(cow.copy_on_write());
  // Training goes on past the cut: the rows written are still the cut's.
  PushSome(*cow_shard, rng);
  ASSERT_TRUE(cow.WriteStripes(cow_db.get(), /*fail_after_rows=*/-1).ok());
  EXPECT_EQ(Contents(*cow_db), Contents(*inside_db));
  EXPECT_EQ(cow_shard->cut_memory().bytes(), 0u) << "the copies are freed once written";
  EXPECT_GE(cow.written_at(), cow.start());

  const ShardCheckpoint& answer = inside.answer();
  EXPECT_EQ(answer.shard(), 0);
  ASSERT_EQ(answer.tables_size(), 2);
  EXPECT_EQ(answer.tables(0).name(), "emb");
  EXPECT_EQ(answer.tables(1).name(), "wide");
  const uint64_t rows = inside_shard->FindTable("emb")->num_rows() + inside_shard->FindTable("wide")->num_rows();
  EXPECT_EQ(answer.rows(), rows);
  EXPECT_EQ(answer.rows_written(), rows) << "the first checkpoint writes every row";
  EXPECT_EQ(cow.answer().rows_written(), rows);
  uint64_t row_entries = 0;
  for (const auto& [key, value] : Contents(*inside_db)) {
    absl::string_view table;
    uint64_t k = 0;
    row_entries += ParseRowKey(rocksdb::Slice(key), &table, &k);
  }
  EXPECT_EQ(row_entries, rows);

  // The dirty marks were cleared: the next cut writes only what changed since.
  CheckpointCut next("ckpt-2", "/nowhere", *inside_shard);
  Cut(*inside_shard, next, /*inside=*/true, inside_db.get());
  EXPECT_EQ(next.answer().rows_written(), 0u);
}

TEST_F(CheckpointCutTest, AFailedWriteEndsEveryStripesCut) {
  const TestSeed seed(11);
  std::mt19937_64 rng(seed.value());
  auto shard = MakeShard();
  PushSome(*shard, rng);
  auto db = OpenStore("store");
  CheckpointCut cut("ckpt-1", "/nowhere", *shard);
  Cut(*shard, cut, /*inside=*/false, nullptr);
  PushSome(*shard, rng);  // rows of the cut change: their copies are kept
  EXPECT_GT(shard->cut_memory().bytes(), 0u);
  const absl::Status failed = cut.WriteStripes(db.get(), /*fail_after_rows=*/5);
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  EXPECT_EQ(shard->cut_memory().bytes(), 0u) << "the stripes not written are ended, their copies freed";
  EXPECT_EQ(cut.written_at(), absl::Time()) << "not written";
}

}  // namespace
}  // namespace kestrel
