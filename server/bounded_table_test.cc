// Bounded sparse tables (server/bounded_policy.h): admission, expiry, capacity eviction, the disk tier
// hook and the determinism every one of them promises.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/hash.h"
#include "gtest/gtest.h"
#include "proto/table.pb.h"
#include "server/initializer.h"
#include "server/table.h"

namespace kestrel {
namespace {

constexpr int kDim = 4;

TableConfig Bounded(uint32_t admit_after, int64_t ttl, uint64_t memory = 0, uint64_t disk = 0) {
  TableConfig c;
  c.set_name("emb");
  c.set_dim(kDim);
  c.set_seed(5);
  c.mutable_initializer()->set_type(InitializerConfig::UNIFORM);
  c.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  c.mutable_optimizer()->set_learning_rate(0.1f);
  CapacityPolicy* p = c.mutable_capacity();
  p->set_admit_after(admit_after);
  p->set_ttl_clocks(ttl);
  p->set_max_memory_bytes(memory);
  p->set_max_disk_bytes(disk);
  p->set_sketch_bytes(64 << 10);
  return c;
}

std::unique_ptr<Table> MustCreate(const TableConfig& config) {
  auto table = Table::Create(config);
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? *std::move(table) : nullptr;
}

// Hashed ids, like a worker's: spread over the stripes.
std::vector<uint64_t> Keys(uint64_t first, size_t n) {
  std::vector<uint64_t> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(Mix64(first + i));
  std::sort(keys.begin(), keys.end());
  return keys;
}

std::vector<float> Grads(const std::vector<uint64_t>& keys, uint64_t salt) {
  std::vector<float> g(keys.size() * kDim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(Mix64(keys[i / kDim] ^ salt ^ i) % 1000) / 1000.0f - 0.5f;
  return g;
}

std::vector<float> Pull(const Table& table, const std::vector<uint64_t>& keys, int64_t clock) {
  std::vector<float> out(keys.size() * kDim);
  EXPECT_TRUE(table.Pull(keys, out.data(), clock).ok());
  return out;
}

std::vector<float> Initial(const TableConfig& config, const std::vector<uint64_t>& keys) {
  auto init = Initializer::Create(config.initializer(), config.seed());
  std::vector<float> out(keys.size() * kDim);
  for (size_t i = 0; i < keys.size(); ++i) init->Fill(keys[i], out.data() + i * kDim, kDim);
  return out;
}

// A ColdTier in a map: the Table's side of the contract (the RocksDB one is tested in shard_store_test).
class MapTier : public ColdTier {
 public:
  absl::Status Write(absl::string_view, absl::Span<const uint64_t> keys, absl::Span<const float> rows) override {
    const size_t floats = rows.size() / keys.size();
    for (size_t i = 0; i < keys.size(); ++i) {
      rows_[keys[i]].assign(rows.begin() + i * floats, rows.begin() + (i + 1) * floats);
    }
    ++writes;
    return fail ? absl::UnavailableError("disk gone") : absl::OkStatus();
  }
  absl::Status Read(absl::string_view, absl::Span<const uint64_t> keys, int floats, float* rows,
                    std::vector<uint8_t>* found) override {
    if (fail) return absl::UnavailableError("disk gone");
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = rows_.find(keys[i]);
      if (it == rows_.end()) continue;
      EXPECT_EQ(it->second.size(), static_cast<size_t>(floats));
      std::memcpy(rows + i * floats, it->second.data(), sizeof(float) * floats);
      (*found)[i] = 1;
    }
    return absl::OkStatus();
  }
  absl::Status Delete(absl::string_view, absl::Span<const uint64_t> keys) override {
    for (uint64_t k : keys) rows_.erase(k);
    return absl::OkStatus();
  }
  size_t size() const { return rows_.size(); }
  bool fail = false;
  int writes = 0;

 private:
  std::map<uint64_t, std::vector<float>> rows_;
};

TEST(BoundedTableTest, PolicyIsValidated) {
  TableConfig c = Bounded(256, 0);
  EXPECT_EQ(Table::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = Bounded(2, -1);
  EXPECT_EQ(Table::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = Bounded(2, 0);
  c.set_kind(TableConfig::DENSE);
  c.set_dense_size(16);
  EXPECT_EQ(Table::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = Bounded(2, 0);
  c.mutable_capacity()->set_sketch_bytes(uint64_t{2} << 30);
  EXPECT_EQ(Table::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Table::Create(Bounded(255, 100)).ok());
  c = Bounded(2, 0);  // admit_to_disk needs a disk tier
  c.mutable_capacity()->set_admit_to_disk(true);
  const absl::Status no_disk = Table::Create(c).status();
  EXPECT_EQ(no_disk.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_disk.message().find("admit_to_disk"), absl::string_view::npos) << no_disk;
  c = Bounded(1, 0, 0, 1 << 20);  // and admission
  c.mutable_capacity()->set_admit_to_disk(true);
  EXPECT_EQ(Table::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BoundedTableTest, AKeyGetsARowOnItsAdmitAfterthPush) {
  const TableConfig config = Bounded(/*admit_after=*/3, /*ttl=*/0);
  auto table = MustCreate(config);
  const std::vector<uint64_t> keys = Keys(1, 200);
  const std::vector<float> g = Grads(keys, 1);
  for (int push = 1; push <= 2; ++push) {
    ASSERT_TRUE(table->Push(keys, g.data(), push).ok());
    EXPECT_EQ(table->num_rows(), 0u) << "push " << push;
    EXPECT_EQ(Pull(*table, keys, push), Initial(config, keys));  // counted and dropped
  }
  ASSERT_TRUE(table->Push(keys, g.data(), 3).ok());
  EXPECT_EQ(table->num_rows(), keys.size());
  // The third push's gradient is applied to a fresh row: exactly what an unbounded table does with one push.
  TableConfig plain = config;
  plain.clear_capacity();
  auto reference = MustCreate(plain);
  ASSERT_TRUE(reference->Push(keys, g.data()).ok());
  EXPECT_EQ(Pull(*table, keys, 3), Pull(*reference, keys, 0));
  const TableTierStats stats = table->tier_stats();
  EXPECT_EQ(stats.not_admitted, 2 * keys.size());
  EXPECT_EQ(stats.admitted, keys.size());
}

// admit_to_disk: pushes before the admit_after-th go to a row on the disk tier, so nothing is lost: the values
// (and pulls, which read the disk rows in place) are the unbounded table's bit for bit, while memory holds only
// the keys pushed admit_after times or more. Keys are pushed 1 to 4 times, interleaved over the clocks.
TEST(BoundedTableTest, AdmissionToDiskLosesNoGradient) {
  for (uint32_t admit_after : {2u, 3u}) {
    SCOPED_TRACE(admit_after);
    TableConfig config = Bounded(admit_after, /*ttl=*/0, /*memory=*/0, /*disk=*/64 << 20);
    config.mutable_capacity()->set_admit_to_disk(true);
    auto table = MustCreate(config);
    MapTier disk;
    table->SetColdTier(&disk);
    TableConfig plain = config;
    plain.clear_capacity();
    auto reference = MustCreate(plain);
    const std::vector<uint64_t> all = Keys(1, 4000);
    std::map<uint64_t, int> pushes;
    for (int clock = 1; clock <= 8; ++clock) {
      std::vector<uint64_t> keys;
      for (size_t k = 0; k < all.size(); ++k) {
        // Key k is pushed k % 4 + 1 times, at clocks spread over the run.
        if (clock % 2 == static_cast<int>(k % 2) && pushes[all[k]] < static_cast<int>(k % 4) + 1) {
          keys.push_back(all[k]);
          ++pushes[all[k]];
        }
      }
      std::sort(keys.begin(), keys.end());
      const std::vector<float> g = Grads(keys, clock);
      ASSERT_TRUE(table->Push(keys, g.data(), clock).ok());
      ASSERT_TRUE(reference->Push(keys, g.data(), clock).ok());
    }
    EXPECT_EQ(Pull(*table, all, 9), Pull(*reference, all, 0));
    size_t admitted = 0, first_pushes_on_disk = 0;
    for (const auto& [key, n] : pushes) {
      admitted += n >= static_cast<int>(admit_after);
      first_pushes_on_disk += std::min<int>(n, admit_after - 1);
    }
    const TableTierStats stats = table->tier_stats();
    EXPECT_EQ(table->num_rows(), all.size());
    EXPECT_EQ(stats.staged, first_pushes_on_disk);
    EXPECT_EQ(stats.not_admitted, 0u);
    EXPECT_EQ(stats.disk_rows, all.size() - admitted);
    int in_memory = 0;
    table->ForEachRow([&](uint64_t, const float*, const float*) { ++in_memory; });
    EXPECT_EQ(in_memory, static_cast<int>(admitted));
    EXPECT_LT(in_memory, static_cast<int>(all.size()));
    // The admitted rows carry their whole history: further pushes stay identical.
    const std::vector<float> g = Grads(all, 99);
    ASSERT_TRUE(table->Push(all, g.data(), 10).ok());
    ASSERT_TRUE(reference->Push(all, g.data(), 10).ok());
    EXPECT_EQ(Pull(*table, all, 11), Pull(*reference, all, 0));
  }
}

TEST(BoundedTableTest, RowsExpireAfterTtlClocksAndAreSweptWithTombstones) {
  const TableConfig config = Bounded(/*admit_after=*/0, /*ttl=*/4);
  auto table = MustCreate(config);
  // Enough new keys to touch every stripe: a push sweeps the stripes it touches.
  const std::vector<uint64_t> old_keys = Keys(1, 100), new_keys = Keys(1000, 5000);
  ASSERT_TRUE(table->Push(old_keys, Grads(old_keys, 1).data(), 1).ok());
  table->ClearDirty();  // as a checkpoint does: the store now holds these rows
  const std::vector<float> trained = Pull(*table, old_keys, 1);
  EXPECT_NE(trained, Initial(config, old_keys));
  EXPECT_EQ(Pull(*table, old_keys, 5), trained);                   // 5 - 1 <= 4: alive
  EXPECT_EQ(Pull(*table, old_keys, 6), Initial(config, old_keys));  // expired for a request at clock 6
  EXPECT_EQ(Pull(*table, old_keys, 0), trained);                   // a tool (clock 0) still sees it
  // A push at clock 6 (a multiple of the sweep period, ttl / 4 = 1) removes the expired rows.
  ASSERT_TRUE(table->Push(new_keys, Grads(new_keys, 2).data(), 6).ok());
  EXPECT_EQ(table->num_rows(), new_keys.size());
  std::vector<uint64_t> tombstones;
  ASSERT_TRUE(table->ForEachTombstone([&](uint64_t k) {
    tombstones.push_back(k);
    return absl::OkStatus();
  }).ok());
  EXPECT_EQ(tombstones, old_keys);
  EXPECT_EQ(table->tier_stats().expired, old_keys.size());
  // Back again: a fresh row, not the expired one's values.
  ASSERT_TRUE(table->Push(old_keys, Grads(old_keys, 1).data(), 7).ok());
  TableConfig plain = config;
  plain.clear_capacity();
  auto reference = MustCreate(plain);
  ASSERT_TRUE(reference->Push(old_keys, Grads(old_keys, 1).data()).ok());
  EXPECT_EQ(Pull(*table, old_keys, 7), Pull(*reference, old_keys, 0));
  table->ClearDirty();
  int after = 0;
  ASSERT_TRUE(table->ForEachTombstone([&](uint64_t) {
    ++after;
    return absl::OkStatus();
  }).ok());
  EXPECT_EQ(after, 0);
}

TEST(BoundedTableTest, AnExpiredRowPushedAgainStartsAfresh) {
  const TableConfig config = Bounded(/*admit_after=*/0, /*ttl=*/8);  // sweeps at multiples of 2
  auto table = MustCreate(config);
  const std::vector<uint64_t> keys = Keys(1, 50);
  ASSERT_TRUE(table->Push(keys, Grads(keys, 1).data(), 1).ok());
  ASSERT_TRUE(table->Push(keys, Grads(keys, 2).data(), 11).ok());  // 11 - 1 > 8, 11 is no sweep clock
  TableConfig plain = config;
  plain.clear_capacity();
  auto reference = MustCreate(plain);
  ASSERT_TRUE(reference->Push(keys, Grads(keys, 2).data()).ok());
  EXPECT_EQ(Pull(*table, keys, 11), Pull(*reference, keys, 0));
}

TEST(BoundedTableTest, MemoryStaysWithinBudgetWhileTwentyTimesMoreKeysStreamThrough) {
  constexpr uint64_t kBudget = 4 << 20;
  const TableConfig config = Bounded(/*admit_after=*/0, /*ttl=*/0, kBudget);
  auto table = MustCreate(config);
  table->SetMemoryBudget(kBudget);
  const uint64_t row_bytes = 8 + 4 * (table->stored_floats());
  const uint64_t keys_total = 20 * kBudget / row_bytes;
  uint64_t peak = 0, pushed = 0;
  for (uint64_t clock = 1; pushed < keys_total; pushed += 4096, ++clock) {
    const std::vector<uint64_t> keys = Keys(pushed, 4096);
    ASSERT_TRUE(table->Push(keys, Grads(keys, clock).data(), clock).ok());
    peak = std::max(peak, table->memory_bytes());
  }
  EXPECT_LE(peak, kBudget * 13 / 10) << "peak " << peak;
  EXPECT_GT(table->memory_bytes(), kBudget / 2);  // the budget is used, not wasted
  const TableTierStats stats = table->tier_stats();
  EXPECT_GT(stats.capacity_dropped, pushed / 2);
  EXPECT_EQ(stats.admitted, pushed);
  EXPECT_EQ(table->num_rows() + stats.capacity_dropped, pushed);
  // The most recent keys are the ones kept.
  const std::vector<uint64_t> recent = Keys(pushed - 1000, 1000);
  const std::vector<float> values = Pull(*table, recent, pushed);
  EXPECT_NE(values, Initial(config, recent));
}

TEST(BoundedTableTest, EvictionKeepsTheIndexConsistent) {
  // Random pushes through a small budget; every row the table still holds must have exactly the values a
  // reference (unbounded) table computes for the keys pushed since their last admission.
  const TableConfig config = Bounded(/*admit_after=*/0, /*ttl=*/0, 256 << 10);
  auto table = MustCreate(config);
  table->SetMemoryBudget(256 << 10);
  TableConfig plain = config;
  plain.clear_capacity();
  std::mt19937_64 rng(7);
  std::map<uint64_t, std::vector<std::vector<float>>> history;  // key -> gradients since its row was created
  absl::flat_hash_map<uint64_t, uint32_t> meta_count;
  for (int clock = 1; clock <= 300; ++clock) {
    std::vector<uint64_t> keys;
    for (int i = 0; i < 300; ++i) keys.push_back(Mix64(rng() % 20000));
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    // Rows absent before the push start afresh.
    std::vector<float> before(keys.size() * kDim);
    std::vector<uint8_t> present(keys.size());
    const std::vector<float> g = Grads(keys, clock);
    std::vector<uint64_t> held;
    table->ForEachRow([&](uint64_t k, const float*, const float*) { held.push_back(k); });
    std::sort(held.begin(), held.end());
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!std::binary_search(held.begin(), held.end(), keys[i])) history[keys[i]].clear();
      history[keys[i]].emplace_back(g.begin() + i * kDim, g.begin() + (i + 1) * kDim);
    }
    ASSERT_TRUE(table->Push(keys, g.data(), clock).ok());
  }
  size_t checked = 0;
  table->ForEachRow([&](uint64_t key, const float* values, const float*) {
    auto reference = MustCreate(plain);
    for (const auto& grad : history[key]) ASSERT_TRUE(reference->Push({key}, grad.data()).ok());
    std::vector<float> expected(kDim);
    ASSERT_TRUE(reference->Pull({key}, expected.data()).ok());
    ASSERT_EQ(std::vector<float>(values, values + kDim), expected) << key;
    ++checked;
  });
  EXPECT_GT(checked, 500u);
  EXPECT_GT(table->tier_stats().capacity_dropped, 1000u);
  // Every held key is found by a pull (the index and the rows agree).
  std::vector<uint64_t> held;
  std::vector<float> values;
  table->ForEachRow([&](uint64_t k, const float* v, const float*) {
    held.push_back(k);
    values.insert(values.end(), v, v + kDim);
  });
  std::vector<size_t> order(held.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return held[a] < held[b]; });
  std::vector<uint64_t> sorted;
  std::vector<float> expected;
  for (size_t i : order) {
    sorted.push_back(held[i]);
    expected.insert(expected.end(), values.begin() + i * kDim, values.begin() + (i + 1) * kDim);
  }
  EXPECT_EQ(Pull(*table, sorted, 300), expected);
}

// (fp32, and bf16 values with stochastic rounding: the disk holds the stored form, which comes back exactly.)
class BoundedStorageTest : public ::testing::TestWithParam<ValueType> {};

TEST_P(BoundedStorageTest, RowsMovedToDiskComeBackBitExactWithOptimizerState) {
  TableConfig config = Bounded(/*admit_after=*/0, /*ttl=*/0, 1 << 20, 64 << 20);
  config.mutable_storage()->set_type(GetParam());
  config.mutable_storage()->set_stochastic_rounding(GetParam() != VALUE_TYPE_FLOAT32);
  auto table = MustCreate(config);
  table->SetMemoryBudget(1 << 20);
  MapTier disk;
  table->SetColdTier(&disk);
  TableConfig plain = config;
  plain.clear_capacity();
  auto reference = MustCreate(plain);
  // Each round pushes a new set of keys and some old ones; the reference keeps everything in memory.
  std::vector<uint64_t> all;
  for (int clock = 1; clock <= 40; ++clock) {
    std::vector<uint64_t> keys = Keys(clock * 1000, 1000);
    if (clock > 1) {
      const std::vector<uint64_t> old = Keys((clock / 2) * 1000, 200);
      keys.insert(keys.end(), old.begin(), old.end());
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    }
    const std::vector<float> g = Grads(keys, clock);
    ASSERT_TRUE(table->Push(keys, g.data(), clock).ok());
    ASSERT_TRUE(reference->Push(keys, g.data(), clock).ok());
    all.insert(all.end(), keys.begin(), keys.end());
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  const TableTierStats stats = table->tier_stats();
  EXPECT_GT(stats.spilled, 10000u);
  EXPECT_GT(stats.promoted, 1000u);
  EXPECT_EQ(stats.capacity_dropped, 0u);
  EXPECT_EQ(table->num_rows(), all.size());
  EXPECT_LE(table->memory_bytes(), (1 << 20) * 13 / 10);
  // Pulls read disk rows in place; then a push of every key brings each back with its optimizer state, so the
  // result matches the all-in-memory table bitwise.
  EXPECT_EQ(Pull(*table, all, 41), Pull(*reference, all, 0));
  EXPECT_GT(table->tier_stats().pull_disk_hits, 10000u);
  for (size_t i = 0; i < all.size(); i += 2000) {
    const std::vector<uint64_t> some(all.begin() + i, all.begin() + std::min(all.size(), i + 2000));
    const std::vector<float> g = Grads(some, 99);
    ASSERT_TRUE(table->Push(some, g.data(), 42).ok());
    ASSERT_TRUE(reference->Push(some, g.data(), 42).ok());
  }
  EXPECT_EQ(Pull(*table, all, 43), Pull(*reference, all, 0));
}

INSTANTIATE_TEST_SUITE_P(Storage, BoundedStorageTest, ::testing::Values(VALUE_TYPE_FLOAT32, VALUE_TYPE_BFLOAT16));

TEST(BoundedTableTest, ADiskFailureIsReportedAndLosesNothingEvicted) {
  const TableConfig config = Bounded(/*admit_after=*/0, /*ttl=*/0, 512 << 10, 64 << 20);
  auto table = MustCreate(config);
  table->SetMemoryBudget(512 << 10);
  MapTier disk;
  table->SetColdTier(&disk);
  uint64_t clock = 1;
  while (disk.writes == 0) {
    const std::vector<uint64_t> keys = Keys(clock * 1000, 500);
    ASSERT_TRUE(table->Push(keys, Grads(keys, clock).data(), clock).ok());
    ++clock;
  }
  const uint64_t rows = table->num_rows();
  disk.fail = true;
  const std::vector<uint64_t> keys = Keys(clock * 1000, 5000);
  EXPECT_EQ(table->Push(keys, Grads(keys, clock).data(), clock).code(), absl::StatusCode::kUnavailable);
  // Rows that could not be written to disk stayed in memory: nothing was dropped.
  EXPECT_GE(table->num_rows(), rows);
  EXPECT_EQ(table->tier_stats().capacity_dropped, 0u);
}

// Runs one stream of pushes (with admission, TTL and a budget) and returns the fingerprint after it.
uint64_t RunStream(Table& table, int from_clock, int to_clock) {
  for (int clock = from_clock; clock < to_clock; ++clock) {
    std::vector<uint64_t> keys;
    for (int i = 0; i < 2000; ++i) keys.push_back(Mix64(Mix64(clock * 7919 + i) % (2000 + clock * 3000)));
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    EXPECT_TRUE(table.Push(keys, Grads(keys, clock).data(), clock).ok());
  }
  return table.Fingerprint();
}

TEST(BoundedTableTest, RepeatableAndRestoredTablesDecideExactlyAsUninterruptedOnes) {
  constexpr uint64_t kBudget = 384 << 10;
  const TableConfig config = Bounded(/*admit_after=*/2, /*ttl=*/6, kBudget);
  auto a = MustCreate(config), b = MustCreate(config);
  a->SetMemoryBudget(kBudget);
  b->SetMemoryBudget(kBudget);
  EXPECT_EQ(RunStream(*a, 1, 60), RunStream(*b, 1, 60));
  const TableTierStats stats = a->tier_stats();
  EXPECT_GT(stats.not_admitted, 0u);
  EXPECT_GT(stats.capacity_dropped, 0u);
  EXPECT_GT(stats.expired, 0u);
  EXPECT_GT(stats.admitted, 0u);

  // A copy made at clock 30 (rows with their meta, and the sketch, as a checkpoint keeps them) and then fed
  // clocks 30.. ends exactly like the table that never stopped.
  auto uninterrupted = MustCreate(config), restored = MustCreate(config);
  uninterrupted->SetMemoryBudget(kBudget);
  restored->SetMemoryBudget(kBudget);
  RunStream(*uninterrupted, 1, 30);
  std::vector<std::pair<uint64_t, std::vector<float>>> rows;
  ASSERT_TRUE(uninterrupted->ForEachDirtyRow([&](uint64_t k, absl::Span<const float> row) {
    rows.emplace_back(k, std::vector<float>(row.begin(), row.end()));
    return absl::OkStatus();
  }).ok());
  // The copy loads rows in key order (a checkpoint's), so row ids and index layout differ from the original.
  for (const auto& [k, row] : rows) ASSERT_TRUE(restored->LoadRow(k, row).ok());
  ASSERT_TRUE(restored->LoadSketchState(*uninterrupted->SketchState()).ok());
  EXPECT_EQ(restored->Fingerprint(), uninterrupted->Fingerprint());
  EXPECT_EQ(RunStream(*restored, 30, 60), RunStream(*uninterrupted, 30, 60));
  // Without the sketch, admissions differ.
  auto forgetful = MustCreate(config);
  forgetful->SetMemoryBudget(kBudget);
  for (const auto& [k, row] : rows) ASSERT_TRUE(forgetful->LoadRow(k, row).ok());
  EXPECT_NE(RunStream(*forgetful, 30, 60), uninterrupted->Fingerprint());
}

TEST(BoundedTableTest, SketchStateIsCheckedBeforeLoading) {
  auto table = MustCreate(Bounded(2, 0));
  AdmissionSketchState state = *table->SketchState();
  state.set_width(state.width() * 2);
  EXPECT_EQ(table->LoadSketchState(state).code(), absl::StatusCode::kInvalidArgument);
  state = *table->SketchState();
  state.mutable_stripes(3)->mutable_counters()->resize(7);
  EXPECT_EQ(table->LoadSketchState(state).code(), absl::StatusCode::kInvalidArgument);
  auto other_span = Table::Create(Bounded(2, 0), KeyRange{0, uint64_t{1} << 40});
  ASSERT_TRUE(other_span.ok());
  EXPECT_EQ((*other_span)->LoadSketchState(*table->SketchState()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(MustCreate(Bounded(1, 0))->SketchState().has_value());  // no admission, no sketch
}

TEST(BoundedTableTest, StoredRowsCarryMeta) {
  const TableConfig config = Bounded(0, 10);
  auto table = MustCreate(config);
  EXPECT_EQ(*Table::StoredFloats(config), kDim + kDim + Table::kMetaFloats);  // values, Adagrad, meta
  const std::vector<uint64_t> keys = Keys(1, 3);
  ASSERT_TRUE(table->Push(keys, Grads(keys, 1).data(), 7).ok());
  ASSERT_TRUE(table->ForEachDirtyRow([&](uint64_t, absl::Span<const float> row) {
    EXPECT_EQ(row.size(), static_cast<size_t>(table->stored_floats()));
    uint32_t meta[2];
    std::memcpy(meta, row.data() + row.size() - 2, sizeof(meta));
    EXPECT_EQ(meta[0], 7u);  // last push clock
    EXPECT_EQ(meta[1], 1u);  // pushes
    EXPECT_FALSE(Table::Expired(config, row, 17));
    EXPECT_TRUE(Table::Expired(config, row, 18));
    return absl::OkStatus();
  }).ok());
  TableConfig plain = config;
  plain.clear_capacity();
  EXPECT_EQ(*Table::StoredFloats(plain), 2 * kDim);
}

}  // namespace
}  // namespace kestrel
