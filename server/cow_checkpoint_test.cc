// Copy-on-write checkpoint cuts (ShardStore::BeginCheckpoint / FinishCheckpoint, Table::BeginCut): pushes that run
// while a cut is written change nothing in it. Every test restores the checkpoint into a fresh server and compares
// its whole state with the state at the cut.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/hash.h"
#include "common/partition.h"
#include "common/test_seed.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/shard_store.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

RequestContext Ctx(int64_t clock = 0) {
  RequestContext ctx;
  ctx.job_id = "job";
  ctx.clock = clock;
  return ctx;
}

TableConfig Sparse(const std::string& name, int dim, OptimizerConfig::Type optimizer) {
  TableConfig c;
  c.set_name(name);
  c.set_dim(dim);
  c.set_seed(7);
  c.mutable_initializer()->set_type(InitializerConfig::NORMAL);
  c.mutable_optimizer()->set_type(optimizer);
  return c;
}

// Every kind of table a cut must keep: fp32 Adam, bf16 Adagrad, a bounded table whose rows leave (admission,
// expiry and a memory budget without a disk tier: tombstones), and a dense tensor.
std::vector<TableConfig> Tables() {
  std::vector<TableConfig> tables = {Sparse("adam", 8, OptimizerConfig::ADAM), Sparse("bf16", 16, OptimizerConfig::ADAGRAD),
                                     Sparse("bounded", 4, OptimizerConfig::ADAGRAD)};
  tables[1].mutable_storage()->set_type(VALUE_TYPE_BFLOAT16);
  CapacityPolicy* policy = tables[2].mutable_capacity();
  policy->set_admit_after(2);
  policy->set_ttl_clocks(6);
  policy->set_max_memory_bytes(96 << 10);
  TableConfig dense;
  dense.set_name("dense");
  dense.set_kind(TableConfig::DENSE);
  dense.set_dim(16);
  dense.set_dense_size(4000);
  dense.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  tables.push_back(dense);
  return tables;
}

// A bounded table with a disk tier, holding `memory_bytes` of rows in memory.
TableConfig Tiered(uint64_t memory_bytes) {
  TableConfig config = Sparse("tiered", 8, OptimizerConfig::ADAGRAD);
  config.mutable_capacity()->set_max_memory_bytes(memory_bytes);
  config.mutable_capacity()->set_max_disk_bytes(uint64_t{64} << 20);
  return config;
}

struct Server {
  CheckpointLayout layout;
  std::unique_ptr<Shard> shard;
  std::unique_ptr<ShardStore> store;
  std::vector<TableConfig> tables = Tables();
  const uint64_t tiered_memory_bytes;

  // `id`: the process id its working store is named by (a second server may read the first one's checkpoints).
  // `tiered_memory_bytes` > 0: a disk tier, and a table using it (Tiered) besides Tables().
  explicit Server(const std::string& root, int id = 0, uint64_t tiered_memory_bytes = 0)
      : layout(root), tiered_memory_bytes(tiered_memory_bytes) {
    ShardOptions options;
    options.job_id = "job";
    shard = std::move(Shard::Create(options, *Partition::Uniform(1))).value();
    store = std::move(ShardStore::Open(layout, id)).value();
    if (tiered_memory_bytes > 0) {
      shard->SetColdTier(store.get());
      tables.push_back(Tiered(tiered_memory_bytes));
    }
    for (const TableConfig& t : tables) EXPECT_TRUE(shard->CreateTable(Ctx(), t).ok());
  }

  // One step of training at `clock`: a mix of new keys and keys seen before in every sparse table, and the
  // whole dense tensor.
  void Step(int64_t clock, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> grad(-1, 1);
    for (const TableConfig& t : tables) {
      std::vector<uint64_t> keys;
      if (t.kind() == TableConfig::DENSE) {
        for (uint64_t b = 0; b < Partition::DenseBlockCount(t.dense_size(), t.dim()); ++b) keys.push_back(b);
      } else {
        for (int i = 0; i < 600; ++i) keys.push_back(Mix64(rng() % 4000));
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      }
      std::vector<float> g(keys.size() * t.dim());
      for (float& x : g) x = grad(rng);
      const absl::Status pushed = t.kind() == TableConfig::DENSE
                                      ? shard->PushDense(Ctx(clock), t.name(), keys, g, t.dim())
                                      : shard->Push(Ctx(clock), t.name(), keys, g, t.dim());
      ASSERT_TRUE(pushed.ok()) << pushed;
    }
  }

