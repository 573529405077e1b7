#include "server/table.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "gtest/gtest.h"
#include "proto/table.pb.h"
#include "common/half.h"
#include "common/thread_pool.h"
#include "server/initializer.h"

namespace kestrel {
namespace {

// A sparse table with the given initializer and an SGD optimizer with learning rate 1, so that a push of
// gradient g turns value v into exactly v - g.
TableConfig SgdConfig(int dim, InitializerConfig::Type init = InitializerConfig::UNIFORM) {
  TableConfig c;
  c.set_name("emb");
  c.set_dim(dim);
  c.set_seed(17);
  c.mutable_initializer()->set_type(init);
  c.mutable_optimizer()->set_type(OptimizerConfig::SGD);
  c.mutable_optimizer()->set_learning_rate(1.0f);
  return c;
}

std::unique_ptr<Table> MustCreate(const TableConfig& config) {
  auto table = Table::Create(config);
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? *std::move(table) : nullptr;
}

void ExpectInvalid(const TableConfig& config) {
  EXPECT_EQ(Table::Create(config).status().code(), absl::StatusCode::kInvalidArgument)
      << config.ShortDebugString();
}

std::vector<float> Pull(const Table& table, const std::vector<uint64_t>& keys) {
  std::vector<float> out(keys.size() * table.dim(), std::nanf(""));
  EXPECT_TRUE(table.Pull(keys, out.data()).ok());
  return out;
}

std::vector<float> InitialRows(const TableConfig& config, const std::vector<uint64_t>& keys) {
  auto init = Initializer::Create(config.initializer(), config.seed());
  EXPECT_TRUE(init.ok()) << init.status();
  std::vector<float> out(keys.size() * config.dim());
  for (size_t i = 0; i < keys.size(); ++i) init->Fill(keys[i], out.data() + i * config.dim(), config.dim());
  return out;
}

// An integer-valued gradient element for `key`, exact in float.
float Grad(uint64_t key, int j) { return static_cast<float>(static_cast<int>((key * 7 + j) % 19) - 9); }

std::vector<float> Grads(const std::vector<uint64_t>& keys, int dim) {
  std::vector<float> g(keys.size() * dim);
  for (size_t i = 0; i < keys.size(); ++i) {
    for (int j = 0; j < dim; ++j) g[i * dim + j] = Grad(keys[i], j);
  }
  return g;
}

// Distinct keys spread over the key space, in a scrambled order.
std::vector<uint64_t> Keys(size_t n, uint64_t salt = 0) {
  std::vector<uint64_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = (i + (salt << 40)) * 0x9e3779b97f4a7c15ULL;  // odd multiplier: a bijection
  return keys;
}

TEST(TableTest, CreateValidatesConfig) {
  EXPECT_NE(MustCreate(SgdConfig(4)), nullptr);

  TableConfig c = SgdConfig(4);
  for (const std::string& name :
       std::vector<std::string>{"", "bad name", "a/b", "x\n", "caf\xc3\xa9", std::string(65, 'a')}) {
    c.set_name(name);
    ExpectInvalid(c);
  }
  c.set_name(std::string(64, 'a'));
  EXPECT_TRUE(Table::Create(c).ok());
  c.set_name("Ab9_.-");
  EXPECT_TRUE(Table::Create(c).ok());

  for (int dim : {0, -1, Table::kMaxDim + 1}) {
    c = SgdConfig(dim);
    ExpectInvalid(c);
  }
  EXPECT_TRUE(Table::Create(SgdConfig(Table::kMaxDim)).ok());

  c = SgdConfig(4);
  c.set_kind(TableConfig::DENSE);
  ExpectInvalid(c);  // dense without dense_size
  c.set_dense_size(100);
  EXPECT_TRUE(Table::Create(c).ok());

  c = SgdConfig(4);
  c.set_dense_size(100);
  ExpectInvalid(c);  // sparse with dense_size

  c = SgdConfig(4);
  c.mutable_optimizer()->set_learning_rate(-1.0f);
  ExpectInvalid(c);
  c = SgdConfig(4);
  c.mutable_optimizer()->set_type(OptimizerConfig::ADAM);
  c.mutable_optimizer()->set_beta1(1.0f);
  ExpectInvalid(c);

  c = SgdConfig(4);
  c.mutable_initializer()->set_min(1.0f);
  c.mutable_initializer()->set_max(0.0f);
  ExpectInvalid(c);
}

TEST(TableTest, AccessorsReflectConfig) {
  TableConfig c = SgdConfig(5);
  c.mutable_optimizer()->set_type(OptimizerConfig::ADAM);
  const auto table = MustCreate(c);
  EXPECT_EQ(table->dim(), 5);
  EXPECT_EQ(table->slot_floats(), 11);
  EXPECT_EQ(table->config().SerializeAsString(), c.SerializeAsString());
  EXPECT_EQ(table->num_rows(), 0u);
  EXPECT_EQ(table->raw_bytes(), 0u);
}

TEST(TableTest, PullOfAbsentKeysReturnsInitialValuesWithoutCreatingRows) {
  const TableConfig config = SgdConfig(8);
  const auto table = MustCreate(config);
  const std::vector<uint64_t> keys = Keys(1000);
  EXPECT_EQ(Pull(*table, keys), InitialRows(config, keys));
  EXPECT_EQ(Pull(*table, keys), InitialRows(config, keys));
  EXPECT_EQ(table->num_rows(), 0u);
  int rows = 0;
  table->ForEachRow([&](uint64_t, const float*, const float*) { ++rows; });
  EXPECT_EQ(rows, 0);
  // Not all zeros: the initializer really ran.
  const std::vector<float> values = Pull(*table, keys);
  EXPECT_GT(std::count_if(values.begin(), values.end(), [](float v) { return v != 0.0f; }), 7000);
}

TEST(TableTest, PushCreatesRowsAndPullReturnsUpdatedValues) {
  const TableConfig config = SgdConfig(4);
  const auto table = MustCreate(config);
  const std::vector<uint64_t> keys = {3, 0, ~0ULL, 1ULL << 63, 42};
  const std::vector<float> grads = Grads(keys, 4);
  EXPECT_TRUE(table->Push(keys, grads.data()).ok());
  EXPECT_EQ(table->num_rows(), keys.size());

  const std::vector<float> init = InitialRows(config, keys);
  std::vector<float> expected(init.size());
  for (size_t i = 0; i < init.size(); ++i) expected[i] = init[i] - grads[i];
  EXPECT_EQ(Pull(*table, keys), expected);

  // Pull in another order and mixed with absent keys.
  const std::vector<uint64_t> mixed = {42, 7, 3, 8};
  const std::vector<float> pulled = Pull(*table, mixed);
  const std::vector<float> absent = InitialRows(config, {7, 8});
  EXPECT_EQ(std::vector<float>(pulled.begin(), pulled.begin() + 4),
            std::vector<float>(expected.begin() + 16, expected.begin() + 20));
  EXPECT_EQ(std::vector<float>(pulled.begin() + 4, pulled.begin() + 8),
            std::vector<float>(absent.begin(), absent.begin() + 4));
  EXPECT_EQ(std::vector<float>(pulled.begin() + 8, pulled.begin() + 12),
            std::vector<float>(expected.begin(), expected.begin() + 4));
  EXPECT_EQ(std::vector<float>(pulled.begin() + 12, pulled.begin() + 16),
            std::vector<float>(absent.begin() + 4, absent.begin() + 8));
  EXPECT_EQ(table->num_rows(), keys.size());

  // A second push applies to the existing rows.
  EXPECT_TRUE(table->Push(keys, grads.data()).ok());
  EXPECT_EQ(table->num_rows(), keys.size());
  for (size_t i = 0; i < expected.size(); ++i) expected[i] -= grads[i];
  EXPECT_EQ(Pull(*table, keys), expected);
}

// A stripe pool (Table::set_stripe_pool) spreads large requests over threads: the rows end bitwise as with none,
// and pulls read the same bytes.
TEST(TableTest, StripePoolGivesTheSameRowsAsOneThread) {
  TableConfig config = SgdConfig(8, InitializerConfig::NORMAL);
  config.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  config.mutable_optimizer()->set_learning_rate(0.05f);
  const auto alone = MustCreate(config);
  const auto spread = MustCreate(config);
  ThreadPool pool(3);
  spread->set_stripe_pool(&pool);
  for (int round = 0; round < 4; ++round) {
    // Keys old and new, more than kSpreadKeys, gradients not exact in any rounding.
    const std::vector<uint64_t> keys = Keys(3 * Table::kSpreadKeys, round % 2);
    std::vector<float> grads(keys.size() * 8);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = std::sin(static_cast<float>(i * 7 + round)) / 3.0f;
    ASSERT_TRUE(alone->Push(keys, grads.data(), round).ok());
    ASSERT_TRUE(spread->Push(keys, grads.data(), round).ok());
  }
  EXPECT_EQ(alone->Fingerprint(), spread->Fingerprint());
  EXPECT_EQ(alone->num_rows(), spread->num_rows());
  const std::vector<uint64_t> read = Keys(5 * Table::kSpreadKeys, 1);  // present and absent keys
  const std::vector<float> a = Pull(*alone, read);
  const std::vector<float> b = Pull(*spread, read);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * a.size()));
}

