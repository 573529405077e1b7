// Table: the rows of one sparse table (or the blocks of one dense table) held by one server.
//
// Storage. Each row is stored contiguously as [key (8 bytes) | values (dim floats) | optimizer slots | meta] in
// fixed-size arena chunks, so a lookup that finds its key has the row in the same cache lines. Rows are
// indexed by an open-addressing (linear probing) hash index of 4-byte row ids, kept at most 3/4 full, so the
// index costs 5-11 bytes per row on top of the raw row bytes (key + values + slots).
//
// Concurrency. The table is split into kStripes lock stripes, each a contiguous slice of the shard's key span
// (keys are hashed feature ids, so slices hold equal shares). A request takes each stripe's lock once: sorted
// requests (the protocol's rule for sparse keys) are already grouped by stripe and are processed in request
// order, writing their answer sequentially; others are bucketed first. Concurrent requests from many
// workers rarely contend and there is no table-wide lock. Pulls take stripes shared, pushes exclusive.
//
// Checkpoints. Each stripe keeps a byte of flags per row saying whether it was written since the last
// ClearDirty() and whether the store holds a copy, so an incremental checkpoint writes only the changed rows
// (finding them is a scan of one byte per row) and deletes (tombstones) the stored rows that left the table.
//
// Rows are created on first push with the table's initializer; a pull of an absent key returns the same
// deterministic initial value without storing a row (so evaluation traffic does not grow the table).
//
// Bounded tables (a CapacityPolicy in the config; docs/bounded_tables.md). Each row also keeps `meta`: the clock
// of its last push and its push count (2 x uint32, stored as two floats' bytes after the slots, and part of
// the stored row). Then:
//  - Admission: a key absent from the table gets a row only on its admit_after-th push, counted in a per-stripe
//    count-min sketch (conservative update, halved periodically); earlier pushes are dropped.
//  - Expiry: a row whose last push is more than ttl_clocks before the request's clock is absent for that request
//    (pull: initial value; push: a new row, after admission). Physically, a push of clock c with
//    c % sweep period == 0 removes a stripe's expired rows.
//  - Capacity: each stripe holds at most 1/kStripes of the rows the memory budget allows. A push that needs a
//    new row in a full stripe first moves its coldest rows out (1/16 of them: oldest last push, then fewest
//    pushes, then smallest key): to the ColdTier while it has room (pulls then read them there; the next push
//    brings the row back, state included), else dropped.
// Every one of these decisions is a function of the rows, their meta, the sketch and the push sequence (never of
// timing, row ids or pulls), so BSP runs repeat bitwise, and a table restored from a checkpoint (rows, meta and
// sketch) decides exactly as the uninterrupted one. The one exception: with a disk tier that overflows, which
// rows are in memory when it does depends on the restore.
//
// Thread-safe. Pull/Push expect keys already validated by the caller (Shard): unique, owned by this server.
#ifndef KESTREL_SERVER_TABLE_H_
#define KESTREL_SERVER_TABLE_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <atomic>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/partition.h"
#include "proto/table.pb.h"
#include "server/initializer.h"
#include "server/optimizer.h"