  CheckpointManifest Commit(const ShardCheckpoint& answer, int64_t clock, uint64_t sequence) {
    CheckpointManifest manifest;
    manifest.set_format_version(1);
    manifest.set_sequence(sequence);
    manifest.set_clock(clock);
    manifest.set_job_id("job");
    manifest.set_partition(Partition::Uniform(1)->ToString());
    manifest.set_num_servers(1);
    EXPECT_TRUE(AddShardsToManifest({answer}, 1, &manifest).ok());
    EXPECT_TRUE(layout.WriteManifest(manifest).ok());
    EXPECT_TRUE(layout.MoveLatest(CheckpointLayout::CheckpointName(sequence)).ok());
    return manifest;
  }

  // The fingerprint a fresh server restoring `manifest` holds.
  uint64_t RestoredFingerprint(const CheckpointManifest& manifest) {
    Server fresh(layout.root(), /*id=*/99, tiered_memory_bytes);
    const absl::Status restored = fresh.store->Restore(manifest, *fresh.shard, 1);
    EXPECT_TRUE(restored.ok()) << restored;
    return fresh.shard->Fingerprint();
  }
};

std::string Root(const std::string& name) {
  const std::string root = absl::StrCat(testing::TempDir(), "/cow_", name);
  fs::remove_all(root);
  return root;
}

TEST(CowCheckpointTest, PushesDuringTheCutsWriteLeaveTheCheckpointExactlyAtTheCut) {
  const TestSeed seed;  // replay: KESTREL_TEST_SEED
  std::mt19937_64 rng(seed.value());
  Server server(Root("live"));
  int64_t clock = 1;
  for (; clock <= 8; ++clock) server.Step(clock, rng);
  // An ordinary checkpoint first: the second one is incremental, with tombstones and unchanged stored rows.
  const auto first = server.store->Checkpoint(*server.shard, CheckpointLayout::CheckpointName(1));
  ASSERT_TRUE(first.ok()) << first.status();
  server.Commit(*first, clock, 1);
  for (; clock <= 14; ++clock) server.Step(clock, rng);

  for (uint64_t sequence = 2; sequence <= 4; ++sequence) {
    ASSERT_TRUE(server.store->BeginCheckpoint(*server.shard, CheckpointLayout::CheckpointName(sequence)).ok());
    const uint64_t at_cut = server.shard->Fingerprint();
    const int64_t cut_clock = clock;
    // Pushes between the cut and the write (deterministic), then during it (concurrent).
    for (int i = 0; i < 3; ++i) server.Step(clock++, rng);
    std::atomic<bool> stop{false};
    std::atomic<int> steps{0};
    std::mt19937_64 pusher_rng(rng());
    std::thread pusher([&] {
      for (int64_t c = 1000 * sequence; !stop.load(); ++c, ++steps) server.Step(c, pusher_rng);
    });
    const auto answer = server.store->FinishCheckpoint();
    stop = true;
    pusher.join();
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_GT(answer->rows_written(), 0u);
    EXPECT_GT(answer->retained_peak_bytes(), 0u);  // the deterministic pushes kept copies
    ASSERT_NE(server.shard->Fingerprint(), at_cut);
    const CheckpointManifest manifest = server.Commit(*answer, cut_clock, sequence);
    EXPECT_EQ(server.RestoredFingerprint(manifest), at_cut)
        << "checkpoint " << sequence << " (" << steps.load() << " concurrent steps)";
    EXPECT_EQ(server.shard->cut_memory().bytes(), 0u);
  }
  // After copy-on-write cuts, an ordinary incremental checkpoint is still exact (the dirty flags came through).
  const uint64_t now = server.shard->Fingerprint();
  const auto last = server.store->Checkpoint(*server.shard, CheckpointLayout::CheckpointName(5));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(server.RestoredFingerprint(server.Commit(*last, clock, 5)), now);
}

