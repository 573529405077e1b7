// Table: the rows of one sparse table (or the blocks of one dense table) held by one server.
//
// Storage. The table is split into KeyStripes::kCount lock stripes, each a contiguous slice of the shard's key
// span holding its rows in a RowArena ([key | values | optimizer slots | meta] per row, found through an
// open-addressing index). Values are fp32, or bf16/fp16 two to a word (TableConfig.storage, RowValues: updated in
// fp32 and rounded once per push); everything that copies rows (checkpoints, replicas, rescales, the disk tier)
// carries the stored form. A request takes each stripe's lock once (KeyStripes): concurrent requests from many
// workers rarely contend and there is no table-wide lock. Pulls take stripes shared, pushes exclusive.
//
// Rows are created on first push with the table's initializer; a pull of an absent key returns the same
// deterministic initial value without storing a row (so evaluation traffic does not grow the table).
//
// Checkpoints. Each row has flags saying whether it was written since the last ClearDirty() and whether the store
// holds a copy, so an incremental checkpoint writes only the changed rows (finding them is a scan of one byte per
// row) and deletes (tombstones) the stored rows that left the table.
//
// Copy-on-write cuts. BeginCut() marks the cut in O(stripes): the rows dirty then, the tombstones and the admission
// sketch are the cut's, and requests go on at once. Until the writer has written a stripe (WriteCutStripe), a push
// that changes one of the cut's rows there, or removes it, first copies it as it was (RowArena::Preserve; the copies
// are counted in the shard's CutMemory, whose bound makes pushes wait); rows written since the cut are dirty for the
// next checkpoint, and rows leaving since it are its tombstones. WriteCutStripe hands the writer the stripe's cut
// (live rows not changed since, and the copies) under the stripe's lock, then frees the copies: the writer emits
// exactly the state at the cut, holding one stripe's lock at a time only to copy that stripe's cut out.
//
// Bounded tables (a CapacityPolicy in the config): admission, expiry, a memory budget and a cold tier, decided by
// BoundedPolicy (server/bounded_policy.h), which Pull and Push call through per-row hooks that are no-ops for
// unbounded tables.
//
// Thread-safe. Pull/Push expect keys already validated by the caller (Shard): unique, owned by this server.
#ifndef KESTREL_SERVER_TABLE_H_
#define KESTREL_SERVER_TABLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/partition.h"
#include "common/thread_pool.h"
#include "proto/table.pb.h"
#include "server/admission_sketch.h"
#include "server/bounded_policy.h"
#include "server/cut_memory.h"
#include "server/initializer.h"
#include "server/key_stripes.h"
#include "common/optimizer.h"
#include "server/row_arena.h"
#include "server/row_values.h"

namespace kestrel {

// Owns its rows, optimizer and policy. Thread-safe (see the file comment).
class Table {
 public:
  static constexpr int kStripeBits = KeyStripes::kBits;
  static constexpr int kStripes = KeyStripes::kCount;
  static constexpr int kMaxDim = RowValues::kMaxDim;
  // Largest dense tensor, in floats (2^36, 256 GiB).
  static constexpr uint64_t kMaxDenseSize = uint64_t{1} << 36;
  // The most admit_after can be (the admission sketch's 8-bit counters).
  static constexpr uint32_t kMaxAdmitAfter = AdmissionSketch::kMaxCount;
  // Floats of a bounded row's meta (last-push clock and push count, uint32 each).
  static constexpr int kMetaFloats = BoundedPolicy::kMetaFloats;

  // InvalidArgument unless the name (1-64 characters of [A-Za-z0-9_.-]), dim ([1, kMaxDim]) and kind /
  // dense_size ([1, kMaxDenseSize] for dense tables, 0 for sparse ones) are valid, and a capacity policy is on a
  // sparse table with admit_after <= kMaxAdmitAfter, ttl_clocks >= 0 and sketch_bytes <= 1 GiB: what every
  // table, and every table read from a file (manifests, exports), must satisfy before it is used or allocated.
  [[nodiscard]] static absl::Status CheckShape(const TableConfig& config);
  // Validates the config (name, dim, initializer, optimizer) and builds an empty table for keys in `span`
  // (the owning shard's first to last key; keys outside it work, all in the first or last stripe).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Table>> Create(const TableConfig& config,
                                                       KeyRange span = {0, ~uint64_t{0}});

  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

  const TableConfig& config() const { return config_; }
  int dim() const { return dim_; }
  // Floats of optimizer state per row.
  int slot_floats() const { return optimizer_->slot_floats(); }
  // How the values are stored: words() 32-bit words of a stored row hold its dim values.
  const RowValues& values() const { return values_; }
  // Whether the config has a capacity policy (rows carry meta).
  bool bounded() const { return policy_.bounded(); }
  // Dense tables: the number of blocks (Partition::DenseBlockCount); 0 for sparse ones.
  uint64_t num_blocks() const {
    return config_.kind() == TableConfig::DENSE ? Partition::DenseBlockCount(config_.dense_size(), dim_) : 0;
  }

