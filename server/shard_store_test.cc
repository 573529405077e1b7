#include "server/shard_store.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/hash.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "server/shard.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

constexpr int kEmbDim = 8;
constexpr int kBlockDim = 16;
constexpr uint64_t kDenseSize = 1000;

RequestContext Ctx(int rank = -1, uint64_t generation = 0) {
  RequestContext ctx;
  ctx.job_id = "job";
  ctx.worker_rank = rank;
  ctx.generation = generation;
  return ctx;
}

TableConfig Emb() {
  TableConfig c;
  c.set_name("emb");
  c.set_dim(kEmbDim);
  c.set_seed(3);
  c.mutable_initializer()->set_type(InitializerConfig::NORMAL);
  c.mutable_optimizer()->set_type(OptimizerConfig::ADAM);
  return c;
}

TableConfig Mlp() {
  TableConfig c;
  c.set_name("mlp");
  c.set_kind(TableConfig::DENSE);
  c.set_dim(kBlockDim);
  c.set_dense_size(kDenseSize);
  c.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  return c;
}

// In-process servers of one partition, each with its store under one checkpoint root.
struct Cluster {
  Partition partition = *Partition::Uniform(1);
  std::vector<std::unique_ptr<Shard>> shards;
  std::vector<std::unique_ptr<ShardStore>> stores;
};

Cluster MakeCluster(int servers, const CheckpointLayout& layout, bool tables = true) {
  Cluster c;
  c.partition = *Partition::Uniform(servers);
  for (int i = 0; i < servers; ++i) {
    ShardOptions options;
    options.job_id = "job";
    options.owner = i;
    c.shards.push_back(std::move(Shard::Create(options, c.partition)).value());
    auto store = ShardStore::Open(layout, i);
    EXPECT_TRUE(store.ok()) << store.status();
    c.stores.push_back(std::move(store).value());
    if (tables) {
      EXPECT_TRUE(c.shards[i]->CreateTable(Ctx(), Emb()).ok());
      EXPECT_TRUE(c.shards[i]->CreateTable(Ctx(), Mlp()).ok());
    }
  }
  return c;
}

std::vector<float> Grads(size_t n, int dim, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> g(n * dim);
  for (float& x : g) x = normal(rng);
  return g;
}

// Pushes gradients for `keys` (any order) to their owners, and to every dense block when `dense`.
void Train(Cluster& c, std::vector<uint64_t> keys, uint64_t seed, bool dense = true) {
  std::mt19937_64 rng(seed);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<std::vector<uint64_t>> by_owner(c.shards.size());
  for (uint64_t k : keys) by_owner[c.partition.OwnerOf(k)].push_back(k);
  for (size_t s = 0; s < c.shards.size(); ++s) {
    ASSERT_TRUE(c.shards[s]->Push(Ctx(), "emb", by_owner[s], Grads(by_owner[s].size(), kEmbDim, rng), 0).ok());
  }
  if (!dense) return;
  const uint64_t blocks = Partition::DenseBlockCount(kDenseSize, kBlockDim);
  std::vector<std::vector<uint64_t>> blocks_by_owner(c.shards.size());
  for (uint64_t b = 0; b < blocks; ++b) {
    blocks_by_owner[c.partition.OwnerOf(Partition::DenseBlockKey("mlp", b))].push_back(b);
  }
  for (size_t s = 0; s < c.shards.size(); ++s) {
    ASSERT_TRUE(c.shards[s]
                    ->PushDense(Ctx(), "mlp", blocks_by_owner[s], Grads(blocks_by_owner[s].size(), kBlockDim, rng), 0)
                    .ok());
  }
}

std::vector<uint64_t> RandomKeys(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> keys(n);
  for (uint64_t& k : keys) k = rng();
  return keys;
}