TEST(TableTest, ManyKeysGrowStripesAndIndex) {
  constexpr int kDim = 3;
  constexpr size_t kKeys = 50000;
  const TableConfig config = SgdConfig(kDim);
  const auto table = MustCreate(config);
  const std::vector<uint64_t> keys = Keys(kKeys);
  const std::vector<float> grads = Grads(keys, kDim);
  // Push in batches of varying size, then push the first half again in one batch.
  for (size_t begin = 0, batch = 1; begin < kKeys; begin += batch, batch = batch * 2 + 1) {
    const size_t end = std::min(kKeys, begin + batch);
    EXPECT_TRUE(table->Push(absl::MakeConstSpan(keys).subspan(begin, end - begin), grads.data() + begin * kDim).ok());
    ASSERT_EQ(table->num_rows(), end);
  }
  EXPECT_TRUE(table->Push(absl::MakeConstSpan(keys).subspan(0, kKeys / 2), grads.data()).ok());
  EXPECT_EQ(table->num_rows(), kKeys);

  const std::vector<float> init = InitialRows(config, keys);
  const std::vector<float> pulled = Pull(*table, keys);
  size_t wrong = 0;
  for (size_t i = 0; i < kKeys; ++i) {
    const int pushes = i < kKeys / 2 ? 2 : 1;
    for (int j = 0; j < kDim; ++j) {
      float expected = init[i * kDim + j];
      for (int p = 0; p < pushes; ++p) expected -= grads[i * kDim + j];
      if (pulled[i * kDim + j] != expected && wrong++ < 10) {
        ADD_FAILURE() << "key " << keys[i] << " element " << j << ": " << pulled[i * kDim + j] << " != " << expected;
      }
    }
  }
  EXPECT_EQ(wrong, 0u);
  // Absent keys are still absent.
  EXPECT_EQ(Pull(*table, Keys(100, 1)), InitialRows(config, Keys(100, 1)));
  EXPECT_EQ(table->num_rows(), kKeys);
}