namespace kestrel {

// Where a bounded table's rows go when they leave memory with a disk budget (ShardStore implements it on the
// server's RocksDB working store). Rows are stored_floats() floats (values, slots, meta). Thread-safe.
class ColdTier {
 public:
  virtual ~ColdTier() = default;
  // Stores the rows of `keys` (keys.size() * floats floats), replacing earlier copies.
  virtual absl::Status Write(absl::string_view table, absl::Span<const uint64_t> keys,
                             absl::Span<const float> rows) = 0;
  // Reads the rows of `keys` into `rows` (keys.size() * floats floats); found[i] says whether key i is held
  // (a key not held leaves its row untouched).
  virtual absl::Status Read(absl::string_view table, absl::Span<const uint64_t> keys, int floats, float* rows,
                            std::vector<uint8_t>* found) = 0;
  // Deletes the rows of `keys` (absent ones are no error).
  virtual absl::Status Delete(absl::string_view table, absl::Span<const uint64_t> keys) = 0;
};

// What a table has done to bound itself, since it was created (counters) and now (gauges).
struct TableTierStats {
  uint64_t admitted = 0;           // rows created for keys absent from memory and disk
  uint64_t not_admitted = 0;       // pushed keys below admit_after: gradients counted and dropped
  uint64_t expired = 0;            // rows removed for TTL (from memory, or found expired on disk)
  uint64_t capacity_dropped = 0;   // rows dropped for capacity
  uint64_t spilled = 0;            // rows moved to disk
  uint64_t promoted = 0;           // rows moved back from disk
  uint64_t pull_memory_hits = 0;   // pulled keys found in memory
  uint64_t pull_disk_hits = 0;     // pulled keys read from disk
  uint64_t pull_misses = 0;        // pulled keys absent (or expired): initial values
  uint64_t disk_rows = 0;          // rows on disk now
  uint64_t memory_budget = 0;      // bytes; 0 = unbounded
};

class Table {
 public:
  static constexpr int kStripeBits = 6;
  static constexpr int kStripes = 1 << kStripeBits;
  // Rows per arena chunk: a power of two, at most kMaxChunkRows (small enough that a half-empty last chunk per
  // stripe is cheap for 1e5-row tables) and at most kChunkBytes of rows (so wide rows do not reserve
  // megabytes per stripe), at least 1.
  static constexpr uint32_t kMaxChunkRows = 64;
  static constexpr size_t kChunkBytes = 64 << 10;
  static constexpr int kMaxDim = 4096;
  // Largest dense tensor, in floats (2^36, 256 GiB).
  static constexpr uint64_t kMaxDenseSize = uint64_t{1} << 36;
  // Admission sketch: counter rows, default size, and the most admit_after can be (8-bit counters).
  static constexpr int kSketchDepth = 4;
  static constexpr uint64_t kDefaultSketchBytes = uint64_t{4} << 20;
  static constexpr uint32_t kMaxAdmitAfter = 255;
  // Floats of a bounded row's meta (last-push clock and push count, uint32 each).
  static constexpr int kMetaFloats = 2;

  // InvalidArgument unless the name (1-64 characters of [A-Za-z0-9_.-]), dim ([1, kMaxDim]) and kind /
  // dense_size ([1, kMaxDenseSize] for dense tables, 0 for sparse ones) are valid, and a capacity policy is on a
  // sparse table with admit_after <= kMaxAdmitAfter, ttl_clocks >= 0 and sketch_bytes <= 1 GiB: what every
  // table, and every table read from a file (manifests, exports), must satisfy before it is used or allocated.
  static absl::Status CheckShape(const TableConfig& config);
  // Validates the config (name, dim, initializer, optimizer) and builds an empty table for keys in `span`
  // (the owning shard's first to last key; keys outside it work, all in the first or last stripe).
  static absl::StatusOr<std::unique_ptr<Table>> Create(const TableConfig& config,
                                                       KeyRange span = {0, ~uint64_t{0}});

  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

  const TableConfig& config() const { return config_; }
  int dim() const { return dim_; }
  // Floats of optimizer state per row.
  int slot_floats() const { return optimizer_->slot_floats(); }
  // Whether the config has a capacity policy (rows carry meta).
  bool bounded() const { return meta_floats_ > 0; }
  // Dense tables: the number of blocks (Partition::DenseBlockCount); 0 for sparse ones.
  uint64_t num_blocks() const {
    return config_.kind() == TableConfig::DENSE ? Partition::DenseBlockCount(config_.dense_size(), dim_) : 0;
  }