// Order-independent fingerprint of table `name` over every server, and its row count.
std::pair<uint64_t, uint64_t> FullTable(const Cluster& c, const std::string& name) {
  uint64_t sum = 0, rows = 0;
  for (const auto& shard : c.shards) {
    const Table* table = shard->FindTable(name);
    if (table == nullptr) continue;
    const size_t bytes = sizeof(float) * table->stored_floats();
    table->ForEachRow([&](uint64_t key, const float* row, const float*) {
      sum += HashCombine(key, Hash64(absl::string_view(reinterpret_cast<const char*>(row), bytes)));
      ++rows;
    });
  }
  return {sum, rows};
}

// Checkpoints every server and commits the manifest, as the scheduler does.
CheckpointManifest CheckpointAll(Cluster& c, const CheckpointLayout& layout, int64_t clock) {
  CheckpointManifest manifest;
  manifest.set_format_version(1);
  manifest.set_sequence(*layout.NextSequence());
  manifest.set_clock(clock);
  manifest.set_job_id("job");
  manifest.set_partition(c.partition.ToString());
  manifest.set_num_servers(c.partition.num_servers());
  const std::string name = CheckpointLayout::CheckpointName(manifest.sequence());
  std::vector<ShardCheckpoint> answers;
  for (size_t s = 0; s < c.shards.size(); ++s) {
    auto answer = c.stores[s]->Checkpoint(*c.shards[s], name);
    EXPECT_TRUE(answer.ok()) << answer.status();
    answers.push_back(*answer);
  }
  EXPECT_TRUE(AddShardsToManifest(answers, c.partition.num_servers(), &manifest).ok());
  EXPECT_TRUE(layout.WriteManifest(manifest).ok());
  EXPECT_TRUE(layout.MoveLatest(name).ok());
  return manifest;
}