TEST(TableTest, ForEachRowVisitsEveryRowOnce) {
  TableConfig config = SgdConfig(2);
  config.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  const auto table = MustCreate(config);
  const std::vector<uint64_t> keys = Keys(5000);
  const std::vector<float> grads = Grads(keys, 2);
  EXPECT_TRUE(table->Push(keys, grads.data()).ok());
  const std::vector<float> pulled = Pull(*table, keys);
  std::map<uint64_t, size_t> position;
  for (size_t i = 0; i < keys.size(); ++i) position[keys[i]] = i;

  std::map<uint64_t, int> visits;
  table->ForEachRow([&](uint64_t key, const float* values, const float* slots) {
    ++visits[key];
    const auto it = position.find(key);
    ASSERT_NE(it, position.end()) << key;
    const size_t i = it->second;
    EXPECT_EQ(values[0], pulled[i * 2]);
    EXPECT_EQ(values[1], pulled[i * 2 + 1]);
    // Adagrad's accumulator: 0.1 (default) + g^2.
    EXPECT_EQ(slots[0], 0.1f + grads[i * 2] * grads[i * 2]);
    EXPECT_EQ(slots[1], 0.1f + grads[i * 2 + 1] * grads[i * 2 + 1]);
  });
  EXPECT_EQ(visits.size(), keys.size());
  for (const auto& kv : visits) EXPECT_EQ(kv.second, 1) << kv.first;
}

