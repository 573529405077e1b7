// RowArena: the rows of one lock stripe of a Table, in fixed-size arena chunks, found through an open-addressing
// hash index.
//
// Each row is stored contiguously as [key (8 bytes) | payload], where the payload (values, optimizer slots and,
// in bounded tables, meta) is the Table's business; a lookup that finds its key has the row in the same cache
// lines. The index is linear probing over 4-byte row ids, kept at most 3/4 full, so it costs 5-11 bytes per row
// on top of the rows. Each row also has a flag byte (kDirty, kStored, kPinned) that moves with it.
//
// Row ids are dense ([0, size())): removing a row moves the last row into its place, so ids are stable only
// while no row is removed.
#ifndef KESTREL_SERVER_ROW_ARENA_H_
#define KESTREL_SERVER_ROW_ARENA_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace kestrel {

// Software prefetch of the cache line at `p`. The empty asm keeps it: inlined into the table's row loops, GCC 12
// deletes bare prefetches (at -O2 all of them, at -O3 the loop over a row's lines).
template <int kForWrite>
inline void PrefetchLine(const void* p) {
  __builtin_prefetch(p, kForWrite);
  asm volatile("" : : "r"(p));
}

// Software prefetch of the cache lines of [p, p + bytes), at most kMaxPrefetchBytes of them.
inline constexpr size_t kMaxPrefetchBytes = 512;
inline void PrefetchSpan(const void* p, size_t bytes, bool for_write) {
  const char* begin = static_cast<const char*>(p);
  bytes = std::min(bytes, kMaxPrefetchBytes);
  for (size_t off = 0; off < bytes; off += 64) {
    if (for_write) {
      PrefetchLine<1>(begin + off);
    } else {
      PrefetchLine<0>(begin + off);
    }
  }
}

// Owns its chunks, index and flags. Not thread-safe: the owner (Table) guards each arena with its stripe's lock.
class RowArena {
 public:
  // Floats of the key at the start of each row.
  static constexpr int kKeyFloats = 2;
  // Rows per arena chunk: a power of two, at most kMaxChunkRows (small enough that a half-empty last chunk per
  // stripe is cheap for 1e5-row tables) and at most kChunkBytes of rows (so wide rows do not reserve
  // megabytes per stripe), at least 1.
  static constexpr uint32_t kMaxChunkRows = 64;
  static constexpr size_t kChunkBytes = 64 << 10;
  // Row flags. kDirty: written since the last ClearDirty() (while a cut is pending: written before the cut).
  // kStored: the store (checkpoint or disk tier) holds a copy. kPinned: in the push being applied (a bounded table
  // does not evict it to make room). While a cut is pending: kNext, written since the cut; kPreserved, the row's
  // value at the cut is among the retained copies.
  static constexpr uint8_t kDirty = 1;
  static constexpr uint8_t kStored = 2;
  static constexpr uint8_t kPinned = 4;
  static constexpr uint8_t kNext = 8;
  static constexpr uint8_t kPreserved = 16;
  // Being moved to the disk tier (an eviction about to remove it): the store takes its current value, so its
  // removal leaves no tombstone and no delete.
  static constexpr uint8_t kSpilled = 32;

  // An arena that holds no row and cannot take one (a placeholder until assigned).
  RowArena() = default;
  // An empty arena of rows of `row_floats` floats, key included.
  explicit RowArena(int row_floats);

  RowArena(RowArena&&) = default;
  RowArena& operator=(RowArena&&) = default;

  // Bytes an arena of `rows` rows of `row_floats` floats holds (chunks, index, flags), as memory_bytes() counts
  // them once the index and chunks have grown to `rows`.
  static uint64_t BytesFor(uint64_t rows, int row_floats);

  static uint64_t KeyOf(const float* row) {
    uint64_t key;
    std::memcpy(&key, row, sizeof(key));
    return key;
  }

  int row_floats() const { return row_floats_; }
  uint32_t size() const { return rows_; }
  float* row(uint32_t id) {
    return chunks_[id >> chunk_shift_].get() + static_cast<size_t>(id & chunk_mask_) * row_floats_;
  }
  const float* row(uint32_t id) const {
    return chunks_[id >> chunk_shift_].get() + static_cast<size_t>(id & chunk_mask_) * row_floats_;
  }

