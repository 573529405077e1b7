// RowArena (server/row_arena.h): lookups, removals that move rows, flags and the byte accounting.
#include "server/row_arena.h"

#include <cstdint>
#include <map>
#include <random>

#include "common/hash.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

constexpr int kRowFloats = RowArena::kKeyFloats + 3;

uint32_t InsertKey(RowArena& arena, uint64_t key) {
  const uint32_t id = arena.Insert(Mix64(key), key);
  float* row = arena.row(id);
  for (int j = RowArena::kKeyFloats; j < kRowFloats; ++j) row[j] = static_cast<float>(key % 1000 + j);
  return id;
}

TEST(RowArenaTest, FindsWhatWasInsertedAndNothingElse) {
  RowArena arena(kRowFloats);
  EXPECT_EQ(arena.Find(Mix64(7), 7), -1);
  for (uint64_t key = 1; key <= 1000; ++key) EXPECT_EQ(InsertKey(arena, key), key - 1);
  ASSERT_EQ(arena.size(), 1000u);
  EXPECT_EQ(arena.num_dirty(), 1000u);
  for (uint64_t key = 1; key <= 1000; ++key) {
    const int64_t id = arena.Find(Mix64(key), key);
    ASSERT_GE(id, 0);
    EXPECT_EQ(RowArena::KeyOf(arena.row(id)), key);
    EXPECT_EQ(arena.row(id)[kRowFloats - 1], static_cast<float>(key % 1000 + kRowFloats - 1));
  }
  EXPECT_EQ(arena.Find(Mix64(1001), 1001), -1);
}

TEST(RowArenaTest, RemovalsKeepTheIndexAndFlagsConsistent) {
  RowArena arena(kRowFloats);
  std::map<uint64_t, bool> stored;  // key -> whether it was flagged kStored
  std::mt19937_64 rng(301);
  uint64_t next = 1;
  for (int step = 0; step < 20000; ++step) {
    if (stored.empty() || rng() % 3 != 0) {
      const uint64_t key = next++;
      const uint32_t id = InsertKey(arena, key);
      const bool flag = rng() % 2 == 0;
      if (flag) arena.SetFlags(id, RowArena::kStored);
      stored[key] = flag;
    } else {
      auto it = stored.begin();
      std::advance(it, rng() % stored.size());
      const int64_t id = arena.Find(Mix64(it->first), it->first);
      ASSERT_GE(id, 0);
      arena.Remove(static_cast<uint32_t>(id));
      stored.erase(it);
    }
  }
  ASSERT_EQ(arena.size(), stored.size());
  for (const auto& [key, flag] : stored) {
    const int64_t id = arena.Find(Mix64(key), key);
    ASSERT_GE(id, 0) << key;
    EXPECT_EQ((arena.flags(id) & RowArena::kStored) != 0, flag);
    EXPECT_EQ(arena.row(id)[RowArena::kKeyFloats], static_cast<float>(key % 1000 + RowArena::kKeyFloats));
  }
  EXPECT_EQ(arena.num_dirty(), stored.size());
}

TEST(RowArenaTest, DirtyFlagsAndCounts) {
  RowArena arena(kRowFloats);
  for (uint64_t key = 1; key <= 10; ++key) InsertKey(arena, key);
  arena.ClearDirty();
  EXPECT_EQ(arena.num_dirty(), 0u);
  EXPECT_EQ(arena.flags(3), RowArena::kStored);
  arena.MarkDirty(3);
  arena.MarkDirty(3);
  EXPECT_EQ(arena.num_dirty(), 1u);
  arena.Remove(3);
  EXPECT_EQ(arena.num_dirty(), 0u);
  arena.MarkAllDirty();
  EXPECT_EQ(arena.num_dirty(), 9u);
  EXPECT_EQ(arena.flags(0), RowArena::kDirty);
  arena.Clear();
  EXPECT_EQ(arena.size(), 0u);
  EXPECT_EQ(arena.memory_bytes(), 0u);
}

TEST(RowArenaTest, BytesForMatchesAGrownArena) {
  RowArena arena(kRowFloats);
  for (uint64_t key = 1; key <= 5000; ++key) InsertKey(arena, key);
  EXPECT_LE(arena.memory_bytes(), RowArena::BytesFor(5000, kRowFloats) + 5000);  // flags' capacity may exceed
  EXPECT_GE(arena.memory_bytes() + 4096, RowArena::BytesFor(5000, kRowFloats));
}

}  // namespace
}  // namespace kestrel
