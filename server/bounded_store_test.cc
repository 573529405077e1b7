// Bounded tables through the Shard and its RocksDB store: the disk tier, tombstones and admission sketches
// across checkpoints and restores.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/hash.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "server/checkpoint_table_reader.h"
#include "server/shard.h"
#include "server/shard_store.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

constexpr int kDim = 8;

RequestContext Ctx(int64_t clock) {
  RequestContext ctx;
  ctx.job_id = "job";
  ctx.clock = clock;
  return ctx;
}

TableConfig Emb(const CapacityPolicy* policy) {
  TableConfig c;
  c.set_name("emb");
  c.set_dim(kDim);
  c.set_seed(3);
  c.mutable_initializer()->set_type(InitializerConfig::NORMAL);
  c.mutable_optimizer()->set_type(OptimizerConfig::ADAM);
  if (policy != nullptr) *c.mutable_capacity() = *policy;
  return c;
}

// One server with its store under `root`, holding table "emb" (bounded by `policy` if given).
struct Server {
  std::unique_ptr<Shard> shard;
  std::unique_ptr<ShardStore> store;
  CheckpointLayout layout;

  Server(const std::string& root, const CapacityPolicy* policy, uint64_t budget = 0) : layout(root) {
    ShardOptions options;
    options.job_id = "job";
    options.memory_budget_bytes = budget;
    shard = std::move(Shard::Create(options, *Partition::Uniform(1))).value();
    store = std::move(ShardStore::Open(layout, 0)).value();
    shard->SetColdTier(store.get());
    EXPECT_TRUE(shard->CreateTable(Ctx(0), Emb(policy)).ok());
  }

  void Push(const std::vector<uint64_t>& keys, int64_t clock) {
    std::vector<float> g(keys.size() * kDim);
    for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(Mix64(keys[i / kDim] * 31 + i + clock) % 2001) / 1000.0f - 1.0f;
    ASSERT_TRUE(shard->Push(Ctx(clock), "emb", keys, g, kDim).ok());
  }
  std::vector<float> Pull(const std::vector<uint64_t>& keys, int64_t clock) {
    std::string values;
    EXPECT_TRUE(shard->Pull(Ctx(clock), "emb", keys, kDim, &values).ok());
    std::vector<float> out(keys.size() * kDim);
    std::memcpy(out.data(), values.data(), values.size());
    return out;
  }
  CheckpointManifest Checkpoint(int64_t clock) {
    CheckpointManifest manifest;
    manifest.set_format_version(1);
    manifest.set_sequence(*layout.NextSequence());
    manifest.set_clock(clock);
    manifest.set_job_id("job");
    manifest.set_partition(Partition::Uniform(1)->ToString());
    manifest.set_num_servers(1);
    const std::string name = CheckpointLayout::CheckpointName(manifest.sequence());
    auto answer = store->Checkpoint(*shard, name);
    EXPECT_TRUE(answer.ok()) << answer.status();
    EXPECT_TRUE(AddShardsToManifest({*answer}, 1, &manifest).ok());
    for (const TableConfig& t : shard->DescribeTables()) *manifest.add_tables() = t;
    EXPECT_TRUE(layout.WriteManifest(manifest).ok());
    EXPECT_TRUE(layout.MoveLatest(name).ok());
    return manifest;
  }
  const Table& table() const { return *shard->FindTable("emb"); }
};

std::string Root(const std::string& name) {
  const std::string root = absl::StrCat(testing::TempDir(), "/", name);
  fs::remove_all(root);
  return root;
}

std::vector<uint64_t> Keys(uint64_t first, size_t n) {
  std::vector<uint64_t> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(Mix64(first + i));
  std::sort(keys.begin(), keys.end());
  return keys;
}

// Keys of round `clock`: 1500 new ones and 300 from earlier rounds.
std::vector<uint64_t> Round(int64_t clock) {
  std::vector<uint64_t> keys = Keys(clock * 10000, 1500);
  if (clock > 2) {
    const std::vector<uint64_t> old = Keys((clock / 3) * 10000 + 7, 300);
    keys.insert(keys.end(), old.begin(), old.end());
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  }
  return keys;
}