absl::Status RestoreAll(Cluster& c, const std::optional<CheckpointManifest>& manifest, uint64_t generation = 1) {
  for (size_t s = 0; s < c.shards.size(); ++s) {
    absl::Status status = c.stores[s]->Restore(manifest, *c.shards[s], generation);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

uint64_t RowsWritten(const CheckpointManifest& m) {
  uint64_t n = 0;
  for (const ShardCheckpoint& s : m.shards()) n += s.rows_written();
  return n;
}

class ShardStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(::testing::TempDir(), "/store_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    layout_ = std::make_unique<CheckpointLayout>(root_);
  }
  std::string root_;
  std::unique_ptr<CheckpointLayout> layout_;
};

TEST_F(ShardStoreTest, RestoreReproducesValuesAndOptimizerState) {
  std::pair<uint64_t, uint64_t> emb, mlp;
  std::vector<uint64_t> shard_fingerprints;
  CheckpointManifest manifest;
  {
    Cluster source = MakeCluster(2, *layout_);
    for (int round = 0; round < 3; ++round) Train(source, RandomKeys(20000, round), 100 + round);
    manifest = CheckpointAll(source, *layout_, 3);
    emb = FullTable(source, "emb");
    mlp = FullTable(source, "mlp");
    for (const auto& s : source.shards) shard_fingerprints.push_back(s->Fingerprint());
    EXPECT_EQ(RowsWritten(manifest), emb.second + mlp.second);
    EXPECT_EQ(manifest.tables_size(), 2);
    for (const ShardCheckpoint& s : manifest.shards()) {
      EXPECT_EQ(s.tables_size(), 0) << "the manifest keeps one copy of the tables";
      EXPECT_TRUE(std::any_of(s.files().begin(), s.files().end(),
                              [](const CheckpointFile& f) { return absl::EndsWith(f.name(), ".sst"); }));
    }
  }
  // Fresh servers (no tables yet) restore the latest committed checkpoint.
  Cluster target = MakeCluster(2, *layout_, /*tables=*/false);
  auto latest = layout_->ReadLatest();
  ASSERT_TRUE(latest.ok() && latest->has_value()) << latest.status();
  ASSERT_TRUE(RestoreAll(target, *latest).ok());
  EXPECT_EQ(FullTable(target, "emb"), emb);
  EXPECT_EQ(FullTable(target, "mlp"), mlp);
  for (size_t s = 0; s < 2; ++s) EXPECT_EQ(target.shards[s]->Fingerprint(), shard_fingerprints[s]) << "shard " << s;

  // After a restore, the next checkpoint writes every row again (the working store started afresh).
  const CheckpointManifest next = CheckpointAll(target, *layout_, 3);
  EXPECT_EQ(RowsWritten(next), emb.second + mlp.second);
}

TEST_F(ShardStoreTest, CheckpointNamesThatAreNotTheSchedulersAreRefusedAndWriteNothing) {
  Cluster c = MakeCluster(1, *layout_);
  Train(c, RandomKeys(1000, 1), 7);
  const uint64_t before = c.shards[0]->Fingerprint();
  const std::string outside = absl::StrCat(::testing::TempDir(), "/escaped_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(outside);
  for (const std::string& name :
       {std::string("../../../tmp/x"), "../" + fs::path(outside).filename().string(), std::string(""),
        std::string("ckpt-"), std::string("ckpt-7"), std::string("ckpt-00000000"), std::string("ckpt-0000007x"),
        std::string("ckpt-18446744073709551615"), std::string("ckpt-1000000000001"), std::string("/etc"),
        std::string("ckpt-00000007/../../x"), std::string("LATEST")}) {
    absl::StatusOr<ShardCheckpoint> written = c.stores[0]->Checkpoint(*c.shards[0], name);
    EXPECT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_EQ(layout_->ReadManifest(name).status().code(), absl::StatusCode::kInvalidArgument) << name;
  }
  EXPECT_FALSE(fs::exists(outside));
  EXPECT_FALSE(layout_->ReadLatest()->has_value()) << "nothing was committed";
  EXPECT_EQ(c.shards[0]->Fingerprint(), before);
  // The largest sequence is still a name, and so is an ordinary one.
  EXPECT_TRUE(CheckpointLayout::CheckName(CheckpointLayout::CheckpointName(CheckpointLayout::kMaxSequence)).ok());
  EXPECT_TRUE(c.stores[0]->Checkpoint(*c.shards[0], "ckpt-00000007").ok());
}

TEST_F(ShardStoreTest, IncrementalCheckpointWritesOnlyChangedRows) {
  Cluster c = MakeCluster(2, *layout_);
  const std::vector<uint64_t> keys = RandomKeys(50000, 1);
  Train(c, keys, 1, /*dense=*/false);
  const CheckpointManifest first = CheckpointAll(c, *layout_, 1);
  const auto at_first = FullTable(c, "emb");
  EXPECT_EQ(RowsWritten(first), keys.size());

  // Nothing changed: nothing written.
  const CheckpointManifest same = CheckpointAll(c, *layout_, 1);
  EXPECT_EQ(RowsWritten(same), 0u);

  // 1% of the rows change.
  const std::vector<uint64_t> changed(keys.begin(), keys.begin() + keys.size() / 100);
  Train(c, changed, 2, /*dense=*/false);
  const CheckpointManifest second = CheckpointAll(c, *layout_, 2);
  EXPECT_EQ(RowsWritten(second), changed.size());
  const auto at_second = FullTable(c, "emb");
  ASSERT_NE(at_second, at_first);

  // Each checkpoint restores its own moment.
  ASSERT_TRUE(RestoreAll(c, second).ok());
  EXPECT_EQ(FullTable(c, "emb"), at_second);
  ASSERT_TRUE(RestoreAll(c, first).ok());
  EXPECT_EQ(FullTable(c, "emb"), at_first);
}

TEST_F(ShardStoreTest, ReshardingKeepsTheFullTables) {
  std::pair<uint64_t, uint64_t> emb, mlp;
  {
    Cluster four = MakeCluster(4, *layout_);
    for (int round = 0; round < 2; ++round) Train(four, RandomKeys(30000, 10 + round), 10 + round);
    CheckpointAll(four, *layout_, 2);
    emb = FullTable(four, "emb");
    mlp = FullTable(four, "mlp");
  }
  {
    Cluster two = MakeCluster(2, *layout_, /*tables=*/false);
    ASSERT_TRUE(RestoreAll(two, *layout_->ReadLatest()).ok());
    EXPECT_EQ(FullTable(two, "emb"), emb) << "4 -> 2 servers";
    EXPECT_EQ(FullTable(two, "mlp"), mlp) << "4 -> 2 servers";
    CheckpointAll(two, *layout_, 2);
  }
  Cluster three = MakeCluster(3, *layout_, /*tables=*/false);
  ASSERT_TRUE(RestoreAll(three, *layout_->ReadLatest()).ok());
  EXPECT_EQ(FullTable(three, "emb"), emb) << "2 -> 3 servers";
  EXPECT_EQ(FullTable(three, "mlp"), mlp) << "2 -> 3 servers";
  // Every row sits with its owner: the shards answer pulls of their own keys from the restored rows.
  for (size_t s = 0; s < 3; ++s) {
    three.shards[s]->FindTable("emb")->ForEachRow([&](uint64_t key, const float*, const float*) {
      ASSERT_EQ(three.partition.OwnerOf(key), static_cast<int>(s));
    });
  }
}

TEST_F(ShardStoreTest, DamagedFilesAreRefusedByNameAndChangeNothing) {
  CheckpointManifest manifest;
  {
    Cluster source = MakeCluster(1, *layout_);
    Train(source, RandomKeys(5000, 7), 7);
    manifest = CheckpointAll(source, *layout_, 1);
  }
  Cluster target = MakeCluster(1, *layout_);
  Train(target, RandomKeys(100, 8), 8);
  const uint64_t before = target.shards[0]->Fingerprint();
  const std::string dir = layout_->ShardDir(CheckpointLayout::CheckpointName(manifest.sequence()), 0);
  int kinds = 0;
  for (const char* kind : {"CURRENT", "MANIFEST-", "OPTIONS-", ".sst"}) {
    std::string path;
    for (const CheckpointFile& f : manifest.shards(0).files()) {
      if (absl::StrContains(f.name(), kind)) path = dir + "/" + f.name();
    }
    ASSERT_FALSE(path.empty()) << "no " << kind << " file in the checkpoint";
    ++kinds;
    const std::string good = *ReadWholeFile(path);
    const auto expect_refused = [&](const char* damage) {
      absl::Status status = target.stores[0]->Restore(manifest, *target.shards[0], 2);
      EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << damage << " " << path << ": " << status;
      EXPECT_TRUE(absl::StrContains(status.message(), path)) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), "server 0")) << status;
      EXPECT_EQ(target.shards[0]->Fingerprint(), before) << damage << " " << path << " changed the shard";
    };
    {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(good.size() / 2));
      f.put(static_cast<char>(good[good.size() / 2] ^ 0x01));
    }
    expect_refused("a flipped byte in");
    fs::resize_file(path, good.size() - 1);
    expect_refused("truncating");
    fs::remove(path);
    expect_refused("deleting");
    std::ofstream(path, std::ios::binary | std::ios::trunc) << good;
  }
  EXPECT_EQ(kinds, 4);
  ASSERT_TRUE(target.stores[0]->Restore(manifest, *target.shards[0], 2).ok());
  EXPECT_NE(target.shards[0]->Fingerprint(), before);
}