  // Returns the row id of `key` (whose Mix64 is `hash`) or -1.
  int64_t Find(uint64_t hash, uint64_t key) const {
    if (index_.empty()) return -1;
    const size_t mask = index_.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      const uint32_t slot = index_[i];
      if (slot == 0) return -1;
      if (KeyOf(row(slot - 1)) == key) return slot - 1;
    }
  }
  // Appends a row for `key` (absent; Mix64 is `hash`), dirty, and returns its id. The caller writes every float
  // but the key.
  uint32_t Insert(uint64_t hash, uint64_t key) {
    // Keep the index at most 3/4 full.
    if ((static_cast<size_t>(rows_) + 1) * 4 > index_.size() * 3) GrowIndex();
    const size_t mask = index_.size() - 1;
    size_t i = hash & mask;
    while (index_[i] != 0) i = (i + 1) & mask;
    const uint32_t id = rows_++;
    flags_.push_back(cut_pending_ ? kNext : kDirty);
    num_dirty_ += !cut_pending_;
    if ((id >> chunk_shift_) == chunks_.size()) AddChunk();
    index_[i] = id + 1;
    std::memcpy(row(id), &key, sizeof(key));
    return id;
  }
  // Removes row `id` (preserving it first: Preserve): the last row moves into its place (taking id `id`).
  void Remove(uint32_t id);

  uint8_t flags(uint32_t id) const { return flags_[id]; }
  void SetFlags(uint32_t id, uint8_t f) { flags_[id] |= f; }
  void ClearFlags(uint32_t id, uint8_t f) { flags_[id] &= ~f; }
  // Call before row `id` changes: marks it dirty (while a cut is pending, preserves it first and marks it kNext).
  void MarkDirty(uint32_t id) {
    if (cut_pending_) {
      Preserve(id);
      flags_[id] |= kNext;
      return;
    }
    num_dirty_ += (flags_[id] & kDirty) ^ kDirty;
    flags_[id] |= kDirty;
  }
  // Rows with kDirty.
  uint32_t num_dirty() const { return num_dirty_; }
  // Every row clean and in the store.
  void ClearDirty();
  // Every row dirty and not in the store (ends a pending cut, dropping its retained copies).
  void MarkAllDirty();
  // Drops every row and frees the memory (and a pending cut).
  void Clear();

  // Copy-on-write cuts (server/table.h). BeginCut: the rows dirty now are the cut's; until EndCut, a change to one
  // of them (MarkDirty, Remove, or an explicit Preserve before a row is rewritten in place) first copies it, as it
  // was at the cut, to the retained copies, and rows written since the cut are kNext, not kDirty.
  void BeginCut() { cut_pending_ = true; }
  bool cut_pending() const { return cut_pending_; }
  void Preserve(uint32_t id) {
    if (cut_pending_ && (flags_[id] & (kDirty | kPreserved)) == kDirty) PreserveSlow(id);
  }
  // Whether the store holds row `id`, or will once the pending cut is written: a removal leaves a tombstone.
  bool InStore(uint32_t id) const {
    const uint8_t f = flags_[id];
    return !(f & kSpilled) && ((f & kStored) || (cut_pending_ && (f & kDirty)));
  }
  // Calls fn(row) (key first, row_floats() floats) for each row of the pending cut: the dirty rows not preserved,
  // then the retained copies.
  template <typename Fn>
  void ForEachCutRow(Fn fn) const {
    for (uint32_t id = 0; id < rows_; ++id) {
      if ((flags_[id] & (kDirty | kPreserved)) == kDirty) fn(row(id));
    }
    for (uint32_t i = 0; i < retained_rows_; ++i) fn(RetainedRow(i));
  }
  // The cut is in the store: its rows are clean and stored, rows written since are the dirty ones; the retained
  // copies are freed.
  void EndCut();
  // Bytes the retained copies hold.
  uint64_t retained_bytes() const {
    return sizeof(float) * retained_chunks_.size() * RetainedChunkRows() * row_floats_;
  }

  // Bytes held: index, chunks and flags (capacities).
  uint64_t memory_bytes() const;

  // Software prefetch of a key's index slot, and of its row (found through the slot, if present).
  void PrefetchSlot(uint64_t hash) const {
    if (!index_.empty()) PrefetchLine<0>(&index_[hash & (index_.size() - 1)]);
  }
  void PrefetchRow(uint64_t hash, bool for_write) const {
    if (index_.empty()) return;
    const uint32_t slot = index_[hash & (index_.size() - 1)];
    if (slot == 0) return;
    PrefetchSpan(row(slot - 1), sizeof(float) * row_floats_, for_write);
  }

 private:
  void GrowIndex();
  void AddChunk();
  void PreserveSlow(uint32_t id);

  int row_floats_ = 0;
  int chunk_shift_ = 0;  // rows per chunk = 1 << chunk_shift_
  uint32_t chunk_mask_ = 0;
  std::vector<uint32_t> index_;  // row id + 1; 0 = empty; size is a power of two
  std::vector<std::unique_ptr<float[]>> chunks_;
  uint32_t rows_ = 0;
  std::vector<uint8_t> flags_;  // by row id
  uint32_t num_dirty_ = 0;
  bool cut_pending_ = false;
  // Rows (key first) as they were at the pending cut, in chunks of about kChunkBytes: growing never copies them,
  // and the allocator reuses the chunks of the last cut.
  uint32_t RetainedChunkRows() const {
    return std::max<uint32_t>(1, static_cast<uint32_t>(kChunkBytes / (sizeof(float) * row_floats_)));
  }
  const float* RetainedRow(uint32_t i) const {
    const uint32_t per = RetainedChunkRows();
    return retained_chunks_[i / per].get() + static_cast<size_t>(i % per) * row_floats_;
  }
  void DropRetained() {
    retained_chunks_.clear();
    retained_rows_ = 0;
  }
  std::vector<std::unique_ptr<float[]>> retained_chunks_;
  uint32_t retained_rows_ = 0;
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_ROW_ARENA_H_
