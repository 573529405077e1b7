#include "export/export.h"
#include "export/load_export.h"

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
#include "common/crc32c.h"
#include "google/protobuf/text_format.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "server/row_values.h"
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

// (fp32 rows, and bf16 ones: the .rows file holds the stored two-byte values, and the serving table keeps them.)
class ExportStorageTest : public ::testing::TestWithParam<ValueType> {};

TEST_P(ExportStorageTest, StreamsEveryShardInKeyOrderAndLoadsBackTheValues) {
  const std::string root = absl::StrCat(::testing::TempDir(), "/export_test_", GetParam());
  fs::remove_all(root);
  const CheckpointLayout layout(root + "/ckpt");
  // Two servers owning interleaved ranges (4 per server, dealt round-robin): the export must merge them.
  const Partition partition = *Partition::Uniform(2, 4);
  TableConfig emb;
  emb.set_name("emb");
  emb.set_dim(3);
  emb.mutable_optimizer()->set_type(OptimizerConfig::ADAM);
  emb.mutable_initializer()->set_type(InitializerConfig::NORMAL);
  emb.mutable_storage()->set_type(GetParam());
  const RowValues stored_values(emb);
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
    options.owner = s;
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
  std::vector<float> stored(stored_values.words());
  float values[3];
  while (rows.read(reinterpret_cast<char*>(&key), sizeof(key)) &&
         rows.read(reinterpret_cast<char*>(stored.data()), sizeof(float) * stored.size())) {
    stored_values.Decode(stored.data(), values);
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

INSTANTIATE_TEST_SUITE_P(Storage, ExportStorageTest, ::testing::Values(VALUE_TYPE_FLOAT32, VALUE_TYPE_BFLOAT16));

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

// A job of two servers (owning interleaved ranges) that pushes and commits checkpoints, each server keeping
// one ShardStore across them, so later checkpoints are incremental and delete the rows that left a table.
class TestJob {
 public:
  TestJob(const std::string& root, const std::string& job_id, std::vector<TableConfig> tables)
      : job_id_(job_id), layout_(root), partition_(*Partition::Uniform(2, 4)), tables_(std::move(tables)) {
    for (int s = 0; s < 2; ++s) {
      ShardOptions options;
      options.job_id = job_id;
      options.owner = s;
      shards_.push_back(std::move(Shard::Create(options, partition_)).value());
      for (const TableConfig& config : tables_) EXPECT_TRUE(shards_[s]->CreateTable(Ctx(0), config).ok());
      stores_.push_back(std::move(ShardStore::Open(layout_, s)).value());
    }
  }

  const CheckpointLayout& layout() const { return layout_; }

  // Pushes a gradient to each key (sparse) or block (dense) at `clock`; the gradient depends on the key and
  // the clock, so every push changes a row differently.
  void Push(const std::string& table, const std::vector<uint64_t>& keys, int64_t clock, int dim,
            bool dense = false) {
    for (int s = 0; s < 2; ++s) {
      std::vector<uint64_t> mine;
      std::vector<float> grads;
      for (uint64_t k : keys) {
        const uint64_t owner_key = dense ? Partition::DenseBlockKey(table, k) : k;
        if (partition_.OwnerOf(owner_key) != s) continue;
        mine.push_back(k);
        for (int d = 0; d < dim; ++d) grads.push_back(static_cast<float>((k >> (8 * d)) % 97) / 97.0f + clock);
      }
      if (mine.empty()) continue;
      const absl::Status pushed = dense ? shards_[s]->PushDense(Ctx(clock), table, mine, grads, dim)
                                        : shards_[s]->Push(Ctx(clock), table, mine, grads, dim);
      ASSERT_TRUE(pushed.ok()) << pushed;
    }
  }

  // Commits checkpoint `sequence` with cut `clock`.
  void Checkpoint(uint64_t sequence, int64_t clock) {
    const std::string name = CheckpointLayout::CheckpointName(sequence);
    std::vector<ShardCheckpoint> answers;
    for (int s = 0; s < 2; ++s) {
      auto answer = stores_[s]->Checkpoint(*shards_[s], name);
      ASSERT_TRUE(answer.ok()) << answer.status();
      answers.push_back(*answer);
    }
    CheckpointManifest manifest;
    manifest.set_format_version(1);
    manifest.set_sequence(sequence);
    manifest.set_clock(clock);
    manifest.set_job_id(job_id_);
    manifest.set_partition(partition_.ToString());
    manifest.set_num_servers(2);
    ASSERT_TRUE(AddShardsToManifest(answers, 2, &manifest).ok());
    ASSERT_TRUE(layout_.WriteManifest(manifest).ok());
    ASSERT_TRUE(layout_.MoveLatest(name).ok());
  }

  // Exports checkpoint `sequence` to `out`, a delta against `base` unless it is "".
  absl::StatusOr<ExportedModel> Export(uint64_t sequence, const std::string& out, const std::string& base = "") {
    ExportOptions options;
    options.checkpoint_dir = layout_.root();
    options.checkpoint = CheckpointLayout::CheckpointName(sequence);
    options.out_dir = out;
    options.base_export = base;
    options.job.mutable_model()->set_type(ModelConfig::FM);
    return ExportCheckpoint(options);
  }

 private:
  RequestContext Ctx(int64_t clock) const {
    RequestContext ctx;
    ctx.job_id = job_id_;
    ctx.clock = clock;
    return ctx;
  }

  const std::string job_id_;
  const CheckpointLayout layout_;
  const Partition partition_;
  const std::vector<TableConfig> tables_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<std::unique_ptr<ShardStore>> stores_;
};

// Every record of a .rows file (key -> dim values' bytes) or every key of a .deleted file (dim 0).
std::map<uint64_t, std::string> ReadRecords(const std::string& path, int dim) {
  std::map<uint64_t, std::string> records;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  uint64_t key;
  std::string values(dim * sizeof(float), '\0');
  while (in.read(reinterpret_cast<char*>(&key), sizeof(key)) && in.read(values.data(), values.size())) {
    EXPECT_TRUE(records.emplace(key, values).second) << path << ": key " << key << " twice";
  }
  return records;
}

std::vector<uint64_t> Keys(uint64_t first, int n) {
  std::vector<uint64_t> keys;
  std::mt19937_64 rng(first);
  for (int i = 0; i < n; ++i) keys.push_back(rng());
  std::sort(keys.begin(), keys.end());
  return keys;
}

std::vector<TableConfig> DeltaTestTables() {
  TableConfig ttl;  // rows expire 4 clocks after their last push (swept by every push: period max(1, 4/4))
  ttl.set_name("ttl");
  ttl.set_dim(3);
  ttl.mutable_initializer()->set_type(InitializerConfig::NORMAL);
  ttl.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  ttl.mutable_capacity()->set_ttl_clocks(4);
  TableConfig evict;  // a budget of 8 rows per stripe (64 per server): new rows evict the oldest
  evict.set_name("evict");
  evict.set_dim(2);
  evict.mutable_capacity()->set_max_memory_bytes(64 * 3160);
  TableConfig plain;  // unbounded
  plain.set_name("plain");
  plain.set_dim(2);
  plain.mutable_initializer()->set_type(InitializerConfig::UNIFORM);
  TableConfig dense;
  dense.set_name("dense");
  dense.set_kind(TableConfig::DENSE);
  dense.set_dim(4);
  dense.set_dense_size(10);
  return {ttl, evict, plain, dense};
}

// What a delta of `now` against `base` must hold (both full exports' directories) for sparse table `table`:
// checks the delta's .rows (exactly the new and changed rows) and .deleted (exactly the keys that left);
// returns how many rows were unchanged (absent from the delta).
size_t ExpectDeltaOf(const std::string& base, const std::string& now, const std::string& delta,
                     const std::string& table, int dim) {
  const auto before = ReadRecords(base + "/" + table + ".rows", dim);
  const auto after = ReadRecords(now + "/" + table + ".rows", dim);
  std::map<uint64_t, std::string> changed, gone;
  size_t unchanged = 0;
  for (const auto& [key, values] : after) {
    auto it = before.find(key);
    if (it == before.end() || it->second != values) {
      changed.emplace(key, values);
    } else {
      ++unchanged;
    }
  }
  for (const auto& [key, values] : before) {
    if (after.count(key) == 0) gone.emplace(key, "");
  }
  EXPECT_EQ(ReadRecords(delta + "/" + table + ".rows", dim), changed) << table;
  EXPECT_EQ(ReadRecords(delta + "/" + table + ".deleted", 0), gone) << table;
  return unchanged;
}

// Pulls of every key in `keys` and every dense block: the same bits from both exports.
void ExpectSameAnswers(const std::string& full_dir, const std::string& delta_dir, const std::vector<uint64_t>& keys) {
  auto full = LoadExport(full_dir);
  ASSERT_TRUE(full.ok()) << full.status();
  auto delta = LoadExport(delta_dir);
  ASSERT_TRUE(delta.ok()) << delta.status();
  RequestContext ctx;
  ctx.job_id = "job";
  for (const char* table : {"ttl", "evict", "plain"}) {
    std::string a, b;
    ASSERT_TRUE(full->shard->Pull(ctx, table, keys, 0, &a).ok());
    ASSERT_TRUE(delta->shard->Pull(ctx, table, keys, 0, &b).ok());
    EXPECT_TRUE(a == b) << table << ": " << delta_dir << " answers otherwise than " << full_dir;
  }
  std::string a, b;
  ASSERT_TRUE(full->shard->PullDense(ctx, "dense", {0, 1, 2}, 4, &a).ok());
  ASSERT_TRUE(delta->shard->PullDense(ctx, "dense", {0, 1, 2}, 4, &b).ok());
  EXPECT_TRUE(a == b) << "dense";
}

// Deltas: base + delta answers exactly as a full export of the same checkpoint, for rows that expired, were
// evicted, changed, stayed or came back, and for a delta of a delta; unchanged rows are not in a delta, and its
// .deleted lists exactly the keys that left.
TEST(ExportTest, DeltaAppliedToItsBaseEqualsAFullExport) {
  const std::string root = ::testing::TempDir() + "/delta_test";
  fs::remove_all(root);
  TestJob job(root + "/ckpt", "job", DeltaTestTables());
  const std::vector<uint64_t> expiring = Keys(1, 300), staying = Keys(2, 300), changing = Keys(3, 300),
                              fresh = Keys(4, 300), evicted = Keys(5, 600), evicting = Keys(6, 3000);
  std::vector<uint64_t> all;
  for (const auto* keys : {&expiring, &staying, &changing, &fresh, &evicted, &evicting}) {
    all.insert(all.end(), keys->begin(), keys->end());
  }
  std::sort(all.begin(), all.end());
  // Checkpoint 1 (clock 4): every key of `expiring` (pushed at 1), `staying` and `changing` (at 3) is live.
  job.Push("ttl", expiring, 1, 3);
  job.Push("evict", evicted, 1, 2);
  job.Push("plain", staying, 1, 2);
  job.Push("plain", changing, 1, 2);
  job.Push("ttl", staying, 3, 3);
  job.Push("ttl", changing, 3, 3);
  job.Push("dense", {0, 2}, 3, 4, /*dense=*/true);
  job.Checkpoint(1, 4);
  // Checkpoint 2 (clock 7): `expiring` is gone (6 - 1 > 4; swept where pushes at 6 touch it, expired elsewhere),
  // `staying` is live and unchanged (7 - 3 = 4), `changing` changed and `fresh` is new; `evicting` pushes
  // `evicted` out of the budget.
  job.Push("ttl", changing, 6, 3);
  job.Push("ttl", fresh, 6, 3);
  job.Push("evict", evicting, 6, 2);
  job.Push("plain", changing, 6, 2);
  job.Push("dense", {1}, 6, 4, /*dense=*/true);
  job.Checkpoint(2, 7);
  // Checkpoint 3 (clock 9): `staying` expires too, `expiring` comes back (fresh rows), `fresh` changes.
  job.Push("ttl", expiring, 9, 3);
  job.Push("ttl", fresh, 9, 3);
  job.Push("plain", fresh, 9, 2);
  job.Checkpoint(3, 9);

  for (uint64_t seq : {1, 2, 3}) {
    auto full = job.Export(seq, root + "/full" + std::to_string(seq));
    ASSERT_TRUE(full.ok()) << full.status();
    EXPECT_TRUE(full->base_dir().empty());
    EXPECT_TRUE(full->tables(0).deleted_file().empty());
  }
  auto delta2 = job.Export(2, root + "/delta2", root + "/full1");
  ASSERT_TRUE(delta2.ok()) << delta2.status();
  auto delta3 = job.Export(3, root + "/delta3", root + "/delta2");  // a delta of a delta
  ASSERT_TRUE(delta3.ok()) << delta3.status();

  // MODEL pins the base: its checkpoint, its MODEL's CRC-32C and where it is, relative to the delta.
  EXPECT_EQ(delta2->base_dir(), "../full1");
  EXPECT_EQ(delta2->base_checkpoint(), "ckpt-00000001");
  EXPECT_EQ(delta2->base_model_crc32c(), Crc32c(*ReadWholeFile(root + "/full1/MODEL")));
  EXPECT_EQ(delta3->base_dir(), "../delta2");
  EXPECT_EQ(delta3->base_checkpoint(), "ckpt-00000002");
  for (const ExportedTable& t : delta2->tables()) {
    if (t.config().kind() == TableConfig::DENSE) {
      EXPECT_TRUE(t.deleted_file().empty());
      EXPECT_EQ(t.rows(), 3);  // written whole
      continue;
    }
    EXPECT_EQ(t.deleted_file(), t.config().name() + ".deleted");
    EXPECT_EQ(t.deleted_size(), t.deleted_rows() * 8);
    EXPECT_EQ(t.deleted_crc32c(), Crc32cOfFile(root + "/delta2/" + t.deleted_file())->crc);
  }

  // (a), (b): the files hold exactly the changes.
  EXPECT_GT(ExpectDeltaOf(root + "/full1", root + "/full2", root + "/delta2", "ttl", 3), 250u);  // `staying`
  EXPECT_EQ(ReadRecords(root + "/delta2/ttl.deleted", 0).size(), expiring.size());
  ExpectDeltaOf(root + "/full1", root + "/full2", root + "/delta2", "evict", 2);
  EXPECT_GT(ReadRecords(root + "/delta2/evict.deleted", 0).size(), 100u) << "the budget evicted rows";
  EXPECT_EQ(ExpectDeltaOf(root + "/full1", root + "/full2", root + "/delta2", "plain", 2), staying.size());
  EXPECT_EQ(ReadRecords(root + "/delta2/plain.rows", 2).size(), changing.size());
  EXPECT_TRUE(ReadRecords(root + "/delta2/plain.deleted", 0).empty());
  EXPECT_GT(ExpectDeltaOf(root + "/full2", root + "/full3", root + "/delta3", "ttl", 3), 0u);
  EXPECT_EQ(ReadRecords(root + "/delta3/ttl.deleted", 0).size(), staying.size());
  ExpectDeltaOf(root + "/full2", root + "/full3", root + "/delta3", "evict", 2);
  ExpectDeltaOf(root + "/full2", root + "/full3", root + "/delta3", "plain", 2);

  // Loaded (the base chain applied), a delta answers every key ever pushed as the full export does.
  ExpectSameAnswers(root + "/full2", root + "/delta2", all);
  ExpectSameAnswers(root + "/full3", root + "/delta3", all);

  // A base directory holding another export than the delta's base: refused, by the MODEL's CRC-32C. The
  // exports moved together still find their bases.
  fs::create_directories(root + "/moved");
  fs::copy(root + "/delta2", root + "/moved/delta2");
  fs::copy(root + "/full2", root + "/moved/full1");
  EXPECT_EQ(LoadExport(root + "/moved/delta2").status().code(), absl::StatusCode::kFailedPrecondition);
  fs::remove_all(root + "/moved/full1");
  fs::copy(root + "/full1", root + "/moved/full1");
  ExpectSameAnswers(root + "/full2", root + "/moved/delta2", all);
}

// (c), (d): a base of another job or with other tables is InvalidArgument naming the difference, a damaged one
// DataLoss naming the file; no MODEL is written either way.
TEST(ExportTest, DeltaRefusesABaseItCannotBeRelativeTo) {
  const std::string root = ::testing::TempDir() + "/delta_base_test";
  fs::remove_all(root);
  std::vector<TableConfig> tables = DeltaTestTables();
  TestJob job(root + "/ckpt", "job", tables);
  job.Push("ttl", Keys(1, 100), 1, 3);
  job.Checkpoint(1, 1);
  ASSERT_TRUE(job.Export(1, root + "/full1").ok());

  TestJob other_job(root + "/other", "other", tables);
  other_job.Push("ttl", Keys(1, 100), 1, 3);
  other_job.Checkpoint(1, 1);
  ASSERT_TRUE(other_job.Export(1, root + "/other1").ok());
  tables[0].mutable_capacity()->set_ttl_clocks(5);
  TestJob other_config(root + "/config", "job", tables);
  other_config.Checkpoint(1, 1);
  ASSERT_TRUE(other_config.Export(1, root + "/config1").ok());

  auto refused = job.Export(1, root + "/delta", root + "/other1");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "job 'other'")) << refused.status();
  refused = job.Export(1, root + "/delta", root + "/config1");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "'ttl'")) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "ttl_clocks")) << refused.status();
  EXPECT_FALSE(fs::exists(root + "/delta/MODEL"));

  // A damaged base: a flipped byte in a table file, or in MODEL.
  fs::copy(root + "/full1", root + "/damaged");
  {
    std::fstream f(root + "/damaged/ttl.rows", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\x7f');
  }
  refused = job.Export(1, root + "/delta", root + "/damaged");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "ttl.rows")) << refused.status();
  fs::remove_all(root + "/damaged");
  fs::copy(root + "/full1", root + "/damaged");
  {
    std::fstream f(root + "/damaged/MODEL", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    f.put('#');
  }
  refused = job.Export(1, root + "/delta", root + "/damaged");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "MODEL")) << refused.status();
  EXPECT_EQ(job.Export(1, root + "/delta", root + "/missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(root + "/delta/MODEL"));
}

}  // namespace
}  // namespace kestrel