TEST(CowCheckpointTest, PushesWaitWhileTheCopiesAreAtTheirBound) {
  std::mt19937_64 rng(11);
  Server server(Root("bound"));
  for (int64_t clock = 1; clock <= 6; ++clock) server.Step(clock, rng);
  ASSERT_TRUE(server.store->BeginCheckpoint(*server.shard, CheckpointLayout::CheckpointName(1)).ok());
  const uint64_t at_cut = server.shard->Fingerprint();
  server.Step(7, rng);  // keeps copies
  ASSERT_GE(server.shard->cut_memory().bytes(), 1u);
  server.shard->cut_memory().set_bound(1);  // which are past this bound
  std::thread pusher([&] { server.Step(8, rng); });
  while (server.shard->cut_memory().waiters() == 0) std::this_thread::yield();  // the push waits for room
  const auto answer = server.store->FinishCheckpoint();  // frees the copies stripe by stripe
  pusher.join();
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_GT(answer->backpressure_seconds(), 0.0);
  EXPECT_EQ(server.RestoredFingerprint(server.Commit(*answer, 7, 1)), at_cut);
}

TEST(CowCheckpointTest, ARestoreDropsAPendingCut) {
  std::mt19937_64 rng(5);
  Server server(Root("restore"));
  for (int64_t clock = 1; clock <= 4; ++clock) server.Step(clock, rng);
  const uint64_t before = server.shard->Fingerprint();
  const auto first = server.store->Checkpoint(*server.shard, CheckpointLayout::CheckpointName(1));
  ASSERT_TRUE(first.ok());
  const CheckpointManifest manifest = server.Commit(*first, 4, 1);
  server.Step(5, rng);
  ASSERT_TRUE(server.store->BeginCheckpoint(*server.shard, CheckpointLayout::CheckpointName(2)).ok());
  EXPECT_EQ(server.store->BeginCheckpoint(*server.shard, CheckpointLayout::CheckpointName(3)).code(),
            absl::StatusCode::kFailedPrecondition);
  server.Step(6, rng);  // keeps copies
  ASSERT_TRUE(server.store->Restore(manifest, *server.shard, 1).ok());
  EXPECT_EQ(server.store->pending_checkpoint(), "");
  EXPECT_EQ(server.store->FinishCheckpoint().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(server.shard->Fingerprint(), before);
  EXPECT_EQ(server.shard->cut_memory().bytes(), 0u);
  // The next checkpoint writes the restored state whole.
  const auto next = server.store->Checkpoint(*server.shard, CheckpointLayout::CheckpointName(2));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(server.RestoredFingerprint(server.Commit(*next, 4, 2)), before);
}

// A bounded table with a disk tier: rows move to disk and back, and are deleted from it, while the cut is written.
// The disk tier's writes into the store wait until the snapshot is cut; every row, in memory or on disk, reads
// back from the restored checkpoint as it was at the cut.
TEST(CowCheckpointTest, ADiskTierKeepsWritingWhileTheCutIsWritten) {
  const std::string root = Root("disk");
  CheckpointLayout layout(root);
  TableConfig config = Tiered(64 << 10);
  config.mutable_capacity()->set_ttl_clocks(20);
  auto make = [&](int id) {
    ShardOptions options;
    options.job_id = "job";
    auto shard = std::move(Shard::Create(options, *Partition::Uniform(1))).value();
    auto store = std::move(ShardStore::Open(layout, id)).value();
    shard->SetColdTier(store.get());
    EXPECT_TRUE(shard->CreateTable(Ctx(), config).ok());
    return std::make_pair(std::move(shard), std::move(store));
  };
  auto [shard, store] = make(0);
  // The same pushes into a server that never checkpoints: no row may be lost or changed by the cuts.
  auto [reference, reference_store] = make(97);
  std::mt19937_64 rng(3);
  std::vector<uint64_t> all;
  auto step = [&, &shard = shard, &reference = reference](int64_t clock) {
    std::vector<uint64_t> keys;
    for (int i = 0; i < 400; ++i) keys.push_back(Mix64(rng() % 6000));
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    all.insert(all.end(), keys.begin(), keys.end());
    std::vector<float> g(keys.size() * 8, 0.01f * static_cast<float>(clock % 7 + 1));
    ASSERT_TRUE(shard->Push(Ctx(clock), "tiered", keys, g, 8).ok());
    ASSERT_TRUE(reference->Push(Ctx(clock), "tiered", keys, g, 8).ok());
  };
  // Every key pushed so far, and the values `from` reads for `keys`.
  auto pushed = [&] {
    std::vector<uint64_t> keys = all;
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    return keys;
  };
  auto pull = [](Shard& from, const std::vector<uint64_t>& keys, int64_t clock) {
    std::string values;
    EXPECT_TRUE(from.Pull(Ctx(clock), "tiered", keys, 8, &values).ok());
    return values;
  };
  for (int64_t clock = 1; clock <= 20; ++clock) step(clock);
  ASSERT_GT(shard->FindTable("tiered")->tier_stats().disk_rows, 0u) << "the test needs rows on disk";
  const auto first = store->Checkpoint(*shard, CheckpointLayout::CheckpointName(1));
  ASSERT_TRUE(first.ok()) << first.status();
  // Enough new rows that memory holds only rows dirty at the cut: the evictions during the write spill them.
  for (int64_t clock = 21; clock <= 30; ++clock) step(clock);
  ASSERT_TRUE(store->BeginCheckpoint(*shard, CheckpointLayout::CheckpointName(2)).ok());
  const std::vector<uint64_t> cut_keys = pushed();
  const std::string at_cut = pull(*shard, cut_keys, 30);
  const TableTierStats before = shard->FindTable("tiered")->tier_stats();
  for (int64_t clock = 31; clock <= 40; ++clock) step(clock);  // spills, promotions, expiries: all held back
  const TableTierStats after = shard->FindTable("tiered")->tier_stats();
  EXPECT_GT(after.spilled, before.spilled);
  EXPECT_GT(after.promoted, before.promoted);
  const auto second = store->FinishCheckpoint();
  ASSERT_TRUE(second.ok()) << second.status();
  CheckpointManifest manifest;
  manifest.set_format_version(1);
  manifest.set_sequence(2);
  manifest.set_clock(30);
  manifest.set_job_id("job");
  manifest.set_partition(Partition::Uniform(1)->ToString());
  manifest.set_num_servers(1);
  ASSERT_TRUE(AddShardsToManifest({*second}, 1, &manifest).ok());
  ASSERT_TRUE(layout.WriteManifest(manifest).ok());
  auto [restored, restored_store] = make(99);
  ASSERT_TRUE(restored_store->Restore(manifest, *restored, 1).ok());
  EXPECT_EQ(pull(*restored, cut_keys, 30), at_cut);
  // The live store took the held-back writes: a checkpoint now restores the live state.
  const std::vector<uint64_t> keys_now = pushed();
  const std::string now = pull(*shard, keys_now, 40);
  EXPECT_EQ(now, pull(*reference, keys_now, 40)) << "the cut changed the live rows (a row spilled during it lost?)";
  const auto third = store->Checkpoint(*shard, CheckpointLayout::CheckpointName(3));
  ASSERT_TRUE(third.ok()) << third.status();
  manifest.clear_shards();
  manifest.set_sequence(3);
  manifest.set_clock(40);
  ASSERT_TRUE(AddShardsToManifest({*third}, 1, &manifest).ok());
  ASSERT_TRUE(layout.WriteManifest(manifest).ok());
  auto [again, again_store] = make(98);
  ASSERT_TRUE(again_store->Restore(manifest, *again, 1).ok());
  EXPECT_EQ(pull(*again, keys_now, 40), now);
}

// A write that fails part-way (here after 10 rows, inside the first table) leaves the store of no known state: the
// tombstones of the stripes not written are lost with it. The next checkpoint writes every row, into a new store, or,
// when the store holds a disk tier's rows, into the same one with the other tables' rows deleted first; either
// way it restores to the live state, and no row that left the bounded table comes back.
TEST(CowCheckpointTest, AfterAWriteFailedPartWayTheNextCheckpointWritesEveryRow) {
  for (const uint64_t tiered_memory_bytes : {uint64_t{0}, uint64_t{16} << 20}) {
    SCOPED_TRACE(tiered_memory_bytes > 0 ? "a store holding a disk tier's rows" : "a store of checkpoints only");
    std::mt19937_64 rng(11);
    Server server(Root(absl::StrCat("failed_", tiered_memory_bytes)), 0, tiered_memory_bytes);
    for (int64_t clock = 1; clock <= 8; ++clock) server.Step(clock, rng);
    const auto first = server.store->Checkpoint(*server.shard, CheckpointLayout::CheckpointName(1));
    ASSERT_TRUE(first.ok()) << first.status();
    server.Commit(*first, 8, 1);
    for (int64_t clock = 9; clock <= 16; ++clock) server.Step(clock, rng);  // rows leave the bounded table
    server.store->TEST_FailCutWriteAfter(10);
    ASSERT_TRUE(server.store->BeginCheckpoint(*server.shard, CheckpointLayout::CheckpointName(2)).ok());
    server.Step(17, rng);  // copies, freed by the failed write
    const auto failed = server.store->FinishCheckpoint();
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable) << failed.status();
    EXPECT_EQ(server.shard->cut_memory().bytes(), 0u);
    server.Step(18, rng);  // pushes are served: the disk tier lost nothing
    const uint64_t live = server.shard->Fingerprint();
    const auto next = server.store->Checkpoint(*server.shard, CheckpointLayout::CheckpointName(3));
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(next->rows_written(), next->rows()) << "every row";
    EXPECT_EQ(server.RestoredFingerprint(server.Commit(*next, 18, 3)), live);
  }
}

