#include "scheduler/scheduler_metrics.h"

#include <algorithm>
#include <vector>

namespace kestrel {

SchedulerMetrics& SchedulerMetrics::Get() {
  static SchedulerMetrics* metrics = new SchedulerMetrics();
  return *metrics;
}

SchedulerMetrics::SchedulerMetrics()
    : rpc_("kestrel_scheduler", "scheduler"),
      members_alive_(GaugeFamily("kestrel_scheduler_members_alive", "Members of the job alive, by role.")),
      members_required_(GaugeFamily("kestrel_scheduler_members_required", "Ranks of each role the job needs.")),
      job_generation_(NewGauge("kestrel_scheduler_job_generation",
                               "The job generation: starts at 1, moves when a member dies or a replacement joins.")),
      job_state_(GaugeFamily("kestrel_scheduler_job_state",
                             "1 for the job's current state (forming, running, recovering, finished), 0 for the "
                             "others.")),
      min_worker_clock_(NewGauge("kestrel_scheduler_min_worker_clock",
                                 "Iterations the slowest worker has finished.")),
      max_worker_clock_(NewGauge("kestrel_scheduler_max_worker_clock",
                                 "Iterations the fastest worker has finished.")),
      clock_staleness_(NewGauge("kestrel_scheduler_clock_staleness",
                                "Iterations between the fastest and the slowest worker (max - min clock).")),
      waiting_requests_(NewGauge("kestrel_scheduler_waiting_requests",
                                 "WaitToStart calls waiting for the consistency policy to allow them.")),
      checkpoints_committed_(NewCounter("kestrel_scheduler_checkpoints_committed_total",
                                        "Global checkpoints committed by this scheduler.")),
      checkpoints_failed_(NewCounter("kestrel_scheduler_checkpoints_failed_total",
                                     "Checkpoint attempts abandoned without a commit.")),
      checkpoint_failures_(CounterFamily("kestrel_scheduler_checkpoint_failures_total",
                                         "Checkpoint attempts abandoned without a commit, by the status code of why.")),
      final_checkpoint_failed_(NewGauge("kestrel_scheduler_final_checkpoint_failed",
                                        "1 once the finished job's final checkpoint could not be written (its final "
                                        "model is in no checkpoint), else 0.")),
      checkpoint_duration_(NewHistogram("kestrel_scheduler_checkpoint_duration_seconds",
                                        "Time from every worker stopped at the cut to the commit of a checkpoint.",
                                        LongOperationBuckets())),
      checkpoint_hold_(NewHistogram("kestrel_scheduler_checkpoint_hold_seconds",
                                    "Time every worker was held at a cut for its checkpoint (copy-on-write: the "
                                    "servers marking the cut; else until every server wrote its part).",
                                    LongOperationBuckets())),
      rollbacks_(NewCounter("kestrel_scheduler_rollbacks_total",
                            "Rollbacks of the job to its last checkpoint after a server died.")),
      failovers_(NewCounter("kestrel_scheduler_failovers_total",
                            "Servers lost without a rollback: their key ranges failed over to a backup copy.")),
      rereplications_(NewCounter("kestrel_scheduler_rereplications_total",
                                 "Replacement servers given synced copies of their key ranges and put back in service.")),
      elastic_removals_(NewCounter("kestrel_scheduler_elastic_removals_total",
                                   "Servers and workers removed from the job because they stayed dead (--elastic) "
                                   "or were named by a rescale's remove_servers / remove_workers.")),
      under_replicated_ranges_(NewGauge("kestrel_scheduler_under_replicated_ranges",
                                        "Key ranges with fewer copies in service than the job's --replicas.")),
      latest_checkpoint_clock_(NewGauge("kestrel_scheduler_latest_checkpoint_clock",
                                        "Clock of the newest committed checkpoint (-1: none).")) {
  latest_checkpoint_clock_.Set(-1);
}

void SchedulerMetrics::Refresh(const Membership& membership, const ClockTable& clocks,
                               std::optional<int64_t> latest_checkpoint_clock) {
  int servers = 0, workers = 0;
  for (const Member& m : membership.Members()) {
    if (!m.alive) continue;
    ++(m.role == Role::kServer ? servers : workers);
  }
  members_alive_.Add({{"role", RoleName(Role::kServer)}}).Set(servers);
  members_alive_.Add({{"role", RoleName(Role::kWorker)}}).Set(workers);
  members_required_.Add({{"role", RoleName(Role::kServer)}}).Set(membership.options().num_servers);
  members_required_.Add({{"role", RoleName(Role::kWorker)}}).Set(membership.options().num_workers);
  job_generation_.Set(static_cast<double>(membership.generation()));
  const JobState state = membership.state();
  for (JobState s : {JobState::kForming, JobState::kRunning, JobState::kRecovering, JobState::kFinished}) {
    job_state_.Add({{"state", JobStateName(s)}}).Set(s == state ? 1 : 0);
  }
  const int64_t min_clock = clocks.MinClock();
  int64_t max_clock = min_clock;
  for (int rank = 0; rank < clocks.num_workers(); ++rank) max_clock = std::max(max_clock, clocks.ClockOf(rank));
  min_worker_clock_.Set(static_cast<double>(min_clock));
  max_worker_clock_.Set(static_cast<double>(max_clock));
  clock_staleness_.Set(static_cast<double>(max_clock - min_clock));
  waiting_requests_.Set(static_cast<double>(clocks.num_waiting()));
  latest_checkpoint_clock_.Set(latest_checkpoint_clock.has_value() ? static_cast<double>(*latest_checkpoint_clock) : -1);
}

prometheus::Counter& SchedulerMetrics::checkpoint_failures(absl::StatusCode code) {
  return checkpoint_failures_.Add({{"code", absl::StatusCodeToString(code)}});
}

}  // namespace kestrel
