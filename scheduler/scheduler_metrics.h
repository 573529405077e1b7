// The scheduler's Prometheus metrics (common/metrics.h), all declared here:
//
//   kestrel_scheduler_requests_total{method,code}       counter    Scheduler calls, by method and status code
//   kestrel_scheduler_request_duration_seconds{method}  histogram  a call's arrival to its answer (for WaitToStart
//                                                                  this includes waiting for permission)
//   kestrel_scheduler_members_alive{role}               gauge      servers and workers alive
//   kestrel_scheduler_members_required{role}            gauge      ranks of each role the job needs
//   kestrel_scheduler_job_generation                    gauge      the job generation (moves on failures)
//   kestrel_scheduler_job_state{state}                  gauge      1 for the current state (forming, running,
//                                                                  recovering, finished), 0 for the others
//   kestrel_scheduler_min_worker_clock                  gauge      iterations the slowest worker has finished
//   kestrel_scheduler_max_worker_clock                  gauge      iterations the fastest worker has finished
//   kestrel_scheduler_clock_staleness                   gauge      max - min worker clock
//   kestrel_scheduler_waiting_requests                  gauge      WaitToStart calls waiting for permission
//   kestrel_scheduler_checkpoints_committed_total       counter    global checkpoints committed
//   kestrel_scheduler_checkpoints_failed_total          counter    checkpoint attempts abandoned (nothing committed)
//   kestrel_scheduler_checkpoint_failures_total{code}   counter    the same, by the status code of why (a full
//                                                                  disk: the servers' RESOURCE_EXHAUSTED / INTERNAL)
//   kestrel_scheduler_final_checkpoint_failed           gauge      1 once the finished job's final checkpoint could
//                                                                  not be written: its final model is in none
//   kestrel_scheduler_checkpoint_duration_seconds       histogram  committed checkpoints: every worker stopped at
//                                                                  the cut to the commit
//   kestrel_scheduler_checkpoint_hold_seconds           histogram  workers held at a cut for its checkpoint
//   kestrel_scheduler_rollbacks_total                   counter    rollbacks of the job to its last checkpoint
//   kestrel_scheduler_failovers_total                   counter    servers lost without a rollback (ranges failed over)
//   kestrel_scheduler_rereplications_total              counter    replacements synced and put back in service
//   kestrel_scheduler_elastic_removals_total            counter    dead servers and workers removed from the job
//   kestrel_scheduler_under_replicated_ranges           gauge      key ranges with fewer copies in service than --replicas
//   kestrel_scheduler_latest_checkpoint_clock           gauge      clock of the newest committed checkpoint (-1: none)
//
// Membership, clocks and the latest checkpoint are read at every scrape (scheduler/scheduler_service.h); the
// checkpoint counters and durations are recorded by scheduler/checkpointer.h as they happen.
#ifndef KESTREL_SCHEDULER_SCHEDULER_METRICS_H_
#define KESTREL_SCHEDULER_SCHEDULER_METRICS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "common/metrics.h"
#include "common/rpc_metrics.h"
#include "scheduler/clock_table.h"
#include "scheduler/membership.h"

namespace kestrel {

// The scheduler's metrics above, one instance per process. Thread-safe.
class SchedulerMetrics {
 public:
  // The process's instance (created on first use, never destroyed).
  static SchedulerMetrics& Get();

  // Sets the gauges from the job's state; call from a ScrapeHook. `latest_checkpoint_clock`: none = no checkpoint.
  void Refresh(const Membership& membership, const ClockTable& clocks, std::optional<int64_t> latest_checkpoint_clock);

  RpcMetrics& rpc() { return rpc_; }
  prometheus::Counter& checkpoints_committed() { return checkpoints_committed_; }
  prometheus::Counter& checkpoints_failed() { return checkpoints_failed_; }
  // kestrel_scheduler_checkpoint_failures_total of `code`.
  prometheus::Counter& checkpoint_failures(absl::StatusCode code);
  prometheus::Gauge& final_checkpoint_failed() { return final_checkpoint_failed_; }
  prometheus::Histogram& checkpoint_duration() { return checkpoint_duration_; }
  prometheus::Histogram& checkpoint_hold() { return checkpoint_hold_; }
  prometheus::Counter& rollbacks() { return rollbacks_; }
  prometheus::Counter& failovers() { return failovers_; }
  prometheus::Counter& rereplications() { return rereplications_; }
  prometheus::Counter& elastic_removals() { return elastic_removals_; }
  // Replicated jobs: key ranges with fewer copies in service than the job's replicas.
  prometheus::Gauge& under_replicated_ranges() { return under_replicated_ranges_; }

 private:
  SchedulerMetrics();

  RpcMetrics rpc_;
  prometheus::Family<prometheus::Gauge>& members_alive_;
  prometheus::Family<prometheus::Gauge>& members_required_;
  prometheus::Gauge& job_generation_;
  prometheus::Family<prometheus::Gauge>& job_state_;
  prometheus::Gauge& min_worker_clock_;
  prometheus::Gauge& max_worker_clock_;
  prometheus::Gauge& clock_staleness_;
  prometheus::Gauge& waiting_requests_;
  prometheus::Counter& checkpoints_committed_;
  prometheus::Counter& checkpoints_failed_;
  prometheus::Family<prometheus::Counter>& checkpoint_failures_;
  prometheus::Gauge& final_checkpoint_failed_;
  prometheus::Histogram& checkpoint_duration_;
  prometheus::Histogram& checkpoint_hold_;
  prometheus::Counter& rollbacks_;
  prometheus::Counter& failovers_;
  prometheus::Counter& rereplications_;
  prometheus::Counter& elastic_removals_;
  prometheus::Gauge& under_replicated_ranges_;
  prometheus::Gauge& latest_checkpoint_clock_;
};

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_SCHEDULER_METRICS_H_