// The disk tier's writes held back during a cut fail to apply: the store lacks rows moved out of memory, so the
// shard refuses requests, as when its disk tier fails mid-push, until it is restored.
TEST(CowCheckpointTest, HeldBackDiskTierWritesThatFailFailTheShard) {
  std::mt19937_64 rng(13);
  Server server(Root("held_back"), 0, /*tiered_memory_bytes=*/64 << 10);
  int failures = 0;
  server.shard->SetFailureListener([&](const absl::Status&) { ++failures; });
  for (int64_t clock = 1; clock <= 8; ++clock) server.Step(clock, rng);
  const auto first = server.store->Checkpoint(*server.shard, CheckpointLayout::CheckpointName(1));
  ASSERT_TRUE(first.ok()) << first.status();
  const CheckpointManifest manifest = server.Commit(*first, 8, 1);
  ASSERT_TRUE(server.store->BeginCheckpoint(*server.shard, CheckpointLayout::CheckpointName(2)).ok());
  const uint64_t spilled = server.shard->FindTable("tiered")->tier_stats().spilled;
  for (int64_t clock = 9; clock <= 12; ++clock) server.Step(clock, rng);
  ASSERT_GT(server.shard->FindTable("tiered")->tier_stats().spilled, spilled) << "the test needs held-back writes";
  server.store->TEST_FailHeldBackWrites(true);
  const auto failed = server.store->FinishCheckpoint();
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable) << failed.status();
  EXPECT_EQ(failures, 1);
  const std::vector<uint64_t> key = {Mix64(1)};
  const std::vector<float> g(8, 0.5f);
  EXPECT_EQ(server.shard->Push(Ctx(13), "adam", key, g, 8).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(server.shard->cut_memory().bytes(), 0u);
  server.store->TEST_FailHeldBackWrites(false);
  ASSERT_TRUE(server.store->Restore(manifest, *server.shard, 1).ok());
  EXPECT_EQ(server.shard->Fingerprint(), server.RestoredFingerprint(manifest));
  EXPECT_TRUE(server.shard->Push(Ctx(9), "adam", key, g, 8).ok()) << "served again once restored";
}

}  // namespace
}  // namespace kestrel
