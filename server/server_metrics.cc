#include "server/server_metrics.h"

namespace kestrel {

ServerMetrics& ServerMetrics::Get() {
  static ServerMetrics* metrics = new ServerMetrics();
  return *metrics;
}

ServerMetrics::ServerMetrics()
    : rpc_("kestrel_server", "parameter server"),
      keys_pulled_(NewCounter("kestrel_server_keys_pulled_total",
                              "Sparse keys and dense blocks read by pulls this server answered.")),
      keys_pushed_(NewCounter("kestrel_server_keys_pushed_total",
                              "Sparse keys and dense blocks written by pushes this server accepted.")),
      rejected_requests_(NewCounter("kestrel_server_rejected_requests_total",
                                    "Requests this server refused: malformed, wrong job or generation, keys it "
                                    "does not own, bad gradients, too large.")),
      table_rows_(GaugeFamily("kestrel_server_table_rows", "Rows (sparse rows or dense blocks) of each table.")),
      table_memory_bytes_(GaugeFamily("kestrel_server_table_memory_bytes",
                                      "Bytes each table holds in memory (arena chunks and hash index).")),
      checkpoint_duration_(NewHistogram("kestrel_server_checkpoint_duration_seconds",
                                        "Time to write this server's part of a checkpoint (changed rows, RocksDB "
                                        "snapshot, checksums).",
                                        LongOperationBuckets())),
      checkpoint_written_rows_(NewCounter("kestrel_server_checkpoint_written_rows_total",
                                          "Changed rows written by this server's checkpoints.")),
      checkpoint_written_bytes_(NewCounter("kestrel_server_checkpoint_written_bytes_total",
                                           "Bytes of the changed rows written by this server's checkpoints.")),
      restore_duration_(NewHistogram("kestrel_server_restore_duration_seconds",
                                     "Time to restore a checkpoint (or empty tables) into this server.",
                                     LongOperationBuckets())) {}

void ServerMetrics::Refresh(const Shard& shard) {
  const ShardStats stats = shard.Stats();
  AdvanceCounterTo(keys_pulled_, static_cast<double>(stats.keys_pulled));
  AdvanceCounterTo(keys_pushed_, static_cast<double>(stats.keys_pushed));
  AdvanceCounterTo(rejected_requests_, static_cast<double>(stats.rejected_requests));
  // Tables are never dropped (a restore only adds them), so their series never go stale.
  for (const TableStats& table : stats.tables) {
    table_rows_.Add({{"table", table.config.name()}}).Set(static_cast<double>(table.rows));
    table_memory_bytes_.Add({{"table", table.config.name()}}).Set(static_cast<double>(table.memory_bytes));
  }
}

}  // namespace kestrel