  // Writes keys.size() rows of dim() floats to `out`, in key order, as of `clock` (bounded tables: rows
  // expired at `clock` read as absent). Fails only when the disk tier does (`out` is then partly written).
  absl::Status Pull(absl::Span<const uint64_t> keys, float* out, int64_t clock = 0) const;
  // Applies one gradient row per key (keys.size() * dim() floats) at `clock`, creating absent rows first
  // (bounded tables: once admitted). Keys must be unique. Fails only when the disk tier does: the table may
  // then hold part of the push, and the caller must restore it (Shard refuses requests until then).
  absl::Status Push(absl::Span<const uint64_t> keys, const float* grads, int64_t clock = 0);

  // Bounded tables: the memory budget, in bytes of memory_bytes() (0: unbounded, the default), and where
  // rows go when they leave memory (null: dropped; the default). Shrinking the budget takes effect as pushes
  // need room.
  void SetMemoryBudget(uint64_t bytes);
  void SetColdTier(ColdTier* tier);

  // Rows in memory and on disk.
  uint64_t num_rows() const;
  // Bytes held in memory: arena chunks, hash index, row flags, tombstones and admission sketch.
  uint64_t memory_bytes() const;
  // Bytes of the rows themselves: rows in memory * (8 + 4 * (dim + slot_floats + meta)).
  uint64_t raw_bytes() const;
  TableTierStats tier_stats() const;

  // Checkpoint support. Every row written since the last ClearDirty() (by Push or LoadRow) is dirty.
  // Calls fn(key, row) for each dirty row in key order, where row holds stored_floats() floats (values,
  // optimizer state, meta), stripe by stripe under the stripe's shared lock; stops at the first error fn
  // returns.
  absl::Status ForEachDirtyRow(const std::function<absl::Status(uint64_t, absl::Span<const float>)>& fn) const;
  // The same for every row in memory, dirty or not (copying a table to another server: re-replication).
  absl::Status ForEachStoredRow(const std::function<absl::Status(uint64_t, absl::Span<const float>)>& fn) const;
  // Calls fn(key) for each key whose row the store holds (it was in memory at a ClearDirty(), or was moved to
  // disk) but that has since left the table: the checkpoint deletes them.
  absl::Status ForEachTombstone(const std::function<absl::Status(uint64_t)>& fn) const;
  uint64_t num_dirty() const;
  // After a checkpoint wrote every dirty row and tombstone: nothing is dirty, every row is in the store.
  void ClearDirty();
  // Marks every stored row dirty and not in the store (after a restore, the next checkpoint writes everything).
  void MarkAllDirty();
  // Stores `row` (stored_floats() floats) as the row of `key`, replacing any previous one, and marks it
  // dirty (making room as a push would). InvalidArgument for a row of the wrong width.
  absl::Status LoadRow(uint64_t key, absl::Span<const float> row);
  // Drops every row, tombstone and admission count (a restore starts from an empty table and store).
  void Clear();
  // Floats of a stored row: dim() + slot_floats() + kMetaFloats if bounded.
  int stored_floats() const { return dim_ + slot_floats() + meta_floats_; }
  // Stored floats for a table of this config (without building it).
  static absl::StatusOr<int> StoredFloats(const TableConfig& config);
  // Whether a stored row of a bounded table (stored_floats floats) is expired at `clock`. Unbounded tables: no.
  static bool Expired(const TableConfig& config, absl::Span<const float> stored_row, int64_t clock);

  // Admission sketch (bounded tables with admit_after > 1; otherwise empty): whether it changed since the
  // last ClearDirty(), its state, and loading a state written by a table of the same config and span
  // (InvalidArgument otherwise, leaving the sketch unchanged).
  bool sketch_dirty() const;
  std::optional<AdmissionSketchState> SketchState() const;
  absl::Status LoadSketchState(const AdmissionSketchState& state);

