// BoundedPolicy: how a bounded sparse table (a CapacityPolicy in its config; docs/bounded_tables.md) keeps within
// its budgets: which absent keys get a row, which rows expire, which rows leave memory and what goes to the cold
// tier and comes back from it. Table's Pull and Push call it through the hooks below.
//
// Each row of a bounded table keeps `meta`: the clock of its last push and its push count (RowMeta, stored as two
// floats' bytes after the optimizer slots, and part of the stored row). Then:
//  - Admission: a key absent from the table gets a row only on its admit_after-th push, counted in the stripe's
//    AdmissionSketch; earlier pushes are dropped. With admit_to_disk they are applied to a row on the cold tier
//    instead (its meta counts the pushes), which the admit_after-th push brings into memory; without a cold tier
//    set, the sketch decides as without it.
//  - Expiry: a row whose last push is more than ttl_clocks before the request's clock is absent for that request
//    (pull: initial value; push: a new row, after admission). Physically, a push of clock c with
//    c % sweep period == 0 removes a stripe's expired rows.
//  - Capacity: each stripe holds at most 1/kStripes of the rows the memory budget allows. A push that needs a
//    new row in a full stripe first moves its coldest rows out (1/16 of them: oldest last push, then fewest
//    pushes, then smallest key; never a row of the push being applied): to the ColdTier while it has room
//    (pulls then read them there; the next push brings the row back, state included), else dropped.
// Every one of these decisions is a function of the rows, their meta, the sketch and the push sequence (never of
// timing, row ids or pulls), so BSP runs repeat bitwise, and a table restored from a checkpoint (rows, meta and
// sketch) decides exactly as the uninterrupted one. The one exception: with a disk tier that overflows, which
// rows are in memory when it does depends on the restore.
//
// The hooks. Table::Push runs one loop for every table, templated on BoundedPush or UnboundedPush, and Table::Pull
// one on BoundedPull or UnboundedPull; the unbounded hooks are inline no-ops, so an unbounded table's loop is the
// core's alone (no virtual call, allocation or lock added per row).
#ifndef KESTREL_SERVER_BOUNDED_POLICY_H_
#define KESTREL_SERVER_BOUNDED_POLICY_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/table.pb.h"
#include "server/admission_sketch.h"
#include "server/initializer.h"
#include "server/key_stripes.h"
#include "server/row_arena.h"
#include "server/row_values.h"

namespace kestrel {

// Where a bounded table's rows go when they leave memory with a disk budget (ShardStore implements it on the
// server's RocksDB working store). Rows are stored_floats() floats (values, slots, meta). Thread-safe.
class ColdTier {
 public:
  virtual ~ColdTier() = default;
  // Stores the rows of `keys` (keys.size() * floats floats), replacing earlier copies.
  [[nodiscard]] virtual absl::Status Write(absl::string_view table, absl::Span<const uint64_t> keys,
                             absl::Span<const float> rows) = 0;
  // Reads the rows of `keys` into `rows` (keys.size() * floats floats); found[i] says whether key i is held
  // (a key not held leaves its row untouched).
  [[nodiscard]] virtual absl::Status Read(absl::string_view table, absl::Span<const uint64_t> keys, int floats, float* rows,
                            std::vector<uint8_t>* found) = 0;
  // Deletes the rows of `keys` (absent ones are no error).
  [[nodiscard]] virtual absl::Status Delete(absl::string_view table, absl::Span<const uint64_t> keys) = 0;
};

// What a table has done to bound itself, since it was created (counters) and now (gauges).
struct TableTierStats {
  uint64_t admitted = 0;           // rows created for keys absent from memory and disk
  uint64_t not_admitted = 0;       // pushed keys below admit_after: gradients counted and dropped
  uint64_t staged = 0;             // pushed keys below admit_after applied to their row on disk (admit_to_disk)
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

// A bounded row's meta, the last BoundedPolicy::kMetaFloats floats of the row.
struct RowMeta {
  uint32_t clock;  // of the last push
  uint32_t count;  // pushes, saturating
};

// The policy's state in one lock stripe. Not thread-safe: the owner (Table) guards it with the stripe's lock,
// together with the stripe's RowArena.
struct BoundedStripe {
  AdmissionSketch sketch;            // empty without admission
  std::vector<uint64_t> tombstones;  // stored keys that left since the last ClearDirty
  size_t cut_tombstones = 0;         // while a cut is pending: the first ones are the cut's
  int64_t swept_at = -1;             // clock of the last expiry sweep
  uint32_t disk_rows = 0;            // rows of this stripe on the cold tier
  TableTierStats stats;              // counters (pull hits are kept by BoundedPolicy)

