// CheckpointTableReader: streams the rows of one server's part of a committed checkpoint, table by table in key
// order, straight from its RocksDB snapshot (server/checkpoint_rows.h), and its admission sketches. Restore
// (server/shard_store.h) loads checkpoints through it; tools (kestrel_export) stream them instead of loading.
#ifndef KESTREL_SERVER_CHECKPOINT_TABLE_READER_H_
#define KESTREL_SERVER_CHECKPOINT_TABLE_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/checkpoint_layout.h"
#include "proto/checkpoint.pb.h"
#include "proto/table.pb.h"
#include "server/checkpoint_row_codec.h"

namespace rocksdb {
class DB;
class Iterator;
}  // namespace rocksdb

namespace kestrel {

// Reads the rows of one table from one server's part of a committed checkpoint, in key order, straight from
// its RocksDB (read-only; nothing is loaded into memory beyond the current row). For tools that stream a
// checkpoint (kestrel_export) instead of loading it. Verify the shard first (CheckpointLayout::VerifyShard).
// `table` "" reads every table's rows (table by table). Owns its read-only RocksDB. Thread-compatible.
class CheckpointTableReader {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<CheckpointTableReader>> Open(const CheckpointLayout& layout,
                                                                     const CheckpointManifest& manifest, int shard,
                                                                     absl::string_view table);
  ~CheckpointTableReader();

  CheckpointTableReader(const CheckpointTableReader&) = delete;
  CheckpointTableReader& operator=(const CheckpointTableReader&) = delete;

  // Whether the reader is on a row; key() and row() (values then optimizer slots) describe it.
  bool Valid() const { return valid_; }
  absl::string_view table() const { return table_; }  // valid until Next()
  uint64_t key() const { return key_; }
  absl::Span<const float> row() const { return row_; }
  // Moves to the next row of the table; DataLoss naming the file for a malformed row or a read error.
  [[nodiscard]] absl::Status Next();
  // Calls fn for each admission sketch the shard's checkpoint holds (bounded tables; by table name).
  [[nodiscard]] absl::Status ForEachSketch(
      absl::FunctionRef<absl::Status(absl::string_view table, const AdmissionSketchState& state)> fn);
  // "checkpoint X, server N's part (dir)", for errors.
  const std::string& where() const { return where_; }

 private:
  CheckpointTableReader() = default;
  // Decodes the iterator's current entry, or ends the table.
  [[nodiscard]] absl::Status Load();

  std::string where_;   // "checkpoint X, server N's part (dir)" for errors
  std::string prefix_;  // table name + '\0'; "" for every table
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<rocksdb::Iterator> it_;
  bool valid_ = false;
  absl::string_view table_;
  uint64_t key_ = 0;
  std::vector<float> row_;
  absl::flat_hash_map<std::string, CheckpointRowCodec> codecs_;  // by table name, from the manifest
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_CHECKPOINT_TABLE_READER_H_
