#include "server/table_registry.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "proto/table.pb.h"
#include "server/bounded_policy.h"
#include "server/cut_memory.h"
#include "server/table.h"
#include "server/tables_testing.h"

namespace kestrel {
namespace {

// A bounded table (a capacity policy) of `dim` with its own memory cap `max_memory` (0: none).
TableConfig Bounded(const std::string& name, int dim, uint64_t max_memory = 0, uint64_t max_disk = 0) {
  TableConfig c = ZeroSgdTable(name, dim);
  c.mutable_capacity()->set_max_memory_bytes(max_memory);
  c.mutable_capacity()->set_max_disk_bytes(max_disk);
  c.mutable_capacity()->set_ttl_clocks(100);
  return c;
}

constexpr KeyRange kAll = {0, ~uint64_t{0}};

TEST(TableRegistryTest, AddIsIdempotentAndRefusesConflictsAndTooManyTables) {
  CutMemory memory;
  TableRegistry tables(/*owner=*/3, kAll, /*max_tables=*/2, /*memory_budget_bytes=*/0, &memory);
  absl::StatusOr<bool> added = tables.Add(ZeroSgdTable("emb", 4));
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_TRUE(*added);
  added = tables.Add(ZeroSgdTable("emb", 4));
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_FALSE(*added) << "the same table again";
  added = tables.Add(ZeroSgdTable("emb", 8));
  EXPECT_EQ(added.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(absl::StrContains(added.status().message(), "already exists on shard 3")) << added.status();
  EXPECT_EQ(tables.Add(ZeroSgdTable("bad name", 4)).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(tables.Add(ZeroSgdTable("a", 2)).ok());
  added = tables.Add(ZeroSgdTable("c", 2));
  EXPECT_EQ(added.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(added.status().message(), "shard 3 already holds 2 tables")) << added.status();
}

TEST(TableRegistryTest, FindsAndListsTablesByName) {
  CutMemory memory;
  TableRegistry tables(0, kAll, 10, 0, &memory);
  EXPECT_EQ(tables.Find("emb"), nullptr);
  EXPECT_TRUE(tables.All().empty());
  for (const char* name : {"m", "b", "z", "a"}) ASSERT_TRUE(tables.Add(ZeroSgdTable(name, 2)).ok());
  Table* b = tables.Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->config().name(), "b");
  std::vector<std::string> described, all;
  for (const TableConfig& config : tables.Describe()) described.push_back(config.name());
  for (const Table* table : tables.All()) all.push_back(table->config().name());
  EXPECT_EQ(described, (std::vector<std::string>{"a", "b", "m", "z"}));
  EXPECT_EQ(all, described);
  ASSERT_TRUE(tables.Add(ZeroSgdTable("c", 2)).ok());
  EXPECT_EQ(tables.Find("b"), b) << "tables stay where they are as others are added";
}

TEST(TableRegistryTest, TheServersBudgetIsSharedByRowSizeAndCappedByEachTables) {
  CutMemory memory;
  const uint64_t budget = uint64_t{30} << 20;
  TableRegistry tables(0, kAll, 10, budget, &memory);
  ASSERT_TRUE(tables.Add(ZeroSgdTable("plain", 8)).ok());
  ASSERT_TRUE(tables.Add(Bounded("small", 6)).ok());  // SGD: 6 stored floats, + 2 for the row's meta
  EXPECT_EQ(tables.Find("small")->tier_stats().memory_budget, budget) << "alone, it has the whole budget";
  ASSERT_TRUE(tables.Add(Bounded("large", 14)).ok());
  const uint64_t small_share = tables.Find("small")->tier_stats().memory_budget;
  const uint64_t large_share = tables.Find("large")->tier_stats().memory_budget;
  const uint64_t small_floats = tables.Find("small")->stored_floats() + 2;
  const uint64_t large_floats = tables.Find("large")->stored_floats() + 2;
  EXPECT_EQ(small_share, static_cast<uint64_t>(static_cast<long double>(budget) * small_floats /
                                               (small_floats + large_floats)));
  EXPECT_EQ(large_share, static_cast<uint64_t>(static_cast<long double>(budget) * large_floats /
                                               (small_floats + large_floats)));
  EXPECT_EQ(tables.Find("plain")->tier_stats().memory_budget, 0u) << "unbounded tables have no budget";
  ASSERT_TRUE(tables.Add(Bounded("capped", 6, /*max_memory=*/1 << 20)).ok());
  EXPECT_EQ(tables.Find("capped")->tier_stats().memory_budget, uint64_t{1} << 20) << "its own cap is lower";
}

TEST(TableRegistryTest, WithoutAServerBudgetTablesKeepTheirOwn) {
  CutMemory memory;
  TableRegistry tables(0, kAll, 10, /*memory_budget_bytes=*/0, &memory);
  ASSERT_TRUE(tables.Add(Bounded("capped", 6, /*max_memory=*/1 << 20)).ok());
  ASSERT_TRUE(tables.Add(Bounded("free", 6)).ok());
  EXPECT_EQ(tables.Find("capped")->tier_stats().memory_budget, uint64_t{1} << 20);
  EXPECT_EQ(tables.Find("free")->tier_stats().memory_budget, 0u);
}

class NullTier : public ColdTier {
 public:
  absl::Status Write(absl::string_view, absl::Span<const uint64_t>, absl::Span<const float>) override {
    ++writes;
    return absl::OkStatus();
  }
  absl::Status Read(absl::string_view, absl::Span<const uint64_t>, int, float*, std::vector<uint8_t>*) override {
    return absl::OkStatus();
  }
  absl::Status Delete(absl::string_view, absl::Span<const uint64_t>) override { return absl::OkStatus(); }
  int writes = 0;
};

// Pushes rows into `table` until it moves some out of memory (or gives up); returns whether the tier took any.
bool FillUntilSpilled(Table& table, const NullTier& tier) {
  for (uint64_t clock = 0; clock < 200 && tier.writes == 0; ++clock) {
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < 500; ++k) keys.push_back(clock * 500 + k);
    const std::vector<float> grads(keys.size() * table.dim(), 1.0f);
    EXPECT_TRUE(table.Push(keys, grads.data(), static_cast<int64_t>(clock)).ok());
  }
  return tier.writes > 0;
}

TEST(TableRegistryTest, OnlyTablesWithADiskBudgetGetTheDiskTier) {
  CutMemory memory;
  TableRegistry tables(0, kAll, 10, 0, &memory);
  ASSERT_TRUE(tables.Add(Bounded("before", 4, 64 << 10, 64 << 20)).ok());
  NullTier tier;
  tables.SetColdTier(&tier);
  ASSERT_TRUE(tables.Add(Bounded("after", 4, 64 << 10, 64 << 20)).ok());
  ASSERT_TRUE(tables.Add(Bounded("memory_only", 4, 64 << 10)).ok());
  EXPECT_TRUE(FillUntilSpilled(*tables.Find("before"), tier)) << "set on the tables there were";
  tier.writes = 0;
  EXPECT_TRUE(FillUntilSpilled(*tables.Find("after"), tier)) << "given to tables made later";
  tier.writes = 0;
  EXPECT_FALSE(FillUntilSpilled(*tables.Find("memory_only"), tier)) << "no disk budget: rows are dropped";
}

}  // namespace
}  // namespace kestrel