  // Bytes held: tombstones and sketch.
  uint64_t memory_bytes() const { return tombstones.capacity() * sizeof(uint64_t) + sketch.memory_bytes(); }
  // After a checkpoint: no tombstone, the sketch clean.
  void ClearDirty() {
    std::vector<uint64_t>().swap(tombstones);
    cut_tombstones = 0;
    sketch.ClearDirty();
  }
  // Nothing held (the stats stay).
  void Clear() {
    std::vector<uint64_t>().swap(tombstones);
    cut_tombstones = 0;
    sketch.Reset();
    swept_at = -1;
    disk_rows = 0;
  }
};

// A table's policy parameters, budget and cold tier; inert (every hook off) for a table without a capacity
// policy. Thread-safe; the methods taking a stripe's RowArena and BoundedStripe (named ...Locked) need the lock
// that guards them, held exclusively.
class BoundedPolicy {
 public:
  // Floats of a bounded row's meta (RowMeta).
  static constexpr int kMetaFloats = 2;

  // The policy of `config` for its rows of `row_floats` floats (key and, if bounded, meta included).
  BoundedPolicy(const TableConfig& config, int row_floats);

  BoundedPolicy(const BoundedPolicy&) = delete;
  BoundedPolicy& operator=(const BoundedPolicy&) = delete;

  // Whether the config has a capacity policy (rows carry meta).
  bool bounded() const { return bounded_; }
  // Counters per admission sketch row per stripe (0: no admission counting).
  uint32_t sketch_width() const { return sketch_width_; }

  // Whether a stored row of a bounded table of `config` (stored_row: values, slots, meta) is expired at `clock`.
  // Unbounded tables: no.
  static bool StoredRowExpired(const TableConfig& config, absl::Span<const float> stored_row, int64_t clock);

  // The memory budget, in bytes of Table::memory_bytes() (0: unbounded), as a row cap per stripe of bounded
  // tables.
  void SetMemoryBudget(uint64_t bytes);
  uint64_t memory_budget() const { return memory_budget_.load(std::memory_order_relaxed); }
  // Where rows go when they leave memory (null: dropped). Unbounded tables keep none.
  void SetColdTier(ColdTier* tier) { cold_.store(bounded_ ? tier : nullptr, std::memory_order_release); }
  // Adds the pull counters to `stats`.
  void AddPullStats(TableTierStats* stats) const;

  // Before a row is inserted into `rows`: when the stripe is full, moves its coldest unpinned rows out.
  [[nodiscard]] absl::Status MakeRoomLocked(RowArena& rows, BoundedStripe& stripe, int64_t clock) const;

 private:
  friend class BoundedPush;
  friend class BoundedPull;

  RowMeta GetMeta(const float* row) const {
    RowMeta m;
    std::memcpy(&m, row + meta_offset_, sizeof(m));
    return m;
  }
  // The meta of a stored row (no key; stored_floats_ floats).
  RowMeta GetStoredMeta(const float* stored) const { return GetMeta(stored - RowArena::kKeyFloats); }
  void SetMeta(float* row, RowMeta m) const { std::memcpy(row + meta_offset_, &m, sizeof(m)); }
  // Whether a row in memory is expired at `clock`.
  bool ExpiredAt(const float* row, int64_t clock) const {
    return ttl_ > 0 && clock - static_cast<int64_t>(GetMeta(row).clock) > ttl_;
  }
  // The same for a stored row (stored_floats_ floats) read from the cold tier.
  bool StoredExpiredAt(const float* stored, int64_t clock) const;
  // Counts one push of an absent key; returns whether it is admitted now.
  bool AdmitLocked(BoundedStripe& stripe, uint64_t hash) const {
    return admit_after_ <= 1 || stripe.sketch.Count(hash) >= admit_after_;
  }
  // Where eviction from a full stripe stops: 1/16 of the cap below it.
  static uint32_t LowMark(uint32_t max_rows) { return max_rows - std::max<uint32_t>(1, max_rows / 16); }
  // Moves the coldest unpinned rows out until the stripe holds at most `target` rows.
  [[nodiscard]] absl::Status EvictLocked(RowArena& rows, BoundedStripe& stripe, uint32_t target, int64_t clock) const;
  // Removes the rows expired at `clock`.
  [[nodiscard]] absl::Status SweepLocked(RowArena& rows, BoundedStripe& stripe, int64_t clock) const;
  // Removes the rows `ids` (sorted in decreasing order). Rows the store holds get a tombstone, or with a cold tier
  // are deleted from it now (pulls read it). Nothing changes if that deletion fails.
  [[nodiscard]] absl::Status RemoveLocked(RowArena& rows, BoundedStripe& stripe, absl::Span<const uint32_t> ids) const;
  // Reads the stored rows of the request positions `missing` from the cold tier (ColdTier::Read's contract).
  [[nodiscard]] absl::Status ReadCold(absl::Span<const uint64_t> keys, const std::vector<uint32_t>& missing,
                        std::vector<float>* rows, std::vector<uint8_t>* found) const;