TEST(TableTest, FingerprintIsOrderIndependent) {
  TableConfig config = SgdConfig(4);
  config.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);  // so that slots are fingerprinted too
  const auto a = MustCreate(config);
  const auto b = MustCreate(config);
  const auto empty = MustCreate(config);
  const std::vector<uint64_t> keys = Keys(3000);
  const std::vector<float> grads = Grads(keys, 4);
  EXPECT_TRUE(a->Push(keys, grads.data()).ok());

  std::vector<size_t> order(keys.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(5));
  std::vector<uint64_t> shuffled_keys;
  std::vector<float> shuffled_grads;
  for (size_t i : order) {
    shuffled_keys.push_back(keys[i]);
    shuffled_grads.insert(shuffled_grads.end(), grads.begin() + i * 4, grads.begin() + (i + 1) * 4);
  }
  // In two batches of different size.
  EXPECT_TRUE(b->Push(absl::MakeConstSpan(shuffled_keys).subspan(0, 1000), shuffled_grads.data()).ok());
  EXPECT_TRUE(b->Push(absl::MakeConstSpan(shuffled_keys).subspan(1000), shuffled_grads.data() + 1000 * 4).ok());

  EXPECT_EQ(a->Fingerprint(), b->Fingerprint());
  EXPECT_NE(a->Fingerprint(), empty->Fingerprint());

  // One more push changes the values (and the accumulator) of one row.
  const std::vector<uint64_t> one = {keys[17]};
  const std::vector<float> g = {1, 0, 0, 0};
  EXPECT_TRUE(b->Push(one, g.data()).ok());
  EXPECT_NE(a->Fingerprint(), b->Fingerprint());

  // A push that only creates a row (zero gradient) changes it too.
  const std::vector<uint64_t> fresh = {0x1234};
  const std::vector<float> zero(4, 0.0f);
  EXPECT_TRUE(a->Push(fresh, zero.data()).ok());
  const auto c = MustCreate(config);
  EXPECT_TRUE(c->Push(keys, grads.data()).ok());
  EXPECT_NE(a->Fingerprint(), c->Fingerprint());
}

TEST(TableTest, FingerprintDependsOnConfig) {
  TableConfig other = SgdConfig(4);
  other.set_seed(18);
  const auto a = MustCreate(SgdConfig(4));
  const auto b = MustCreate(other);
  const std::vector<uint64_t> keys = Keys(10);
  const std::vector<float> grads = Grads(keys, 4);
  EXPECT_TRUE(a->Push(keys, grads.data()).ok());
  EXPECT_TRUE(b->Push(keys, grads.data()).ok());
  EXPECT_NE(a->Fingerprint(), b->Fingerprint());
}