TEST_F(ShardStoreTest, RollbackRefusesTheOldTimeline) {
  Cluster c = MakeCluster(1, *layout_);
  Train(c, RandomKeys(100, 1), 1);
  const CheckpointManifest manifest = CheckpointAll(c, *layout_, 1);
  const auto at_checkpoint = FullTable(c, "emb");
  std::vector<uint64_t> keys = RandomKeys(10, 2);
  std::sort(keys.begin(), keys.end());
  const std::vector<float> grads(keys.size() * kEmbDim, 0.5f);
  ASSERT_TRUE(c.shards[0]->Push(Ctx(0, 3), "emb", keys, grads, 0).ok());
  ASSERT_TRUE(c.stores[0]->Restore(manifest, *c.shards[0], /*min_worker_generation=*/4).ok());
  EXPECT_EQ(FullTable(c, "emb"), at_checkpoint);
  // A push of the rolled-back timeline (generation 3) is refused and changes nothing; generation 4 works.
  absl::Status stale = c.shards[0]->Push(Ctx(0, 3), "emb", keys, grads, 0);
  EXPECT_EQ(stale.code(), absl::StatusCode::kAborted) << stale;
  EXPECT_TRUE(absl::StrContains(stale.message(), "rolled back")) << stale;
  std::string values;
  EXPECT_EQ(c.shards[0]->Pull(Ctx(0, 3), "emb", keys, 0, &values).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(FullTable(c, "emb"), at_checkpoint);
  EXPECT_TRUE(c.shards[0]->Push(Ctx(0, 4), "emb", keys, grads, 0).ok());
  EXPECT_NE(FullTable(c, "emb"), at_checkpoint);
}

TEST_F(ShardStoreTest, RestoreWithoutCheckpointEmptiesTheTables) {
  Cluster c = MakeCluster(2, *layout_);
  Train(c, RandomKeys(1000, 1), 1);
  ASSERT_TRUE(RestoreAll(c, std::nullopt, 2).ok());
  EXPECT_EQ(FullTable(c, "emb").second, 0u);
  EXPECT_EQ(FullTable(c, "mlp").second, 0u);
  EXPECT_NE(c.shards[0]->FindTable("emb"), nullptr) << "tables stay; they are empty";
}

TEST_F(ShardStoreTest, TableOfAnotherShapeIsRefusedBeforeAnythingChanges) {
  CheckpointManifest manifest;
  {
    Cluster source = MakeCluster(1, *layout_);
    Train(source, RandomKeys(1000, 1), 1);
    manifest = CheckpointAll(source, *layout_, 1);
  }
  Cluster target = MakeCluster(1, *layout_, /*tables=*/false);
  TableConfig other = Emb();
  other.set_dim(4);
  ASSERT_TRUE(target.shards[0]->CreateTable(Ctx(), other).ok());
  std::vector<uint64_t> keys = RandomKeys(10, 5);
  std::sort(keys.begin(), keys.end());
  ASSERT_TRUE(target.shards[0]->Push(Ctx(), "emb", keys, std::vector<float>(keys.size() * 4, 1.0f), 0).ok());
  const uint64_t before = target.shards[0]->Fingerprint();
  absl::Status status = target.stores[0]->Restore(manifest, *target.shards[0], 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "'emb'")) << status;
  EXPECT_EQ(target.shards[0]->Fingerprint(), before);
}

