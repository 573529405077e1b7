// ModelSnapshot: every stored row (values and optimizer state) of in-process shards, copied into memory, and put
// back: the best model of an early-stopped run (TrainerOptions::keep_best / restore_best). A bounded table's
// admission sketch is not kept: after a restore, admission starts afresh.
//
// Thread-compatible; Take and Restore run each shard's part while no request is served on it.
#ifndef KESTREL_INPROCESS_MODEL_SNAPSHOT_H_
#define KESTREL_INPROCESS_MODEL_SNAPSHOT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/table.pb.h"
#include "server/shard.h"

namespace kestrel {

class ModelSnapshot {
 public:
  // Replaces the snapshot with the rows `shards` hold now.
  [[nodiscard]] absl::Status Take(const std::vector<Shard*>& shards);
  // Replaces every shard's state with the snapshot's: rows written or created since are gone. FailedPrecondition
  // without a snapshot, or for other shards than it was taken of.
  [[nodiscard]] absl::Status Restore(const std::vector<Shard*>& shards) const;
  bool empty() const { return shards_.empty(); }

 private:
  struct TableRows {
    std::string name;
    int floats = 0;  // per stored row
    std::vector<uint64_t> keys;
    std::vector<float> rows;  // floats per key, in keys' order
  };
  struct ShardRows {
    std::vector<TableConfig> configs;
    std::vector<TableRows> tables;
  };
  std::vector<ShardRows> shards_;
};

}  // namespace kestrel

#endif  // KESTREL_INPROCESS_MODEL_SNAPSHOT_H_
