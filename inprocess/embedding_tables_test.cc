#include "worker/embedding_tables.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "server/shard.h"
#include "inprocess/local_ps_client.h"

namespace kestrel {
namespace {

constexpr int kDim = 2;

TableConfig SgdTable(const std::string& name) {
  TableConfig config;
  config.set_name(name);
  config.set_kind(TableConfig::SPARSE);
  config.set_dim(kDim);
  config.mutable_initializer()->set_type(InitializerConfig::ZEROS);
  config.mutable_optimizer()->set_type(OptimizerConfig::SGD);
  config.mutable_optimizer()->set_learning_rate(1.0f);
  return config;
}

class EmbeddingTablesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    partition_ = std::make_unique<Partition>(*Partition::Uniform(2));
    std::vector<Shard*> shards;
    for (int s = 0; s < 2; ++s) {
      ShardOptions options;
      options.job_id = "job";
      options.owner = s;
      shards_.push_back(*Shard::Create(options, *partition_));
      shards.push_back(shards_.back().get());
    }
    PsClientOptions options;
    options.job_id = "job";
    client_ = NewLocalPsClient(options, shards);
    for (const char* name : {"a", "b"}) ASSERT_TRUE(client_->CreateTable(SgdTable(name)).ok());
  }

  // The rows of `keys` (distinct) in `table`.
  std::vector<float> Rows(const std::string& table, const std::vector<uint64_t>& keys) {
    KeyBatch batch;
    batch.Build(keys, *partition_);
    std::vector<float> unique(batch.num_unique() * kDim), rows(keys.size() * kDim);
    EXPECT_TRUE(client_->Pull(table, batch, kDim, unique.data(), CallClock{}).ok());
    batch.Scatter(unique.data(), kDim, rows.data());
    return rows;
  }

  std::unique_ptr<Partition> partition_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::unique_ptr<PsClient> client_;
};

// Two fields, field 0 in table "a" and field 1 (multi-valued, with an empty bag) in table "b": each gradient row
// lands in its key's table and nowhere else, and a pull places each table's rows where the model expects them.
TEST_F(EmbeddingTablesTest, RowsTravelToTheirKeysTables) {
  PreparedBatch p;
  Batch& b = p.batch;
  b.Reset(/*fields=*/2, /*dense_dim=*/0);
  b.AddEntry(10, 1.0f);  // example 0: a={10}, b={20, 21}
  b.CloseBag();
  b.AddEntry(20, 1.0f);
  b.AddEntry(21, 1.0f);
  b.CloseBag();
  b.CloseExample(1.0f);
  b.AddEntry(11, 1.0f);  // example 1: a={11}, b={}
  b.CloseBag();
  b.CloseBag();
  b.CloseExample(0.0f);
  const std::vector<int> field_tables = {0, 1};
  p.Prepare(*partition_, field_tables, 2);
  ASSERT_EQ(p.tables.size(), 2u);
  EXPECT_EQ(p.tables[0].keys.num_unique(), 2u);
  EXPECT_EQ(p.tables[1].keys.num_unique(), 2u);

  EmbeddingTables tables(client_.get(), {"a", "b"}, kDim);
  const size_t unique = p.keys.num_unique();
  std::vector<float> grads(unique * kDim);
  const auto keys = p.keys.unique_keys();
  for (size_t u = 0; u < unique; ++u) {  // row of key k: (k, -k)
    grads[u * kDim] = static_cast<float>(keys[u]);
    grads[u * kDim + 1] = -static_cast<float>(keys[u]);
  }
  EmbeddingTables::Staging staging;
  ASSERT_TRUE(tables.Push(p, grads.data(), CallClock{1}, &staging).ok());

  // SGD at rate 1 from zeros: a row is minus its gradient, in its own table only.
  EXPECT_EQ(Rows("a", {10, 11, 20, 21}), std::vector<float>({-10, 10, -11, 11, 0, 0, 0, 0}));
  EXPECT_EQ(Rows("b", {10, 11, 20, 21}), std::vector<float>({0, 0, 0, 0, -20, 20, -21, 21}));

  std::vector<float> rows(unique * kDim, 7.0f);
  ASSERT_TRUE(tables.Pull(p, rows.data(), CallClock{1}, &staging).ok());
  for (size_t u = 0; u < unique; ++u) {
    EXPECT_EQ(rows[u * kDim], -static_cast<float>(keys[u])) << "key " << keys[u];
    EXPECT_EQ(rows[u * kDim + 1], static_cast<float>(keys[u])) << "key " << keys[u];
  }
}

// With one table the batch's keys go to it as they are.
TEST_F(EmbeddingTablesTest, OneTableUsesTheBatchKeys) {
  PreparedBatch p;
  p.batch.Reset(1, 0);
  p.batch.AddEntry(5, 1.0f);
  p.batch.CloseBag();
  p.batch.CloseExample(1.0f);
  p.Prepare(*partition_);
  EXPECT_TRUE(p.tables.empty());
  EmbeddingTables tables(client_.get(), {"b"}, kDim);
  EmbeddingTables::Staging staging;
  const std::vector<float> grads = {1, 2};
  ASSERT_TRUE(tables.Push(p, grads.data(), CallClock{1}, &staging).ok());
  EXPECT_EQ(Rows("b", {5}), std::vector<float>({-1, -2}));
  EXPECT_EQ(Rows("a", {5}), std::vector<float>({0, 0}));
}

}  // namespace
}  // namespace kestrel