  // Order-independent fingerprint of every stored row (key, values, optimizer state, meta) in memory.
  uint64_t Fingerprint() const;
  // The rows' part of it: a sum over rows, so the sums of a table's shards on several servers add up to the
  // whole table's, whatever the partition.
  uint64_t RowsFingerprint() const;
  // Calls fn(key, values, slots) for every row in memory, stripe by stripe, under the stripe's shared lock.
  void ForEachRow(const std::function<void(uint64_t, const float*, const float*)>& fn) const;

 private:
  // ForEachDirtyRow (dirty_only) and ForEachStoredRow.
  absl::Status VisitRows(bool dirty_only,
                         const std::function<absl::Status(uint64_t, absl::Span<const float>)>& fn) const;

  struct alignas(64) Stripe {
    mutable absl::Mutex mu;
    std::vector<uint32_t> index ABSL_GUARDED_BY(mu);  // row id + 1; 0 = empty; size is a power of two
    std::vector<std::unique_ptr<float[]>> chunks ABSL_GUARDED_BY(mu);
    uint32_t rows ABSL_GUARDED_BY(mu) = 0;
    std::vector<uint8_t> flags ABSL_GUARDED_BY(mu);  // by row id: kDirty | kStored
    uint32_t num_dirty ABSL_GUARDED_BY(mu) = 0;
    // Bounded tables.
    std::vector<uint64_t> tombstones ABSL_GUARDED_BY(mu);  // stored keys that left since the last ClearDirty
    std::vector<uint8_t> sketch ABSL_GUARDED_BY(mu);       // kSketchDepth * sketch_width_ counters
    uint64_t sketch_increments ABSL_GUARDED_BY(mu) = 0;
    bool sketch_dirty ABSL_GUARDED_BY(mu) = false;
    int64_t swept_at ABSL_GUARDED_BY(mu) = -1;  // clock of the last expiry sweep
    uint32_t disk_rows ABSL_GUARDED_BY(mu) = 0;  // rows of this stripe on the cold tier
    TableTierStats stats ABSL_GUARDED_BY(mu);    // counters (pull hits are kept in pull_stats_)
  };
  static constexpr uint8_t kDirty = 1;
  static constexpr uint8_t kStored = 2;
  static constexpr uint8_t kPinned = 4;  // in the push being applied: not evicted by it

  Table(const TableConfig& config, KeyRange span, Initializer init, std::unique_ptr<Optimizer> optimizer);

  // Groups request positions by stripe into scratch->order; scratch->bounds[s] .. bounds[s+1] are stripe s's.
  struct Scratch;
  void BucketByStripe(absl::Span<const uint64_t> keys, Scratch* scratch) const;
  int StripeOf(uint64_t key) const;

