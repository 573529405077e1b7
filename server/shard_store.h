// ShardStore: one server's checkpoints in RocksDB (Debian's librocksdb 7.8).
//
// The server keeps a working RocksDB (CheckpointLayout::LiveDir) that mirrors its tables as of its last
// checkpoint. Checkpoint() writes only the rows changed since then (Table's dirty rows: values and optimizer
// state together, taken in one Shard::Exclusive section, so both are of the same moment), flushes, and cuts a
// RocksDB checkpoint into the checkpoint's shard directory: immutable SST files are hard-linked, so the
// snapshot costs no copy. It answers the files with their sizes and CRC-32C for the manifest (an SST's
// checksum is computed once and remembered: SST files never change).
//
// Copy-on-write. BeginCheckpoint() only marks the cut (Table::BeginCut, inside one Shard::Exclusive section: O(tables
// x stripes)) and requests resume; FinishCheckpoint() then writes the cut stripe by stripe while training goes on
// (rows changed meanwhile are written as they were at the cut, from the copies Table keeps; their memory is bounded
// by the shard's CutMemory, which slows pushes at its bound) and snapshots the store. Until the snapshot is cut, the
// disk tier's writes into the store (rows moving out of memory, deletions) are held back in memory (counted in the
// CutMemory too) and applied after it; its reads are served by its files, which stay current. A write that fails
// part-way leaves the store of no known state: the next checkpoint writes every row (into a new store, unless the
// store holds disk-tier rows).
//
// Restore() loads a committed checkpoint: it reads the shards of the manifest whose key ranges overlap this
// server's (any number of servers may have written it: 4 -> 2 and 2 -> 3 servers both work), verifying every
// file of each against the manifest first, and hands the rows to Shard::Restore, which keeps those this server
// owns. The working store is then recreated empty and every row is dirty, so the next checkpoint writes all.
//
// Row encoding (server/checkpoint_rows.h): key = table name, a zero byte, the key as 8 bytes big-endian (so a
// table's rows are contiguous and in key order); value = dim values then the optimizer's slot floats, little-endian
// float32, then for bounded tables the row's meta (last-push clock and push count, little-endian uint32 each;
// server/bounded_policy.h). Keys starting with byte 0x01 are metadata: "\x01sketch\0<table>" holds a bounded
// table's admission sketch (AdmissionSketchState, proto/table.proto). The working store is written without a WAL:
// after a crash it is discarded (Open() recreates it); the checkpoints are what survives.
//
// Bounded tables. A checkpoint deletes the rows that left a bounded table since the previous one (tombstones),
// and the store doubles as the disk tier (ColdTier, server/disk_tier.h) of tables with a disk budget: rows they move
// out of memory are written here between checkpoints (held back while a cut is written, see above). RocksDB stays
// the record of those rows (checkpoints snapshot it); reads are served by a copy of them in one ColdRowFile per
// table (server/cold_row_file.h), in <working store>/cold/<hex of the table name>.rows, which every Write and Delete
// keeps equal to RocksDB's and Reset discards with the store.
//
// Rooms: the row encoding in RocksDB (server/checkpoint_rows.h), a cut's writing (server/checkpoint_cut.h), the
// disk tier (server/disk_tier.h) and the reader of a checkpoint's rows (server/checkpoint_table_reader.h).
//
// Thread-compatible: one Checkpoint/Restore at a time (the server runs them on one admin thread).
#ifndef KESTREL_SERVER_SHARD_STORE_H_
#define KESTREL_SERVER_SHARD_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/checkpoint_layout.h"
#include "proto/checkpoint.pb.h"
#include "server/bounded_policy.h"
#include "server/checkpoint_cut.h"
#include "server/disk_tier.h"
#include "server/shard.h"

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace kestrel {

// Owns the working store (RocksDB), the disk tier that writes into it and the pending cut; does not own the shards
// it checkpoints and restores. Thread-compatible (see the file comment); its ColdTier calls are thread-safe.
class ShardStore : public ColdTier {
 public:
  // Creates an empty working store for server `shard` under layout's root (deleting a previous one: its
  // contents are of an earlier life of this server). `shard` names the process (its id, the rank its
  // certificate names: scheduler/membership.h), not its rank, which a rescale may renumber: Checkpoint writes
  // the part of the rank the Shard is (Shard::owner()).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ShardStore>> Open(const CheckpointLayout& layout, int shard);
  ~ShardStore() override;

  ShardStore(const ShardStore&) = delete;
  ShardStore& operator=(const ShardStore&) = delete;

  // Writes the rows changed since the last successful Checkpoint and snapshots the store into
  // layout.ShardDir(name, shard.owner()). The answer lists the snapshot's files for the manifest.
  // BeginCheckpoint then FinishCheckpoint.
  [[nodiscard]] absl::StatusOr<ShardCheckpoint> Checkpoint(Shard& shard, absl::string_view name);
  // Cuts checkpoint `name` of `shard` (see the file comment); FailedPrecondition while another cut is pending. The
  // shard must outlive the FinishCheckpoint call.
  [[nodiscard]] absl::Status BeginCheckpoint(Shard& shard, absl::string_view name);
  // Writes the pending cut and snapshots it; FailedPrecondition without one. The cut is no longer pending after it,
  // whatever it answers.
  [[nodiscard]] absl::StatusOr<ShardCheckpoint> FinishCheckpoint();
  // The name of the pending cut, "" when none.
  std::string pending_checkpoint() const;

  // Replaces the shard's state with the checkpoint `manifest` describes (nullopt: with empty tables, the
  // job's beginning), refusing older worker generations from then on (see Shard::Restore). Files are checked
  // against the manifest first; a missing, truncated or corrupt one is DataLoss naming the file and shard.
  [[nodiscard]] absl::Status Restore(const std::optional<CheckpointManifest>& manifest, Shard& shard,
                       uint64_t min_worker_generation);

  // Loads the checkpoint `manifest` describes into `shard` (as Restore does) without any working store: for
  // tools that read a checkpoint (export) while the job may still be writing new ones.
  [[nodiscard]] static absl::Status LoadCheckpoint(const CheckpointLayout& layout, const CheckpointManifest& manifest,
                                     Shard& shard, uint64_t min_worker_generation);

  int owner() const { return shard_; }
  const CheckpointLayout& layout() const { return layout_; }

  // A rescale replaced the server's rows (server/rescale_participant.h): empties the working store, so that the next
  // Checkpoint writes exactly the rows held then (they are all dirty) and nothing of the old layout's.
  // A cut still pending is dropped.
  [[nodiscard]] absl::Status Rebase();

  // ColdTier: bounded tables' rows moved out of memory live in the working store, under the same keys as
  // checkpointed rows (so a checkpoint's snapshot holds them), and in the table's ColdRowFile, which serves the
  // reads (server/disk_tier.h). Set it on the shard (Shard::SetColdTier); thread-safe, but not during Restore (which
  // the shard runs exclusively anyway). A table's rows keep one width until the next Reset: a Write or Read of
  // another width is FailedPrecondition (nothing written), a table name of over kMaxTableName bytes InvalidArgument.
  static constexpr size_t kMaxTableName = DiskTier::kMaxTableName;
  [[nodiscard]] absl::Status Write(absl::string_view table, absl::Span<const uint64_t> keys, absl::Span<const float> rows) override {
    return disk_tier_.Write(table, keys, rows);
  }
  [[nodiscard]] absl::Status Read(absl::string_view table, absl::Span<const uint64_t> keys, int floats, float* rows,
                    std::vector<uint8_t>* found) override {
    return disk_tier_.Read(table, keys, floats, rows, found);
  }
  [[nodiscard]] absl::Status Delete(absl::string_view table, absl::Span<const uint64_t> keys) override {
    return disk_tier_.Delete(table, keys);
  }

  // The disk tier's files, summed over tables: rows, bytes of memory their indexes hold (outside the tables'
  // budgets), bytes on disk.
  using ColdFileStats = DiskTier::FileStats;
  ColdFileStats cold_file_stats() const { return disk_tier_.file_stats(); }

  // For benchmarks. Writes every checkpoint inside its cut (requests stopped for the write, as with a disk tier)
  // instead of copy-on-write. Default: false.
  void TEST_WriteInsideTheCut(bool on) { write_inside_cut_ = on; }
  // For tests. The next copy-on-write write fails (Unavailable) after `rows` rows, as a full disk would; and, while
  // `on`, the disk tier's writes held back during a cut fail to apply. Default: neither.
  void TEST_FailCutWriteAfter(int64_t rows) { fail_cut_write_after_ = rows; }
  void TEST_FailHeldBackWrites(bool on) { disk_tier_.TEST_FailHeldBackWrites(on); }
  // For benchmarks. Serves ColdTier reads from RocksDB (MultiGet) instead of the files (the path before them).
  // Default: false.
  void TEST_ReadColdFromRocksDB(bool on) { disk_tier_.TEST_ReadFromStore(on); }
  // Drops the disk tier files' pages from the page cache (ColdRowFile::TEST_DropCachedPages) and answers how
  // many of their pages are still resident.
  [[nodiscard]] absl::StatusOr<uint64_t> TEST_DropColdCachedPages() { return disk_tier_.TEST_DropCachedPages(); }

 private:
  ShardStore(const CheckpointLayout& layout, int shard);
  // Flushes the working store and cuts a RocksDB checkpoint of it into `dir`.
  [[nodiscard]] absl::Status Snapshot(int rank, const std::string& dir);
  // A copy-on-write write failed part-way (rebase_): the store is of no known state. Every row of `tables` is
  // written afresh by the next cut (see BeginCheckpoint). In the shard's exclusive section.
  [[nodiscard]] absl::Status StartAfresh(const std::vector<Table*>& tables, bool disk_tier);
  // Lists the snapshot's files in `dir` with their sizes and checksums into `answer` (an SST's checksum is
  // computed once: SSTs are immutable).
  [[nodiscard]] absl::Status ListSnapshotFiles(const std::string& dir, ShardCheckpoint* answer);
  // Deletes every row of `table` from the store (not its admission sketch).
  [[nodiscard]] absl::Status DeleteTableRows(absl::string_view table);
  // Verifies the checkpoint's files, then restores the shard from them, running before_rows() first inside
  // the shard's exclusive section.
  [[nodiscard]] static absl::Status Load(const CheckpointLayout& layout, const CheckpointManifest& manifest, Shard& shard,
                           uint64_t min_worker_generation, absl::FunctionRef<absl::Status()> before_rows);
  // (Re)creates the empty working store (and drops the disk tier's files and held-back writes).
  [[nodiscard]] absl::Status Reset();

  const CheckpointLayout layout_;
  const int shard_;
  std::unique_ptr<rocksdb::DB> db_;
  DiskTier disk_tier_;  // writes into db_
  std::map<std::string, CheckpointFile> sst_checksums_;  // by SST file name (of the current working store)
  std::unique_ptr<CheckpointCut> pending_;  // the cut BeginCheckpoint made, until FinishCheckpoint
  bool rebase_ = false;                  // a cut's write failed: the next cut starts the store afresh
  bool write_inside_cut_ = false;        // TEST_WriteInsideTheCut
  int64_t fail_cut_write_after_ = -1;    // TEST_FailCutWriteAfter (-1: never)
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_SHARD_STORE_H_