TEST_F(ShardStoreTest, AssignTableRoundTripsThroughACheckpoint) {
  TableConfig state = Mlp();
  state.set_name("state");
  state.mutable_optimizer()->set_type(OptimizerConfig::ASSIGN);
  const uint64_t blocks = Partition::DenseBlockCount(kDenseSize, kBlockDim);
  std::vector<uint64_t> all(blocks);
  for (uint64_t b = 0; b < blocks; ++b) all[b] = b;
  std::mt19937_64 rng(11);
  const std::vector<float> pushed = Grads(blocks, kBlockDim, rng);
  {
    Cluster source = MakeCluster(1, *layout_, /*tables=*/false);
    ASSERT_TRUE(source.shards[0]->CreateTable(Ctx(), state).ok());
    ASSERT_TRUE(source.shards[0]->PushDense(Ctx(), "state", all, pushed, kBlockDim).ok());
    CheckpointAll(source, *layout_, 1);
  }
  Cluster target = MakeCluster(1, *layout_, /*tables=*/false);
  auto latest = layout_->ReadLatest();
  ASSERT_TRUE(latest.ok() && latest->has_value()) << latest.status();
  ASSERT_TRUE(RestoreAll(target, *latest).ok());
  ASSERT_NE(target.shards[0]->FindTable("state"), nullptr);
  EXPECT_EQ(target.shards[0]->FindTable("state")->slot_floats(), 0);
  std::string values;
  ASSERT_TRUE(target.shards[0]->PullDense(Ctx(), "state", all, kBlockDim, &values).ok());
  ASSERT_EQ(values.size(), pushed.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(values.data(), pushed.data(), values.size()), 0);
}