  float* RowLocked(const Stripe& s, uint32_t row) const ABSL_SHARED_LOCKS_REQUIRED(s.mu) {
    return s.chunks[row >> chunk_shift_].get() + static_cast<size_t>(row & chunk_mask_) * row_floats_;
  }
  static uint64_t RowKey(const float* row) {
    uint64_t key;
    std::memcpy(&key, row, sizeof(key));
    return key;
  }
  // A bounded row's meta (at row + meta_offset_).
  struct Meta {
    uint32_t clock;
    uint32_t count;
  };
  Meta GetMeta(const float* row) const {
    Meta m;
    std::memcpy(&m, row + meta_offset_, sizeof(m));
    return m;
  }
  void SetMeta(float* row, Meta m) const { std::memcpy(row + meta_offset_, &m, sizeof(m)); }
  bool ExpiredAt(const float* row, int64_t clock) const {
    return ttl_ > 0 && clock - static_cast<int64_t>(GetMeta(row).clock) > ttl_;
  }
  // Returns the row id of `key` or -1.
  int64_t FindLocked(const Stripe& s, uint64_t hash, uint64_t key) const ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // Appends a row for `key` (absent), making room first in a bounded table, marks it dirty and returns it
  // (the caller writes every float but the key).
  absl::StatusOr<float*> InsertLocked(Stripe& s, uint64_t hash, uint64_t key, int64_t clock)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void MarkDirtyLocked(Stripe& s, uint32_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    s.num_dirty += (s.flags[id] & kDirty) ^ kDirty;
    s.flags[id] |= kDirty;
  }
  // Writes a fresh row's initial values, optimizer state and meta.
  void InitRow(float* row, uint64_t key, int64_t clock) const;
  void GrowIndexLocked(Stripe& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Removes the rows `ids` (sorted in decreasing order; each removal moves the last row into the hole). Rows the
  // store holds get a tombstone, or with a cold tier are deleted from it now (pulls read it). Nothing changes
  // if that deletion fails.
  absl::Status RemoveLocked(Stripe& s, absl::Span<const uint32_t> ids) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void RemoveOneLocked(Stripe& s, uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Moves the coldest rows out until the stripe holds at most `target` rows (see the class comment).
  absl::Status EvictLocked(Stripe& s, uint32_t target, int64_t clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Removes the rows expired at `clock`.
  absl::Status SweepLocked(Stripe& s, int64_t clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Counts one push of an absent key; returns whether it is admitted now.
  bool AdmitLocked(Stripe& s, uint64_t hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Reads the stored rows of the request positions `missing` from the cold tier (ColdTier::Read's contract).
  absl::Status ReadCold(absl::Span<const uint64_t> keys, const std::vector<uint32_t>& missing,
                        std::vector<float>* rows, std::vector<uint8_t>* found) const;
  // Calls visit(i) for each request position i of stripe `si` in order, prefetching ahead (see table.cc).
  template <typename Visit>
  void VisitStripeLocked(const Stripe& s, const Scratch& scratch, int si, const float* request_rows, bool pushing,
                         Visit visit) const ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // Software prefetch of a key's index slot, and of its row (found through the slot, if present).
  void PrefetchSlotLocked(const Stripe& s, uint64_t hash) const ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  void PrefetchRowLocked(const Stripe& s, uint64_t hash, bool for_write) const ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // Prefetches the cache lines of [p, p + bytes), at most kMaxPrefetchBytes.
  static void PrefetchSpan(const void* p, size_t bytes, bool for_write);
  // Bytes a stripe of `rows` rows holds (arena, index, flags): how the budget becomes a row cap.
  uint64_t StripeBytes(uint64_t rows) const;

  // Prefetch distances (in keys) for the lookup loops, and the most bytes of a row prefetched.
  static constexpr uint32_t kSlotAhead = 16;
  static constexpr uint32_t kRowAhead = 8;
  static constexpr size_t kMaxPrefetchBytes = 512;

  const TableConfig config_;
  const uint64_t key_lo_;    // first key of the shard's span
  const uint64_t key_hi_;    // last key of the shard's span
  const int stripe_shift_;   // stripe = (key - key_lo_) >> stripe_shift_
  const int dim_;
  const int meta_floats_;    // kMetaFloats if bounded, else 0
  const int meta_offset_;    // floats from a row's start to its meta
  const int row_floats_;     // 2 (key) + dim + slots + meta
  const int chunk_shift_;    // rows per chunk = 1 << chunk_shift_
  const uint32_t chunk_mask_;
  const Initializer init_;
  const std::unique_ptr<Optimizer> optimizer_;
  // Bounded tables' policy (0 = off).
  const uint32_t admit_after_;
  const int64_t ttl_;
  const int64_t sweep_period_;
  const uint32_t sketch_width_;  // counters per sketch row per stripe (power of two), 0 without admission
  const uint64_t max_disk_rows_per_stripe_;
  std::atomic<uint32_t> max_rows_per_stripe_{0};  // 0: unbounded
  std::atomic<uint64_t> memory_budget_{0};
  std::atomic<ColdTier*> cold_{nullptr};
  mutable std::atomic<uint64_t> pull_memory_hits_{0}, pull_disk_hits_{0}, pull_misses_{0};
  std::unique_ptr<Stripe[]> stripes_;
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_TABLE_H_
