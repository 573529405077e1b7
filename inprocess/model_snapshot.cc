#include "inprocess/model_snapshot.h"

#include "absl/strings/str_format.h"
#include "common/status.h"
#include "server/table.h"

namespace kestrel {

absl::Status ModelSnapshot::Take(const std::vector<Shard*>& shards) {
  std::vector<ShardRows> taken(shards.size());
  for (size_t s = 0; s < shards.size(); ++s) {
    taken[s].configs = shards[s]->DescribeTables();
    KESTREL_RETURN_IF_ERROR(shards[s]->Exclusive([&](const std::vector<Table*>& tables) -> absl::Status {
      for (const Table* table : tables) {
        TableRows rows;
        rows.name = table->config().name();
        rows.floats = table->stored_floats();
        KESTREL_RETURN_IF_ERROR(table->ForEachStoredRow([&](uint64_t key, absl::Span<const float> row) {
          rows.keys.push_back(key);
          rows.rows.insert(rows.rows.end(), row.begin(), row.end());
          return absl::OkStatus();
        }));
        taken[s].tables.push_back(std::move(rows));
      }
      return absl::OkStatus();
    }));
  }
  shards_ = std::move(taken);
  return absl::OkStatus();
}

absl::Status ModelSnapshot::Restore(const std::vector<Shard*>& shards) const {
  if (shards_.empty() || shards_.size() != shards.size()) {
    return absl::FailedPreconditionError(absl::StrFormat("a snapshot of %d shards cannot restore %d",
                                                         shards_.size(), shards.size()));
  }
  for (size_t s = 0; s < shards.size(); ++s) {
    const ShardRows& kept = shards_[s];
    KESTREL_RETURN_IF_ERROR(shards[s]->Restore(
        kept.configs, /*min_worker_generation=*/0, [&](Shard::RowSink sink, Shard::SketchSink) -> absl::Status {
          for (const TableRows& table : kept.tables) {
            for (size_t i = 0; i < table.keys.size(); ++i) {
              const absl::Span<const float> row(table.rows.data() + i * table.floats, table.floats);
              KESTREL_ASSIGN_OR_RETURN(const bool took, sink(table.name, table.keys[i], row));
              if (!took) return absl::InternalError("a kept row's key is not its shard's any more");
            }
          }
          return absl::OkStatus();
        }));
  }
  return absl::OkStatus();
}

}  // namespace kestrel