// A 1 MiB memory budget and a disk tier that never fills.
CapacityPolicy DiskPolicy() {
  CapacityPolicy policy;
  policy.set_max_memory_bytes(1 << 20);
  policy.set_max_disk_bytes(uint64_t{256} << 20);
  return policy;
}

TEST(BoundedStoreTest, DiskTierRowsComeBackBitExactThroughCheckpointAndRestore) {
  const CapacityPolicy policy = DiskPolicy();
  Server bounded(Root("disk_bounded"), &policy);
  Server reference(Root("disk_reference"), nullptr);
  std::vector<uint64_t> all;
  int64_t clock = 1;
  for (; clock <= 30; ++clock) {
    const std::vector<uint64_t> keys = Round(clock);
    bounded.Push(keys, clock);
    reference.Push(keys, clock);
    all.insert(all.end(), keys.begin(), keys.end());
    if (clock == 20) {
      bounded.Checkpoint(clock + 1);
      reference.Checkpoint(clock + 1);
    }
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  const TableTierStats stats = bounded.table().tier_stats();
  EXPECT_GT(stats.spilled, all.size() / 2);
  EXPECT_GT(stats.promoted, 1000u);
  EXPECT_EQ(stats.capacity_dropped, 0u);
  EXPECT_EQ(bounded.table().num_rows(), all.size());
  EXPECT_LE(bounded.table().memory_bytes(), (1 << 20) * 13 / 10);
  EXPECT_EQ(bounded.Pull(all, clock), reference.Pull(all, clock));

  // Restore both to the checkpoint of clock 21: a push of every key then gives equal values only if the
  // values and the optimizer state of every row came back exactly, from memory and from disk alike.
  const CheckpointManifest b = *bounded.layout.ReadLatest().value();
  const CheckpointManifest r = *reference.layout.ReadLatest().value();
  ASSERT_TRUE(bounded.store->Restore(b, *bounded.shard, 0).ok());
  ASSERT_TRUE(reference.store->Restore(r, *reference.shard, 0).ok());
  EXPECT_GT(bounded.table().tier_stats().disk_rows, 0u);  // the restore itself put rows on disk
  EXPECT_EQ(bounded.Pull(all, 21), reference.Pull(all, 21));
  bounded.Push(all, 21);
  reference.Push(all, 21);
  EXPECT_EQ(bounded.Pull(all, 22), reference.Pull(all, 22));
  // And a checkpoint of the restored, bounded server holds every row (memory and disk) exactly once.
  const CheckpointManifest again = bounded.Checkpoint(22);
  auto reader = CheckpointTableReader::Open(bounded.layout, again, 0, "emb");
  ASSERT_TRUE(reader.ok());
  uint64_t rows = 0;
  while ((*reader)->Valid()) {
    ++rows;
    ASSERT_TRUE((*reader)->Next().ok());
  }
  EXPECT_EQ(rows, all.size());
}

TEST(BoundedStoreTest, RowsThatLeftAreDeletedNotResurrected) {
  CapacityPolicy policy;
  policy.set_ttl_clocks(4);
  Server server(Root("tombstones"), &policy);
  const std::vector<uint64_t> old_keys = Keys(1, 500), new_keys = Keys(100000, 5000);
  server.Push(old_keys, 1);
  server.Checkpoint(2);
  server.Push(new_keys, 10);  // sweeps the old rows (expired at clock 10; every stripe is touched)
  const CheckpointManifest second = server.Checkpoint(11);
  EXPECT_EQ(second.shards(0).rows_deleted(), old_keys.size());
  ASSERT_TRUE(server.store->Restore(second, *server.shard, 0).ok());
  EXPECT_EQ(server.table().num_rows(), new_keys.size());
  // A tool (clock 0) sees everything the table holds: the old rows are gone, not restored.
  Server fresh(Root("tombstones_fresh"), &policy);
  EXPECT_EQ(server.Pull(old_keys, 0), fresh.Pull(old_keys, 0));
}

TEST(BoundedStoreTest, AdmissionCountsSurviveARestore) {
  CapacityPolicy policy;
  policy.set_admit_after(2);
  policy.set_sketch_bytes(256 << 10);
  Server server(Root("sketch"), &policy);
  const std::vector<uint64_t> keys = Keys(1, 1000);
  server.Push(keys, 1);  // counted once, not admitted
  EXPECT_EQ(server.table().num_rows(), 0u);
  const CheckpointManifest manifest = server.Checkpoint(2);
  server.Push(Keys(5000, 10), 2);
  ASSERT_TRUE(server.store->Restore(manifest, *server.shard, 0).ok());
  server.Push(keys, 2);  // the second push: admitted, as in an uninterrupted run
  EXPECT_EQ(server.table().num_rows(), keys.size());
}

TEST(BoundedStoreTest, TheServerBudgetIsSharedByRowSize) {
  CapacityPolicy policy;
  Server server(Root("shared_budget"), &policy, /*budget=*/8 << 20);
  TableConfig wide = Emb(&policy);
  wide.set_name("wide");
  wide.set_dim(1);
  wide.mutable_optimizer()->set_type(OptimizerConfig::SGD);
  ASSERT_TRUE(server.shard->CreateTable(Ctx(0), wide).ok());
  const TableTierStats emb = server.table().tier_stats(), w = server.shard->FindTable("wide")->tier_stats();
  EXPECT_NEAR(static_cast<double>(emb.memory_budget + w.memory_budget), 8 << 20, 2);  // rounded down
  // emb rows: 8 values + 17 Adam floats + 2 meta; wide rows: 1 value + 2 meta (+ 2 for the key each).
  EXPECT_NEAR(static_cast<double>(emb.memory_budget) / w.memory_budget, 29.0 / 5.0, 0.01);
  // A table's own cap wins over its share.
  TableConfig capped = wide;
  capped.set_name("capped");
  capped.mutable_capacity()->set_max_memory_bytes(1 << 20);
  ASSERT_TRUE(server.shard->CreateTable(Ctx(0), capped).ok());
  EXPECT_EQ(server.shard->FindTable("capped")->tier_stats().memory_budget, uint64_t{1} << 20);
}

// The disk tier's reads come from its files; RocksDB, the record, holds the same rows.
TEST(BoundedStoreTest, ColdReadsFromTheFilesMatchRocksDBCachedOrNot) {
  const CapacityPolicy policy = DiskPolicy();
  Server bounded(Root("cold_files"), &policy);
  Server reference(Root("cold_files_reference"), nullptr);
  std::vector<uint64_t> all;
  for (int64_t clock = 1; clock <= 12; ++clock) {
    const std::vector<uint64_t> keys = Round(clock);
    bounded.Push(keys, clock);
    reference.Push(keys, clock);
    all.insert(all.end(), keys.begin(), keys.end());
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  const TableTierStats stats = bounded.table().tier_stats();
  ASSERT_GT(stats.disk_rows, all.size() / 3);
  // The files hold every disk row (and the stale copies of rows brought back, as RocksDB does).
  const ShardStore::ColdFileStats files = bounded.store->cold_file_stats();
  EXPECT_GE(files.rows, stats.disk_rows);
  EXPECT_LE(files.index_bytes, files.rows * 22 + 4096);
  const std::vector<float> expected = reference.Pull(all, 13);
  EXPECT_EQ(bounded.Pull(all, 13), expected);
  bounded.store->TEST_ReadColdFromRocksDB(true);
  EXPECT_EQ(bounded.Pull(all, 13), expected);
  bounded.store->TEST_ReadColdFromRocksDB(false);
  ASSERT_TRUE(bounded.store->TEST_DropColdCachedPages().ok());
  EXPECT_EQ(bounded.Pull(all, 13), expected);
  // Pushes bring rows back and spill others with the pages dropped too.
  ASSERT_TRUE(bounded.store->TEST_DropColdCachedPages().ok());
  bounded.Push(all, 13);
  reference.Push(all, 13);
  EXPECT_EQ(bounded.Pull(all, 14), reference.Pull(all, 14));
}

}  // namespace
}  // namespace kestrel