  const std::string name_;
  const bool bounded_;
  const int row_floats_;     // key, values, slots, meta
  const int stored_floats_;  // values, slots, meta
  const int meta_offset_;    // floats from a row's start to its meta
  // 0 = off.
  const uint32_t admit_after_;
  const bool admit_to_disk_;  // pushes before admission go to a row on the cold tier
  const int64_t ttl_;
  const int64_t sweep_period_;
  const uint32_t sketch_width_;
  const uint64_t max_disk_rows_per_stripe_;
  std::atomic<uint32_t> max_rows_per_stripe_{0};  // 0: unbounded
  std::atomic<uint64_t> memory_budget_{0};
  std::atomic<ColdTier*> cold_{nullptr};
  mutable std::atomic<uint64_t> pull_memory_hits_{0}, pull_disk_hits_{0}, pull_misses_{0};
};

// What Push does with a pushed key absent from memory.
struct NewRow {
  bool admitted = true;          // false: no row in memory; the gradient is dropped, or applied on disk (to_disk)
  bool to_disk = false;          // not admitted: apply the push to `stored` (null: a fresh row) and Stage it
  bool on_disk = false;          // the cold tier holds a copy of the key's row (the new row is kStored)
  const float* stored = nullptr;  // that copy's stored floats to bring back, or null: a fresh row
};

// Push's hooks for a bounded table: one request, stripe by stripe. For each stripe the caller, holding the
// stripe's lock exclusively, calls BeginStripe, then per key of the stripe (in request order) Expired/Readmit for a
// row in memory, or Absent, MakeRoom and Inserted/InsertFailed for an absent key, then Pushed, and EndStripe.
// Not thread-safe (one request's).
class BoundedPush {
 public:
  BoundedPush(const BoundedPolicy& policy, int64_t clock);

  // Sweeps expired rows when due, pins the request's rows of the stripe (`request`) in memory and reads those
  // absent from memory from the cold tier.
  [[nodiscard]] absl::Status BeginStripe(RowArena& rows, BoundedStripe& stripe, absl::Span<const uint64_t> keys,
                           StripeKeys request);
  // Whether a row in memory is expired (absent for this push).
  bool Expired(const float* row) const { return policy_.ExpiredAt(row, clock_); }
  // An expired row in memory pushed again: whether it is admitted (the caller reinitializes it) or dropped.
  bool Readmit(uint64_t hash);
  // The key at request position `i` is absent from memory.
  NewRow Absent(uint32_t i, uint64_t hash, uint64_t key);
  // Before inserting a row: false if making room failed (EndStripe returns the error).
  bool MakeRoom() {
    error_ = policy_.MakeRoomLocked(*rows_, *stripe_, clock_);
    return error_.ok();
  }
  // A fresh row's meta.
  void Fresh(float* row) const { policy_.SetMeta(row, RowMeta{clock32_, 0}); }
  // A row not admitted yet, pushed on disk (NewRow::to_disk): written to the cold tier in EndStripe.
  void Stage(uint64_t key, const float* stored);
  void Inserted(uint32_t id, const NewRow& row);
  void InsertFailed(const NewRow& row) {
    if (row.stored != nullptr) ++stripe_->disk_rows;
  }
  // After the gradient was applied to `row`.
  void Pushed(float* row) const {
    const RowMeta m = policy_.GetMeta(row);
    policy_.SetMeta(row, RowMeta{clock32_, m.count == UINT32_MAX ? m.count : m.count + 1});
  }
  // Unpins the stripe's rows, then returns the error of MakeRoom if any; else deletes the expired disk rows not
  // admitted again and evicts rows until the stripe is back under its cap.
  [[nodiscard]] absl::Status EndStripe();