// The ColdTier through the store directly: rows go to RocksDB and the table's file, reads come from the file.
TEST_F(ShardStoreTest, ColdTierRowsAreWrittenReplacedDeletedAndDiscardedWithTheStore) {
  auto opened = ShardStore::Open(*layout_, 0);
  ASSERT_TRUE(opened.ok()) << opened.status();
  ShardStore& store = **opened;
  constexpr int kFloats = 5;
  std::vector<uint64_t> keys = RandomKeys(300, 4);
  std::sort(keys.begin(), keys.end());
  std::vector<float> rows(keys.size() * kFloats);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
  // A name that is no file name: the file is named by its hex.
  const std::string table = "../emb";
  ASSERT_TRUE(store.Write(table, keys, rows).ok());
  const std::string file = absl::StrCat(layout_->LiveDir(0), "/cold/2e2e2f656d62.rows");
  EXPECT_TRUE(fs::exists(file)) << file;
  EXPECT_EQ(store.cold_file_stats().rows, keys.size());
  auto read = [&](const std::vector<uint64_t>& k) {
    std::vector<float> out(k.size() * kFloats, -1.0f);
    std::vector<uint8_t> found;
    EXPECT_TRUE(store.Read(table, k, kFloats, out.data(), &found).ok());
    return std::make_pair(out, found);
  };
  EXPECT_EQ(read(keys).first, rows);
  // The RocksDB path reads the same rows.
  store.TEST_ReadColdFromRocksDB(true);
  EXPECT_EQ(read(keys).first, rows);
  store.TEST_ReadColdFromRocksDB(false);

  // Replace the first key's row, delete the second.
  const std::vector<float> replaced(kFloats, 42.0f);
  ASSERT_TRUE(store.Write(table, {keys[0]}, replaced).ok());
  ASSERT_TRUE(store.Delete(table, {keys[1]}).ok());
  auto [out, found] = read({keys[0], keys[1], keys[2]});
  EXPECT_EQ(found, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + kFloats), replaced);
  EXPECT_EQ(std::vector<float>(out.begin() + kFloats, out.begin() + 2 * kFloats), std::vector<float>(kFloats, -1.0f));
  store.TEST_ReadColdFromRocksDB(true);
  EXPECT_EQ(read({keys[0], keys[1], keys[2]}).second, found);
  store.TEST_ReadColdFromRocksDB(false);

  // A row width change for the table is refused, writing nothing; so is a read of another width.
  const absl::Status wider = store.Write(table, {keys[1]}, std::vector<float>(kFloats + 1, 1.0f));
  EXPECT_EQ(wider.code(), absl::StatusCode::kFailedPrecondition) << wider;
  EXPECT_EQ(read({keys[1]}).second, std::vector<uint8_t>{0});
  std::vector<float> six(6);
  std::vector<uint8_t> found6;
  EXPECT_EQ(store.Read(table, {keys[0]}, kFloats + 1, six.data(), &found6).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.Write(table, keys, std::vector<float>(7)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Write(std::string(200, 'x'), {keys[0]}, replaced).code(), absl::StatusCode::kInvalidArgument);

  // A rebase discards the files with the store: nothing is held, and the next width is free.
  ASSERT_TRUE(store.Rebase().ok());
  EXPECT_FALSE(fs::exists(file));
  EXPECT_EQ(store.cold_file_stats().rows, 0u);
  EXPECT_EQ(read(keys).second, std::vector<uint8_t>(keys.size(), 0));
  ASSERT_TRUE(store.Write(table, {keys[1]}, std::vector<float>(kFloats + 1, 1.0f)).ok());
  EXPECT_EQ(fs::file_size(file) % 4096, 0u);
}

}  // namespace
}  // namespace kestrel
