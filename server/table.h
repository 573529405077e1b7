// Table: the rows of one sparse table (or the blocks of one dense table) held by one server.
//
// Storage. Each row is stored contiguously as [key (8 bytes) | values (dim floats) | optimizer slots] in
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
// Checkpoints. Each stripe keeps a byte per row saying whether it was written since the last ClearDirty(), so an
// incremental checkpoint writes only the changed rows (finding them is a scan of one byte per row).
//
// Rows are created on first push with the table's initializer; a pull of an absent key returns the same
// deterministic initial value without storing a row (so evaluation traffic does not grow the table).
//
// Thread-safe. Pull/Push expect keys already validated by the caller (Shard): unique, owned by this server.
#ifndef KESTREL_SERVER_TABLE_H_
#define KESTREL_SERVER_TABLE_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/partition.h"
#include "proto/table.pb.h"
#include "server/initializer.h"
#include "server/optimizer.h"

namespace kestrel {

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

  // InvalidArgument unless the name (1-64 characters of [A-Za-z0-9_.-]), dim ([1, kMaxDim]) and kind /
  // dense_size ([1, kMaxDenseSize] for dense tables, 0 for sparse ones) are valid: what every table, and every
  // table read from a file (manifests, exports), must satisfy before it is used or allocated.
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
  // Dense tables: the number of blocks (Partition::DenseBlockCount); 0 for sparse tables.
  uint64_t num_blocks() const {
    return config_.kind() == TableConfig::DENSE ? Partition::DenseBlockCount(config_.dense_size(), dim_) : 0;
  }

  // Writes keys.size() rows of dim() floats to `out`, in key order.
  void Pull(absl::Span<const uint64_t> keys, float* out) const;
  // Applies one gradient row per key (keys.size() * dim() floats), creating absent rows first.
  // Keys must be unique.
  void Push(absl::Span<const uint64_t> keys, const float* grads);

  uint64_t num_rows() const;
  // Bytes held: arena chunks + hash index.
  uint64_t memory_bytes() const;
  // Bytes of the rows themselves: rows * (8 + 4 * (dim + slot_floats)).
  uint64_t raw_bytes() const;

  // Checkpoint support. Every row written since the last ClearDirty() (by Push or LoadRow) is dirty.
  // Calls fn(key, row) for each dirty row in key order, where row holds dim() values followed by slot_floats()
  // floats of optimizer state, stripe by stripe under the stripe's shared lock; stops at the first error fn
  // returns.
  absl::Status ForEachDirtyRow(const std::function<absl::Status(uint64_t, absl::Span<const float>)>& fn) const;
  uint64_t num_dirty() const;
  void ClearDirty();
  // Marks every stored row dirty (after a restore, the next checkpoint writes everything).
  void MarkAllDirty();
  // Stores `row` (dim() values then slot_floats() floats of optimizer state) as the row of `key`, replacing
  // any previous one, and marks it dirty. InvalidArgument for a row of the wrong width.
  absl::Status LoadRow(uint64_t key, absl::Span<const float> row);
  // Drops every row (a restore starts from an empty table).
  void Clear();
  // Floats of a stored row: dim() + slot_floats().
  int stored_floats() const { return dim_ + slot_floats(); }

  // Order-independent fingerprint of every stored row (key, values and optimizer state).
  uint64_t Fingerprint() const;
  // The rows' part of it: a sum over rows, so the sums of a table's shards on several servers add up to the
  // whole table's, whatever the partition.
  uint64_t RowsFingerprint() const;
  // Calls fn(key, values, slots) for every stored row, stripe by stripe, under the stripe's shared lock.
  void ForEachRow(const std::function<void(uint64_t, const float*, const float*)>& fn) const;

 private:
  struct alignas(64) Stripe {
    mutable absl::Mutex mu;
    std::vector<uint32_t> index ABSL_GUARDED_BY(mu);  // row id + 1; 0 = empty; size is a power of two
    std::vector<std::unique_ptr<float[]>> chunks ABSL_GUARDED_BY(mu);
    uint32_t rows ABSL_GUARDED_BY(mu) = 0;
    std::vector<uint8_t> dirty ABSL_GUARDED_BY(mu);  // by row id: written since the last ClearDirty
    uint32_t num_dirty ABSL_GUARDED_BY(mu) = 0;
  };

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
  // Returns the row id of `key` or -1.
  int64_t FindLocked(const Stripe& s, uint64_t hash, uint64_t key) const ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // Returns the row of `key`, creating it when absent (with initial values and optimizer state when
  // `initialize`; else the caller writes every float), and marks it dirty (callers write it).
  float* FindOrCreateLocked(Stripe& s, uint64_t hash, uint64_t key, bool initialize = true)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  void GrowIndexLocked(Stripe& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Calls visit(i) for each request position i of stripe `si` in order, prefetching ahead (see table.cc).
  template <typename Visit>
  void VisitStripeLocked(const Stripe& s, const Scratch& scratch, int si, const float* request_rows, bool pushing,
                         Visit visit) const ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // Software prefetch of a key's index slot, and of its row (found through the slot, if present).
  void PrefetchSlotLocked(const Stripe& s, uint64_t hash) const ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  void PrefetchRowLocked(const Stripe& s, uint64_t hash, bool for_write) const ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // Prefetches the cache lines of [p, p + bytes), at most kMaxPrefetchBytes.
  static void PrefetchSpan(const void* p, size_t bytes, bool for_write);

  // Prefetch distances (in keys) for the lookup loops, and the most bytes of a row prefetched.
  static constexpr uint32_t kSlotAhead = 16;
  static constexpr uint32_t kRowAhead = 8;
  static constexpr size_t kMaxPrefetchBytes = 512;

  const TableConfig config_;
  const uint64_t key_lo_;    // first key of the shard's span
  const int stripe_shift_;   // stripe = (key - key_lo_) >> stripe_shift_
  const int dim_;
  const int row_floats_;  // 2 (key) + dim + slots
  const int chunk_shift_;  // rows per chunk = 1 << chunk_shift_
  const uint32_t chunk_mask_;
  const Initializer init_;
  const std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Stripe[]> stripes_;
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_TABLE_H_