 private:
  struct Buffers {
    std::vector<uint32_t> missing;  // request positions absent from memory, looked up on disk
    std::vector<float> cold_rows;   // their stored rows
    std::vector<uint8_t> found;     // whether the disk held them
    std::vector<uint64_t> forget;   // expired rows found on disk and not admitted again
    std::vector<uint64_t> staged_keys;  // rows not admitted yet, pushed on disk (admit_to_disk)
    std::vector<float> staged_rows;     // their stored rows
  };
  static Buffers& ThreadBuffers();
  void Unpin();

  const BoundedPolicy& policy_;
  const int64_t clock_;
  const uint32_t clock32_;
  const bool has_cold_;
  Buffers& buffers_;
  // The stripe being pushed.
  RowArena* rows_ = nullptr;
  BoundedStripe* stripe_ = nullptr;
  absl::Span<const uint64_t> keys_;
  StripeKeys request_ = {};
  size_t next_missing_ = 0;
  absl::Status error_;
};

// Pull's hooks for a bounded table: expired rows read as absent; rows on disk are read there (in place: pulls
// never move rows, so what memory holds depends only on pushes), in one batch per request after the stripe locks
// are released. A push applied meanwhile could make such a row stale; under BSP none is (a clock's pushes are
// applied after every pull of that clock), under SSP/ASP the pull then sees the row as before that push.
// For each stripe the caller, holding the stripe's lock, calls BeginStripe, then per key Live and Hit for a row
// in memory, else Defer, else Miss; then Finish once the locks are released. Not thread-safe (one request's).
class BoundedPull {
 public:
  BoundedPull(const BoundedPolicy& policy, int64_t clock);

  void BeginStripe(const BoundedStripe& stripe) { disk_ = has_cold_ && stripe.disk_rows > 0; }
  // Whether a row in memory is live (else it reads as absent).
  bool Live(const float* row) const { return !policy_.ExpiredAt(row, clock_); }
  void Hit() { ++memory_hits_; }
  // The key at request position `i` is absent from memory: whether it is read from disk in Finish.
  bool Defer(uint32_t i) {
    if (!disk_) return false;
    missing_.push_back(i);
    return true;
  }
  void Miss() { ++misses_; }
  // Reads the deferred rows from disk into `out` (dim floats per request position, decoded by `values`; initial
  // values, rounded as stored, for rows absent or expired there) and counts the request's hits and misses.
  [[nodiscard]] absl::Status Finish(absl::Span<const uint64_t> keys, float* out, const RowValues& values, const Initializer& init);

 private:
  const BoundedPolicy& policy_;
  const int64_t clock_;
  const bool has_cold_;
  bool disk_ = false;
  std::vector<uint32_t>& missing_;
  uint64_t memory_hits_ = 0, disk_hits_ = 0, misses_ = 0;
};

// Push's hooks for an unbounded table: every row in memory is live, every absent key gets a fresh row, rows
// carry no meta. Each compiles to nothing.
class UnboundedPush {
 public:
  UnboundedPush(const BoundedPolicy&, int64_t) {}
  [[nodiscard]] absl::Status BeginStripe(RowArena&, BoundedStripe&, absl::Span<const uint64_t>, StripeKeys) {
    return absl::OkStatus();
  }
  bool Expired(const float*) const { return false; }
  bool Readmit(uint64_t) { return true; }
  NewRow Absent(uint32_t, uint64_t, uint64_t) { return NewRow(); }
  bool MakeRoom() { return true; }
  void Fresh(float*) const {}
  void Stage(uint64_t, const float*) {}
  void Inserted(uint32_t, const NewRow&) {}
  void InsertFailed(const NewRow&) {}
  void Pushed(float*) const {}
  [[nodiscard]] absl::Status EndStripe() { return absl::OkStatus(); }
};

// Pull's hooks for an unbounded table: every row in memory is live, an absent key reads its initial value.
class UnboundedPull {
 public:
  UnboundedPull(const BoundedPolicy&, int64_t) {}
  void BeginStripe(const BoundedStripe&) {}
  bool Live(const float*) const { return true; }
  void Hit() {}
  bool Defer(uint32_t) { return false; }
  void Miss() {}
  [[nodiscard]] absl::Status Finish(absl::Span<const uint64_t>, float*, const RowValues&, const Initializer&) {
    return absl::OkStatus();
  }
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_BOUNDED_POLICY_H_
