// The parameter server's Prometheus metrics (common/metrics.h), all declared here:
//
//   kestrel_server_requests_total{method,code}       counter    ParameterServer calls, by method and status code
//   kestrel_server_request_duration_seconds{method}  histogram  a call's arrival to its answer
//   kestrel_server_keys_pulled_total                 counter    sparse keys and dense blocks read by pulls
//   kestrel_server_keys_pushed_total                 counter    sparse keys and dense blocks written by pushes
//   kestrel_server_rejected_requests_total           counter    requests the shard refused (bad keys, job, ...)
//   kestrel_server_table_rows{table}                 gauge      rows (sparse rows, dense blocks) of each table
//   kestrel_server_table_memory_bytes{table}         gauge      bytes each table holds (arena chunks + index)
//   kestrel_server_table_memory_budget_bytes{table}  gauge      a bounded table's memory budget (0: unbounded)
//   kestrel_server_table_disk_rows{table}            gauge      a bounded table's rows in the disk tier
//   kestrel_server_table_admitted_rows_total{table}  counter    rows created for new keys (bounded tables)
//   kestrel_server_table_not_admitted_keys_total{table} counter pushed keys below admit_after (dropped)
//   kestrel_server_table_evicted_rows_total{table,reason}  counter  rows removed: reason="ttl" or "capacity"
//   kestrel_server_table_tier_moves_total{table,to}  counter    rows moved between tiers: to="disk" or "memory"
//   kestrel_server_table_pulled_keys_total{table,from}  counter pulled keys of bounded tables answered from
//                                                               "memory", "disk" or "initial" (absent)
//   kestrel_server_checkpoint_duration_seconds       histogram  writing this server's part of a checkpoint
//   kestrel_server_checkpoint_cut_seconds           histogram  requests stopped for a checkpoint's cut
//   kestrel_server_checkpoint_retained_peak_bytes   gauge      row copies the last checkpoint kept for its cut
//   kestrel_server_checkpoint_written_rows_total     counter    changed rows written by checkpoints
//   kestrel_server_checkpoint_written_bytes_total    counter    bytes of those rows
//   kestrel_server_restore_duration_seconds          histogram  restoring a checkpoint (or empty tables)
//
// The keys, rejection and table figures are the Shard's own statistics (Shard::Stats), read at every scrape;
// the rest are recorded by the gRPC edge (server/ps_service.h) and main.cc as calls finish.
#ifndef KESTREL_SERVER_SERVER_METRICS_H_
#define KESTREL_SERVER_SERVER_METRICS_H_

#include "common/metrics.h"
#include "common/rpc_metrics.h"
#include "server/shard.h"

namespace kestrel {

// The parameter server's metrics above, one instance per process. Thread-safe.
class ServerMetrics {
 public:
  // The process's instance (created on first use, never destroyed).
  static ServerMetrics& Get();

  // Sets the shard-derived metrics from shard.Stats(); call from a ScrapeHook (one shard per process: with
  // several, the counters follow the largest).
  void Refresh(const Shard& shard);

  RpcMetrics& rpc() { return rpc_; }
  prometheus::Histogram& checkpoint_duration() { return checkpoint_duration_; }
  prometheus::Histogram& checkpoint_cut_duration() { return checkpoint_cut_duration_; }
  prometheus::Gauge& checkpoint_retained_peak_bytes() { return checkpoint_retained_peak_bytes_; }
  prometheus::Counter& checkpoint_written_rows() { return checkpoint_written_rows_; }
  prometheus::Counter& checkpoint_written_bytes() { return checkpoint_written_bytes_; }
  prometheus::Histogram& restore_duration() { return restore_duration_; }

 private:
  ServerMetrics();

  RpcMetrics rpc_;
  prometheus::Counter& keys_pulled_;
  prometheus::Counter& keys_pushed_;
  prometheus::Counter& rejected_requests_;
  prometheus::Family<prometheus::Gauge>& table_rows_;
  prometheus::Family<prometheus::Gauge>& table_memory_bytes_;
  prometheus::Family<prometheus::Gauge>& table_memory_budget_bytes_;
  prometheus::Family<prometheus::Gauge>& table_disk_rows_;
  prometheus::Family<prometheus::Counter>& table_admitted_;
  prometheus::Family<prometheus::Counter>& table_not_admitted_;
  prometheus::Family<prometheus::Counter>& table_evicted_;
  prometheus::Family<prometheus::Counter>& table_tier_moves_;
  prometheus::Family<prometheus::Counter>& table_pulled_keys_;
  prometheus::Histogram& checkpoint_duration_;
  prometheus::Histogram& checkpoint_cut_duration_;
  prometheus::Gauge& checkpoint_retained_peak_bytes_;
  prometheus::Counter& checkpoint_written_rows_;
  prometheus::Counter& checkpoint_written_bytes_;
  prometheus::Histogram& restore_duration_;
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_SERVER_METRICS_H_