  // Writes keys.size() rows of dim() floats to `out`, in key order, as of `clock` (bounded tables: rows
  // expired at `clock` read as absent). Fails only when the disk tier does (`out` is then partly written).
  [[nodiscard]] absl::Status Pull(absl::Span<const uint64_t> keys, float* out, int64_t clock = 0) const;
  // Applies one gradient row per key (keys.size() * dim() floats) at `clock`, creating absent rows first
  // (bounded tables: once admitted). Keys must be unique. Fails only when the disk tier does: the table may
  // then hold part of the push, and the caller must restore it (Shard refuses requests until then).
  [[nodiscard]] absl::Status Push(absl::Span<const uint64_t> keys, const float* grads, int64_t clock = 0);

  // Bounded tables: the memory budget, in bytes of memory_bytes() (0: unbounded, the default), and where
  // rows go when they leave memory (null: dropped; the default). Shrinking the budget takes effect as pushes
  // need room.
  void SetMemoryBudget(uint64_t bytes) { policy_.SetMemoryBudget(bytes); }
  void SetColdTier(ColdTier* tier) { policy_.SetColdTier(tier); }

  // Rows in memory and on disk.
  uint64_t num_rows() const;
  // Bytes held in memory: arena chunks, hash index, row flags, tombstones and admission sketch.
  uint64_t memory_bytes() const;
  // Bytes of the rows themselves: rows in memory * (8 + 4 * (value words + slot_floats + meta)).
  uint64_t raw_bytes() const;
  TableTierStats tier_stats() const;

  // Checkpoint support. Every row written since the last ClearDirty() (by Push or LoadRow) is dirty.
  // Calls fn(key, row) for each dirty row in key order, where row holds stored_floats() floats (values,
  // optimizer state, meta), stripe by stripe under the stripe's shared lock; stops at the first error fn
  // returns.
  [[nodiscard]] absl::Status ForEachDirtyRow(const std::function<absl::Status(uint64_t, absl::Span<const float>)>& fn) const;
  // The same for every row in memory, dirty or not (copying a table to another server: re-replication).
  [[nodiscard]] absl::Status ForEachStoredRow(const std::function<absl::Status(uint64_t, absl::Span<const float>)>& fn) const;
  // Calls fn(key) for each key whose row the store holds (it was in memory at a ClearDirty(), or was moved to
  // disk) but that has since left the table: the checkpoint deletes them.
  [[nodiscard]] absl::Status ForEachTombstone(const std::function<absl::Status(uint64_t)>& fn) const;
  uint64_t num_dirty() const;
  // After a checkpoint wrote every dirty row and tombstone: nothing is dirty, every row is in the store.
  void ClearDirty();
  // Marks every stored row dirty and not in the store (after a restore, the next checkpoint writes everything).
  void MarkAllDirty();
  // Stores `row` (stored_floats() floats) as the row of `key`, replacing any previous one, and marks it
  // dirty (making room as a push would). InvalidArgument for a row of the wrong width.
  [[nodiscard]] absl::Status LoadRow(uint64_t key, absl::Span<const float> row);
  // Drops every row, tombstone and admission count (a restore starts from an empty table and store).
  void Clear();
  // Floats (32-bit words) of a stored row: values().words() + slot_floats() + kMetaFloats if bounded.
  int stored_floats() const { return row_floats_ - RowArena::kKeyFloats; }
  // Stored floats for a table of this config (without building it).
  [[nodiscard]] static absl::StatusOr<int> StoredFloats(const TableConfig& config);
  // Whether a stored row of a bounded table (stored_floats floats) is expired at `clock`. Unbounded tables: no.
  static bool Expired(const TableConfig& config, absl::Span<const float> stored_row, int64_t clock) {
    return BoundedPolicy::StoredRowExpired(config, stored_row, clock);
  }

  // Copy-on-write cuts (see the file comment). BeginCut runs with no request in flight (Shard::Exclusive) and answers
  // the admission sketch's state if it changed since the last checkpoint (it is the cut's: clean from now on).
  std::optional<AdmissionSketchState> BeginCut();
  // Whether any stripe's cut is still to be written.
  bool cut_pending() const;
  // Writes stripe `stripe` of the pending cut (nothing if it has none): copies it out under the stripe's lock and
  // ends the stripe's cut (its rows are clean and stored, its copies freed), then, with no lock held, calls
  // tombstone(key) for each of its tombstones and row(key, stored row) for each of its rows, in key order. The
  // first error a callback returns is answered: the caller must then treat the store as unknown (a new store,
  // every row dirty).
  [[nodiscard]] absl::Status WriteCutStripe(int stripe, const std::function<absl::Status(uint64_t)>& tombstone,
                              const std::function<absl::Status(uint64_t, absl::Span<const float>)>& row);
  // Where retained copies are counted and pushes wait for room (null: neither; the default). Set before use.
  void set_cut_memory(CutMemory* memory) { cut_memory_ = memory; }
  // Where a large pull or push of an unbounded table spreads its stripes (ShardOptions::stripe_pool): contiguous
  // groups of stripes of about equal keys run on the pool's threads and the caller's, each row handled exactly as
  // on one thread (rows are independent), so the table ends bitwise the same. Null: the caller's thread alone
  // (the default). Not owned. Set before use.
  void set_stripe_pool(ThreadPool* pool) { stripe_pool_ = pool; }
  // Requests with fewer keys than this stay on the caller's thread.
  static constexpr size_t kSpreadKeys = 4096;