TEST(TableTest, ConcurrentPushesToOverlappingKeysSumExactly) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 40;
  constexpr int kDim = 4;
  const auto table = MustCreate(SgdConfig(kDim, InitializerConfig::ZEROS));
  const std::vector<uint64_t> all = Keys(2000);

  // Thread t pushes, in each round, a shuffled batch of the keys at positions i with i % (t + 1) == 0 (so
  // key 0's row is pushed by every thread), gradient t + 1 - j for element j.
  auto keys_of = [&](int t) {
    std::vector<uint64_t> keys;
    for (size_t i = 0; i < all.size(); i += t + 1) keys.push_back(all[i]);
    return keys;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint64_t> keys = keys_of(t);
      std::mt19937_64 rng(t);
      std::vector<float> grads(keys.size() * kDim);
      for (size_t i = 0; i < keys.size(); ++i) {
        for (int j = 0; j < kDim; ++j) grads[i * kDim + j] = static_cast<float>(t + 1 - j);
      }
      for (int round = 0; round < kRounds; ++round) {
        std::shuffle(keys.begin(), keys.end(), rng);  // all gradients of a thread are equal per element
        // Alternate between one big batch and several small ones.
        const size_t batch = round % 2 == 0 ? keys.size() : 37;
        for (size_t begin = 0; begin < keys.size(); begin += batch) {
          const size_t n = std::min(batch, keys.size() - begin);
          EXPECT_TRUE(table->Push(absl::MakeConstSpan(keys).subspan(begin, n), grads.data()).ok());
        }
      }
    });
  }
  // A concurrent reader: every value it sees is a partial sum, hence an integer.
  std::thread reader([&] {
    for (int i = 0; i < 50; ++i) {
      for (float v : Pull(*table, all)) ASSERT_EQ(v, std::round(v));
      table->num_rows();
      table->memory_bytes();
    }
  });
  for (auto& th : threads) th.join();
  reader.join();

  std::map<uint64_t, std::vector<double>> expected;
  for (int t = 0; t < kThreads; ++t) {
    for (uint64_t key : keys_of(t)) {
      auto& sum = expected[key];
      sum.resize(kDim, 0.0);
      for (int j = 0; j < kDim; ++j) sum[j] -= static_cast<double>(kRounds) * (t + 1 - j);
    }
  }
  EXPECT_EQ(table->num_rows(), expected.size());
  std::vector<uint64_t> keys;
  for (const auto& kv : expected) keys.push_back(kv.first);
  const std::vector<float> pulled = Pull(*table, keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    for (int j = 0; j < kDim; ++j) {
      ASSERT_EQ(pulled[i * kDim + j], expected[keys[i]][j]) << "key " << keys[i] << " element " << j;
    }
  }
}

