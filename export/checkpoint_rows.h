// CheckpointRows: the live rows of one sparse table of a committed checkpoint, in key order, as an export reads
// them: every server's part (server/checkpoint_table_reader.h) merged by a heap (servers may own
// interleaved ranges), rows expired at the checkpoint's clock skipped (gone for training: not served either).
// Holds one row per server. Thread-compatible.
#ifndef KESTREL_EXPORT_CHECKPOINT_ROWS_H_
#define KESTREL_EXPORT_CHECKPOINT_ROWS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/checkpoint_layout.h"
#include "proto/checkpoint.pb.h"
#include "proto/table.pb.h"
#include "server/checkpoint_table_reader.h"

namespace kestrel {

class CheckpointRows {
 public:
  // Opens every server's part of `manifest` for `config`'s table (verify the shards first).
  [[nodiscard]] absl::Status Open(const CheckpointLayout& layout, const CheckpointManifest& manifest, const TableConfig& config);
  bool Valid() const { return !heads_.empty(); }
  uint64_t key() const { return heads_.top().first; }
  // The stored values (export/export_format.h ValueBytes).
  const float* values() const { return readers_[heads_.top().second]->row().data(); }
  [[nodiscard]] absl::Status Next();

 private:
  // Advances the reader of the smallest key.
  [[nodiscard]] absl::Status Pop();
  // Moves to the smallest key whose row is live.
  [[nodiscard]] absl::Status Settle();

  TableConfig config_;
  int64_t clock_ = 0;
  std::vector<std::unique_ptr<CheckpointTableReader>> readers_;
  using Head = std::pair<uint64_t, size_t>;  // (key, reader)
  std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads_;
  bool started_ = false;
  uint64_t last_ = 0;  // the last key taken off the heap
};

}  // namespace kestrel

#endif  // KESTREL_EXPORT_CHECKPOINT_ROWS_H_
