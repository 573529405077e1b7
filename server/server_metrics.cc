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
      table_memory_budget_bytes_(GaugeFamily("kestrel_server_table_memory_budget_bytes",
                                             "Memory budget of each bounded table on this server (0: unbounded).")),
      table_disk_rows_(GaugeFamily("kestrel_server_table_disk_rows", "Rows of each bounded table in the disk tier.")),
      table_admitted_(CounterFamily("kestrel_server_table_admitted_rows_total",
                                    "Rows a bounded table created for keys it did not hold.")),
      table_not_admitted_(CounterFamily("kestrel_server_table_not_admitted_keys_total",
                                        "Pushed keys a bounded table did not admit yet (their gradients dropped).")),
      table_evicted_(CounterFamily("kestrel_server_table_evicted_rows_total",
                                   "Rows a bounded table removed, by reason: ttl (expired) or capacity (dropped).")),
      table_tier_moves_(CounterFamily("kestrel_server_table_tier_moves_total",
                                      "Rows a bounded table moved between memory and its disk tier, by destination.")),
      table_pulled_keys_(CounterFamily("kestrel_server_table_pulled_keys_total",
                                       "Keys pulled from a bounded table, by where the answer came from: memory, "
                                       "disk, or initial (absent or expired).")),
      checkpoint_duration_(NewHistogram("kestrel_server_checkpoint_duration_seconds",
                                        "Time to write this server's part of a checkpoint (changed rows, RocksDB "
                                        "snapshot, checksums).",
                                        LongOperationBuckets())),
      checkpoint_cut_duration_(NewHistogram("kestrel_server_checkpoint_cut_seconds",
                                            "Time requests were stopped on this server for a checkpoint's cut "
                                            "(copy-on-write: marking it; with a disk tier: writing it too).",
                                            LongOperationBuckets())),
      checkpoint_retained_peak_bytes_(NewGauge("kestrel_server_checkpoint_retained_peak_bytes",
                                               "Most bytes of row copies the last checkpoint kept for its cut while "
                                               "it was written.")),
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
    if (!table.config.has_capacity()) continue;
    const std::string& name = table.config.name();
    const TableTierStats& t = table.tier;
    table_memory_budget_bytes_.Add({{"table", name}}).Set(static_cast<double>(t.memory_budget));
    table_disk_rows_.Add({{"table", name}}).Set(static_cast<double>(t.disk_rows));
    AdvanceCounterTo(table_admitted_.Add({{"table", name}}), static_cast<double>(t.admitted));
    AdvanceCounterTo(table_not_admitted_.Add({{"table", name}}), static_cast<double>(t.not_admitted));
    AdvanceCounterTo(table_evicted_.Add({{"table", name}, {"reason", "ttl"}}), static_cast<double>(t.expired));
    AdvanceCounterTo(table_evicted_.Add({{"table", name}, {"reason", "capacity"}}),
                     static_cast<double>(t.capacity_dropped));
    AdvanceCounterTo(table_tier_moves_.Add({{"table", name}, {"to", "disk"}}), static_cast<double>(t.spilled));
    AdvanceCounterTo(table_tier_moves_.Add({{"table", name}, {"to", "memory"}}), static_cast<double>(t.promoted));
    AdvanceCounterTo(table_pulled_keys_.Add({{"table", name}, {"from", "memory"}}),
                     static_cast<double>(t.pull_memory_hits));
    AdvanceCounterTo(table_pulled_keys_.Add({{"table", name}, {"from", "disk"}}),
                     static_cast<double>(t.pull_disk_hits));
    AdvanceCounterTo(table_pulled_keys_.Add({{"table", name}, {"from", "initial"}}),
                     static_cast<double>(t.pull_misses));
  }
}

}  // namespace kestrel