  // Admission sketch (bounded tables with admit_after > 1; otherwise empty): whether it changed since the
  // last ClearDirty(), its state, and loading a state written by a table of the same config and span
  // (InvalidArgument otherwise, leaving the sketch unchanged).
  bool sketch_dirty() const;
  std::optional<AdmissionSketchState> SketchState() const;
  [[nodiscard]] absl::Status LoadSketchState(const AdmissionSketchState& state);

  // Order-independent fingerprint of every stored row (key, values, optimizer state, meta) in memory.
  uint64_t Fingerprint() const;
  // The rows' part of it: a sum over rows, so the sums of a table's shards on several servers add up to the
  // whole table's, whatever the partition.
  uint64_t RowsFingerprint() const;
  // Calls fn(key, values, slots) for every row in memory, stripe by stripe, under the stripe's shared lock.
  // `values` is the stored form (values().words() words; values().Decode reads it).
  void ForEachRow(const std::function<void(uint64_t, const float*, const float*)>& fn) const;

 private:
  // One lock stripe: its rows and the bounded policy's state for them.
  struct alignas(64) Stripe {
    mutable absl::Mutex mu;
    RowArena rows ABSL_GUARDED_BY(mu);
    BoundedStripe bounded ABSL_GUARDED_BY(mu);
  };

  Table(const TableConfig& config, KeyRange span, Initializer init, std::unique_ptr<Optimizer> optimizer);

  // Pull and Push, with the policy's hooks (UnboundedPull/BoundedPull, UnboundedPush/BoundedPush).
  template <typename Hooks>
  [[nodiscard]] absl::Status PullWith(absl::Span<const uint64_t> keys, const StripedKeys& request, float* out,
                        int64_t clock) const;
  template <typename Hooks>
  [[nodiscard]] absl::Status PushWith(absl::Span<const uint64_t> keys, const StripedKeys& request, const float* grads,
                        int64_t clock);
  // Calls work(si) for each stripe si that `request` has keys in, in order on the caller's thread, or spread over
  // stripe_pool_ (set_stripe_pool) when the table is unbounded and the request has at least kSpreadKeys keys. work
  // must touch stripe si alone. The first error, in stripe order, is answered; a group stops at its first.
  template <typename Work>
  [[nodiscard]] absl::Status ForEachRequestStripe(const StripedKeys& request, size_t keys, Work work) const;
  // Calls visit(i) for each request position i of the stripe `s` (`request`) in order, prefetching ahead (see
  // table.cc), until visit returns false.
  template <typename Visit>
  void VisitStripeLocked(const Stripe& s, StripeKeys request, const float* request_rows, bool pushing,
                         Visit visit) const ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // Writes a fresh row's initial values and optimizer state (a bounded row's meta is the policy's).
  void InitRow(float* row, uint64_t key) const;
  // Writes the values an absent key reads (dim floats): its initial values, rounded as the storage holds them.
  void InitialValues(uint64_t key, float* out) const {
    init_.Fill(key, out, dim_);
    values_.Round(out);
  }
  // A push of a key not admitted yet that the policy applies on the disk tier (NewRow::to_disk): the row from
  // disk (or a fresh one) updated by `g` and handed back to the hooks to write.
  template <typename Hooks>
  void StageOnDisk(uint64_t key, const float* g, const NewRow& fresh, Hooks& hooks, int64_t clock) const;
  // Applies the gradient `g` to a row's stored values and slots at `clock` (compact values: in fp32, rounded once).
  void ApplyGradient(uint64_t key, const float* g, float* row, int64_t clock) const;
  // Releases the stripe's retained copies from the CutMemory (they are about to be freed).
  void ReleaseRetainedLocked(Stripe& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // ForEachDirtyRow (dirty_only) and ForEachStoredRow.
  [[nodiscard]] absl::Status VisitRows(bool dirty_only,
                         const std::function<absl::Status(uint64_t, absl::Span<const float>)>& fn) const;

  // Prefetch distances (in keys) for the lookup loops.
  static constexpr uint32_t kSlotAhead = 16;
  static constexpr uint32_t kRowAhead = 8;

  const TableConfig config_;
  const KeyStripes key_stripes_;
  const int dim_;
  const RowValues values_;
  const int row_floats_;  // key, value words, slots, meta if bounded
  const Initializer init_;
  const std::unique_ptr<Optimizer> optimizer_;
  BoundedPolicy policy_;
  std::unique_ptr<Stripe[]> stripes_;
  CutMemory* cut_memory_ = nullptr;
  ThreadPool* stripe_pool_ = nullptr;
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_TABLE_H_
