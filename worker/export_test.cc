#include "worker/export.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/crc32c.h"
#include "google/protobuf/text_format.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/shard_store.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

RequestContext Tool() {
  RequestContext ctx;
  ctx.job_id = "job";
  return ctx;
}

TEST(ExportTest, StreamsEveryShardInKeyOrderAndLoadsBackTheValues) {
  const std::string root = ::testing::TempDir() + "/export_test";
  fs::remove_all(root);
  const CheckpointLayout layout(root + "/ckpt");
  // Two servers owning interleaved ranges (4 per server, dealt round-robin): the export must merge them.
  const Partition partition = *Partition::Uniform(2, 4);
  TableConfig emb;
  emb.set_name("emb");
  emb.set_dim(3);
  emb.mutable_optimizer()->set_type(OptimizerConfig::ADAM);
  emb.mutable_initializer()->set_type(InitializerConfig::NORMAL);
  TableConfig dense;
  dense.set_name("dense");
  dense.set_kind(TableConfig::DENSE);
  dense.set_dim(4);
  dense.set_dense_size(10);
  dense.mutable_initializer()->set_type(InitializerConfig::NORMAL);  // the last block is zero-padded
  std::vector<std::unique_ptr<Shard>> shards;
  std::vector<ShardCheckpoint> answers;
  std::mt19937_64 rng(5);
  std::vector<uint64_t> keys(2000);
  for (uint64_t& k : keys) k = rng();
  std::sort(keys.begin(), keys.end());
  for (int s = 0; s < 2; ++s) {
    ShardOptions options;
    options.job_id = "job";
    options.shard_index = s;
    shards.push_back(std::move(Shard::Create(options, partition)).value());
    ASSERT_TRUE(shards[s]->CreateTable(Tool(), emb).ok());
    ASSERT_TRUE(shards[s]->CreateTable(Tool(), dense).ok());
    std::vector<uint64_t> mine;
    for (uint64_t k : keys) {
      if (partition.OwnerOf(k) == s) mine.push_back(k);
    }
    ASSERT_TRUE(shards[s]->Push(Tool(), "emb", mine, std::vector<float>(mine.size() * 3, 0.5f), 0).ok());
    std::vector<uint64_t> blocks;
    for (uint64_t b = 0; b < 3; ++b) {
      if (partition.OwnerOf(Partition::DenseBlockKey("dense", b)) == s && b != 1) blocks.push_back(b);  // 1 never pushed
    }
    ASSERT_TRUE(shards[s]->PushDense(Tool(), "dense", blocks, std::vector<float>(blocks.size() * 4, 0.25f), 0).ok());
    auto store = ShardStore::Open(layout, s);
    ASSERT_TRUE(store.ok()) << store.status();
    auto answer = (*store)->Checkpoint(*shards[s], "ckpt-00000001");
    ASSERT_TRUE(answer.ok()) << answer.status();
    answers.push_back(*answer);
  }
  CheckpointManifest manifest;
  manifest.set_format_version(1);
  manifest.set_sequence(1);
  manifest.set_clock(7);
  manifest.set_job_id("job");
  manifest.set_partition(partition.ToString());
  manifest.set_num_servers(2);
  ASSERT_TRUE(AddShardsToManifest(answers, 2, &manifest).ok());
  ASSERT_TRUE(layout.WriteManifest(manifest).ok());
  ASSERT_TRUE(layout.MoveLatest("ckpt-00000001").ok());

  ExportOptions options;
  options.checkpoint_dir = layout.root();
  options.out_dir = root + "/model";
  options.job.mutable_model()->set_type(ModelConfig::FM);
  auto model = ExportCheckpoint(options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->clock(), 7);
  ASSERT_EQ(model->tables_size(), 2);
  // emb.rows: every key once, in key order, with its values (no optimizer state).
  std::ifstream rows(root + "/model/emb.rows", std::ios::binary);
  std::vector<uint64_t> exported;
  uint64_t key;
  float values[3];
  while (rows.read(reinterpret_cast<char*>(&key), sizeof(key)) &&
         rows.read(reinterpret_cast<char*>(values), sizeof(values))) {
    exported.push_back(key);
    std::vector<float> expected(3);
    std::string pulled;
    ASSERT_TRUE(shards[partition.OwnerOf(key)]->Pull(Tool(), "emb", {key}, 3, &pulled).ok());
    ASSERT_EQ(std::memcmp(pulled.data(), values, sizeof(values)), 0) << "key " << key;
  }
  EXPECT_EQ(exported, keys) << "every row once, merged into key order";

  // Loaded back, a serving shard answers every key and block as the training servers do (the block never
  // pushed included: its initial value).
  auto loaded = LoadExport(root + "/model");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::string served, trained;
  ASSERT_TRUE(loaded->shard->Pull(Tool(), "emb", keys, 3, &served).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(shards[partition.OwnerOf(keys[i])]->Pull(Tool(), "emb", {keys[i]}, 3, &trained).ok());
    ASSERT_EQ(served.substr(i * 12, 12), trained) << "key " << keys[i];
  }
  for (uint64_t b = 0; b < 3; ++b) {
    ASSERT_TRUE(loaded->shard->PullDense(Tool(), "dense", {b}, 4, &served).ok());
    ASSERT_TRUE(shards[partition.OwnerOf(Partition::DenseBlockKey("dense", b))]->PullDense(Tool(), "dense", {b}, 4, &trained).ok());
    EXPECT_EQ(served.substr(0, b == 2 ? 8 : 16), trained.substr(0, b == 2 ? 8 : 16)) << "block " << b;
  }

  // A damaged export file is refused by name; an existing export is never overwritten.
  {
    std::fstream f(root + "/model/emb.rows", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\x7f');
  }
  auto damaged = LoadExport(root + "/model");
  EXPECT_EQ(damaged.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(damaged.status().message(), "emb.rows")) << damaged.status();
  EXPECT_EQ(ExportCheckpoint(options).status().code(), absl::StatusCode::kAlreadyExists);
}

// A MODEL written by someone else: every table is checked against its shape and its file before anything is
// opened or allocated; a hostile one is DataLoss, never a crash, a read past a buffer or a file elsewhere.
TEST(ExportTest, HostileModelFilesAreRefusedBeforeTheyAreUsed) {
  const std::string dir = ::testing::TempDir() + "/hostile_export";
  struct Case {
    std::string what;
    std::string name;
    int dim;
    bool dense;
    uint64_t dense_size;
    std::string file;
    size_t bytes;
  };
  const std::vector<Case> cases = {
      {"a name with ../", "../escape", 2, false, 0, "../escape.rows", 24},
      {"dim 0", "emb", 0, false, 0, "emb.rows", 16},
      {"a huge dim", "emb", 1 << 30, false, 0, "emb.rows", 16},
      {"another file than the table's", "emb", 2, false, 0, "other.rows", 16},
      {"a short sparse file", "emb", 2, false, 0, "emb.rows", 15},
      {"a short dense file", "mlp", 4, true, 10, "mlp.dense", 36},
      {"a dense size of 0", "mlp", 4, true, 0, "mlp.dense", 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    fs::remove_all(dir);
    fs::create_directories(dir + "/sub");
    const std::string file = dir + "/sub/" + c.file;  // the file exists where MODEL says, so only checks refuse it
    fs::create_directories(fs::path(file).parent_path());
    { std::ofstream(file, std::ios::binary) << std::string(c.bytes, '\x01'); }
    ExportedModel model;
    model.set_format_version(1);
    model.set_job_id("job");
    ExportedTable* t = model.add_tables();
    t->mutable_config()->set_name(c.name);
    t->mutable_config()->set_dim(c.dim);
    if (c.dense) {
      t->mutable_config()->set_kind(TableConfig::DENSE);
      t->mutable_config()->set_dense_size(c.dense_size);
    }
    t->set_file(c.file);
    const FileCrc crc = *Crc32cOfFile(file);
    t->set_size(crc.size);
    t->set_crc32c(crc.crc);
    std::string text;
    ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(model, &text));
    ASSERT_TRUE(WriteFileAtomically(dir + "/sub/MODEL", WithChecksumLine(text)).ok());
    absl::StatusOr<LoadedExport> loaded = LoadExport(dir + "/sub");
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss) << loaded.status();
  }
}

}  // namespace
}  // namespace kestrel