TEST(TableTest, DirtyRowsAreThoseWrittenSinceClearDirty) {
  constexpr int kDim = 3;
  TableConfig config = SgdConfig(kDim);
  config.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  const auto table = MustCreate(config);
  const std::vector<uint64_t> keys = Keys(1000);
  EXPECT_TRUE(table->Push(keys, Grads(keys, kDim).data()).ok());
  EXPECT_EQ(table->num_dirty(), keys.size());
  table->ClearDirty();
  EXPECT_EQ(table->num_dirty(), 0u);

  // Pulls do not dirty rows; pushes of existing rows do, once each.
  Pull(*table, keys);
  const std::vector<uint64_t> some(keys.begin() + 10, keys.begin() + 20);
  EXPECT_TRUE(table->Push(some, Grads(some, kDim).data()).ok());
  EXPECT_TRUE(table->Push(some, Grads(some, kDim).data()).ok());
  std::map<uint64_t, std::vector<float>> dirty;
  ASSERT_TRUE(table->ForEachDirtyRow([&](uint64_t key, absl::Span<const float> row) {
                     EXPECT_TRUE(dirty.emplace(key, std::vector<float>(row.begin(), row.end())).second)
                         << "key " << key << " visited twice";
                     return absl::OkStatus();
                   }).ok());
  ASSERT_EQ(dirty.size(), some.size());
  // Each dirty row carries the values and the optimizer state (Adagrad: one accumulator per value).
  const std::vector<float> values = Pull(*table, some);
  for (size_t i = 0; i < some.size(); ++i) {
    ASSERT_EQ(dirty.count(some[i]), 1u);
    const std::vector<float>& row = dirty[some[i]];
    ASSERT_EQ(row.size(), static_cast<size_t>(2 * kDim));
    for (int j = 0; j < kDim; ++j) EXPECT_EQ(row[j], values[i * kDim + j]);
    for (int j = 0; j < kDim; ++j) {  // three pushes of the same gradient onto the initial 0.1
      const float g = Grad(some[i], j);
      EXPECT_NEAR(row[kDim + j], 0.1f + 3 * g * g, 1e-4f) << "Adagrad accumulator";
    }
  }
  // An error from the visitor stops the walk and is returned.
  int visits = 0;
  EXPECT_EQ(table->ForEachDirtyRow([&](uint64_t, absl::Span<const float>) {
                   ++visits;
                   return absl::DataLossError("disk full");
                 }).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(visits, 1);
  table->MarkAllDirty();
  EXPECT_EQ(table->num_dirty(), keys.size());
}

TEST(TableTest, LoadRowRestoresValuesAndOptimizerState) {
  constexpr int kDim = 4;
  TableConfig config = SgdConfig(kDim);
  config.mutable_optimizer()->set_type(OptimizerConfig::ADAM);
  const auto source = MustCreate(config);
  const std::vector<uint64_t> keys = Keys(5000);
  for (int round = 0; round < 3; ++round) EXPECT_TRUE(source->Push(keys, Grads(keys, kDim).data()).ok());
  const auto copy = MustCreate(config);
  source->ForEachRow([&](uint64_t key, const float* values, const float*) {
    ASSERT_TRUE(copy->LoadRow(key, absl::MakeConstSpan(values, source->stored_floats())).ok());
  });
  EXPECT_EQ(copy->num_rows(), keys.size());
  EXPECT_EQ(copy->num_dirty(), keys.size());
  EXPECT_EQ(copy->Fingerprint(), source->Fingerprint());
  // Further identical pushes keep them identical: the Adam moments and step counts came along.
  EXPECT_TRUE(source->Push(keys, Grads(keys, kDim).data()).ok());
  EXPECT_TRUE(copy->Push(keys, Grads(keys, kDim).data()).ok());
  EXPECT_EQ(copy->Fingerprint(), source->Fingerprint());
  // Loading over an existing row replaces it; a row of the wrong width is refused and changes nothing.
  const uint64_t before = copy->Fingerprint();
  std::vector<float> wrong(copy->stored_floats() + 1, 1.0f);
  EXPECT_EQ(copy->LoadRow(keys[0], wrong).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(copy->Fingerprint(), before);
  wrong.pop_back();
  ASSERT_TRUE(copy->LoadRow(keys[0], wrong).ok());
  EXPECT_EQ(Pull(*copy, {keys[0]}), std::vector<float>(kDim, 1.0f));
  EXPECT_EQ(copy->num_rows(), keys.size());
}

// Compact storage: a fresh row and an absent key read the initial values rounded to the storage type; a push
// updates the decoded values and the fp32 optimizer state in fp32 and rounds the result once (row-wise Adagrad
// here, replayed by hand); a row of 16 bf16 values with its one accumulator is 9 words; LoadRow of the stored
// form gives the same table.
TEST(TableTest, CompactValuesAreUpdatedInFp32AndRoundedOnce) {
  constexpr int kDim = 16;
  for (ValueType type : {VALUE_TYPE_BFLOAT16, VALUE_TYPE_FLOAT16}) {
    SCOPED_TRACE(type);
    TableConfig config = SgdConfig(kDim, InitializerConfig::NORMAL);
    config.mutable_optimizer()->set_type(OptimizerConfig::ROWWISE_ADAGRAD);
    config.mutable_optimizer()->set_learning_rate(0.05f);
    config.mutable_optimizer()->set_initial_accumulator(0.1f);
    config.mutable_optimizer()->set_epsilon(1e-8f);
    config.mutable_storage()->set_type(type);
    const auto table = MustCreate(config);
    EXPECT_EQ(table->stored_floats(), kDim / 2 + 1);
    const RowValues& values = table->values();
    const std::vector<uint64_t> keys = Keys(300);
    std::vector<float> expected = InitialRows(config, keys);
    for (size_t i = 0; i < expected.size(); ++i) {
      expected[i] = type == VALUE_TYPE_BFLOAT16 ? Bfloat16ToFloat(FloatToBfloat16(expected[i]))
                                                : HalfToFloat(FloatToHalf(expected[i]));
    }
    EXPECT_EQ(Pull(*table, keys), expected);
    std::vector<float> acc(keys.size(), 0.1f);
    for (int round = 0; round < 5; ++round) {
      const std::vector<float> g = Grads(keys, kDim);
      ASSERT_TRUE(table->Push(keys, g.data(), round).ok());
      for (size_t k = 0; k < keys.size(); ++k) {
        float sq = 0;
        for (int j = 0; j < kDim; ++j) sq += g[k * kDim + j] * g[k * kDim + j];
        acc[k] += sq / kDim;
        const float step = 0.05f / (std::sqrt(acc[k]) + 1e-8f);
        for (int j = 0; j < kDim; ++j) expected[k * kDim + j] -= step * g[k * kDim + j];
        values.Round(&expected[k * kDim]);
      }
    }
    const std::vector<float> pulled = Pull(*table, keys);
    EXPECT_EQ(pulled, expected);
    const auto copy = MustCreate(config);
    table->ForEachRow([&](uint64_t key, const float* stored, const float*) {
      ASSERT_TRUE(copy->LoadRow(key, absl::MakeConstSpan(stored, table->stored_floats())).ok());
    });
    EXPECT_EQ(copy->Fingerprint(), table->Fingerprint());
    EXPECT_EQ(Pull(*copy, keys), pulled);
  }
}

TEST(TableTest, MemoryOverheadIsBounded) {
  constexpr int kDim = 16;
  const auto table = MustCreate(SgdConfig(kDim));
  const std::vector<uint64_t> keys = Keys(100000);
  const std::vector<float> grads = Grads(keys, kDim);
  EXPECT_TRUE(table->Push(keys, grads.data()).ok());
  ASSERT_EQ(table->num_rows(), keys.size());
  EXPECT_EQ(table->raw_bytes(), keys.size() * (8 + 4 * kDim));
  const double ratio = static_cast<double>(table->memory_bytes()) / table->raw_bytes();
  RecordProperty("memory_ratio", absl::StrCat(ratio));
  EXPECT_GE(ratio, 1.0);
  EXPECT_LE(ratio, 1.25) << "memory_bytes " << table->memory_bytes() << " raw_bytes " << table->raw_bytes();
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

TEST(TableChunkTest, WideRowsDoNotReserveMegabytesPerStripe) {
  // dim 4096 with Adam: 49 KB per row. A few dozen rows spread over all stripes must not cost 256 rows per
  // stripe (~800 MB).
  TableConfig c;
  c.set_name("wide");
  c.set_dim(4096);
  c.mutable_optimizer()->set_type(OptimizerConfig::ADAM);
  auto table = Table::Create(c);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 64; ++k) keys.push_back(Mix64(k));
  std::sort(keys.begin(), keys.end());
  std::vector<float> grads(keys.size() * 4096, 0.5f);
  EXPECT_TRUE((*table)->Push(keys, grads.data()).ok());
  EXPECT_EQ((*table)->num_rows(), 64u);
  EXPECT_LT((*table)->memory_bytes(), 4 * (*table)->raw_bytes() + (1 << 20))
      << "memory " << (*table)->memory_bytes() << " raw " << (*table)->raw_bytes();
}

}  // namespace
}  // namespace kestrel
