// Checkpoint rows: how one server's rows and admission sketches are keyed in RocksDB (its working store and the
// checkpoints snapshotted from it, server/shard_store.h), and the RocksDB plumbing every reader and writer of
// them shares. This is the on-disk format: a change breaks every checkpoint written before it.
//
// Row key: table name, a zero byte, the key as 8 bytes big-endian (so a table's rows are contiguous and in key
// order); its value: the stored row (CheckpointRowCodec's record, server/checkpoint_row_codec.h). Keys starting
// below kTablesStart are metadata, never rows (table names start with [A-Za-z0-9_.-]): SketchPrefix() + table
// name holds that bounded table's admission sketch (AdmissionSketchState, proto/table.proto).
#ifndef KESTREL_SERVER_CHECKPOINT_ROWS_H_
#define KESTREL_SERVER_CHECKPOINT_ROWS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/status.h"

namespace kestrel {

// The first byte of metadata keys, and the first key a row can have.
inline constexpr char kMetaPrefix = '\x01';
inline constexpr absl::string_view kTablesStart = "\x02";

// The prefix of admission sketch keys: kMetaPrefix, "sketch", a zero byte.
const std::string& SketchPrefix();

// Replaces `out` with the stored key of `key` of `table`.
void AppendRowKey(absl::string_view table, uint64_t key, std::string* out);
// Splits a stored key into (table, key); false when it is not one. `table` points into `stored`.
bool ParseRowKey(const rocksdb::Slice& stored, absl::string_view* table, uint64_t* key);

// RocksDB's status as absl's, prefixed with `what`: DataLoss for corruption and missing files, Unavailable for
// anything else (I/O), OK for OK.
[[nodiscard]] absl::Status FromRocks(const rocksdb::Status& status, absl::string_view what);

// Writes into the working store: without a WAL (the working store never survives a crash; checkpoints do).
rocksdb::WriteOptions StoreWriteOptions();

// Opens a checkpoint's shard directory read-only, with paranoid checks and no LOG file written into it;
// `where` names it in errors.
[[nodiscard]] absl::StatusOr<std::unique_ptr<rocksdb::DB>> OpenSnapshot(const std::string& dir, const std::string& where);
// Reads of a snapshot: checksums verified, the block cache left alone.
rocksdb::ReadOptions SnapshotReadOptions();

}  // namespace kestrel

#endif  // KESTREL_SERVER_CHECKPOINT_ROWS_H_
