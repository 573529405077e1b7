// CheckpointCut: one checkpoint's cut of a shard — the changes of its tables since the previous checkpoint
// (tombstones, rows, admission sketches) — and their writing into the server's working store (server/shard_store.h)
// in write batches: inside the cut while requests wait (WriteInside), or stripe by stripe from the tables'
// copy-on-write cut while training goes on (BeginCopyOnWrite, then WriteStripes).
//
// Rows are keyed as server/checkpoint_rows.h says and encoded by their table's CheckpointRowCodec; a table's
// tombstones (rows that left it since the previous checkpoint) are written before its rows, so a key that left and
// came back is a row again on restore. The cut's answer (ShardCheckpoint) collects the tables, the rows held and
// the rows, bytes and tombstones written; ShardStore snapshots the store after the write and adds the files.
#ifndef KESTREL_SERVER_CHECKPOINT_CUT_H_
#define KESTREL_SERVER_CHECKPOINT_CUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/checkpoint.pb.h"
#include "proto/table.pb.h"
#include "server/shard.h"
#include "server/table.h"

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace kestrel {

// Owned by the ShardStore that cuts it, from BeginCheckpoint to FinishCheckpoint; does not own the shard, its
// tables or the store, which must outlive it. Thread-compatible: one thread at a time (Take, BeginCopyOnWrite and
// WriteInside inside the shard's exclusive section, WriteStripes after it).
class CheckpointCut {
 public:
  // The cut `name` of `shard`, written as the part of the rank the shard is (Shard::owner(): after a rescale
  // renumbered the server it is not its id's), whose files go into `dir`. Its clock starts now.
  CheckpointCut(std::string name, std::string dir, Shard& shard);

  CheckpointCut(const CheckpointCut&) = delete;
  CheckpointCut& operator=(const CheckpointCut&) = delete;

  // In the shard's exclusive section: the cut is of `tables` (the answer lists their configs and rows held).
  void Take(const std::vector<Table*>& tables);
  // In the same section, instead of WriteInside: marks every table's copy-on-write cut (Table::BeginCut),
  // keeping the admission sketches that changed, for WriteStripes.
  void BeginCopyOnWrite();
  // In the same section: writes every change into `db` now, then clears the tables' dirty marks (the store holds
  // every change: the next checkpoint starts from here).
  [[nodiscard]] absl::Status WriteInside(rocksdb::DB* db);
  // After BeginCopyOnWrite, with requests served: writes every stripe of the cut into `db` on a thread of its own
  // at a lower CPU priority than the request handlers (a checkpoint takes the CPU training leaves). After an
  // error, ends the remaining stripes' cuts (freeing their copies) without writing them. `fail_after_rows` >= 0
  // (tests): fails (Unavailable) after writing that many rows, as a full disk would.
  [[nodiscard]] absl::Status WriteStripes(rocksdb::DB* db, int64_t fail_after_rows);

  const std::string& name() const { return name_; }
  const std::string& dir() const { return dir_; }
  int rank() const { return rank_; }
  Shard& shard() const { return *shard_; }
  // Whether BeginCopyOnWrite marked it (its rows are written by WriteStripes).
  bool copy_on_write() const { return copy_on_write_; }
  ShardCheckpoint& answer() { return answer_; }
  absl::Time start() const { return start_; }
  // When its rows were all in the store (after WriteInside or WriteStripes succeeded).
  absl::Time written_at() const { return written_at_; }

 private:
  // Writes every stripe of the cut (WriteStripes, on the calling thread).
  [[nodiscard]] absl::Status WriteStripesNow(rocksdb::DB* db, int64_t fail_after_rows);

  const std::string name_;
  const std::string dir_;  // the shard's directory of the checkpoint
  Shard* const shard_;
  const int rank_;
  const absl::Time start_;
  ShardCheckpoint answer_;  // shard, dir, tables, rows so far
  std::vector<Table*> tables_;
  std::vector<std::optional<AdmissionSketchState>> sketches_;  // by table: the cut's, when it changed
  bool copy_on_write_ = false;
  absl::Time written_at_;
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_CHECKPOINT_CUT_H_
