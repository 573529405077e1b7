#include "scheduler/job_context.h"

#include <algorithm>
#include <utility>

#include "scheduler/scheduler_metrics.h"

namespace kestrel {

JobContext::JobContext(CheckpointOptions options, JobDescription job, Membership* membership, ClockTable* clocks,
                       ServerAdmin* admin, std::function<void(absl::Status)> on_fatal)
    : options(std::move(options)),
      layout(this->options.dir),
      membership(membership),
      clocks(clocks),
      admin(admin),
      on_fatal(std::move(on_fatal)),
      job(std::move(job)) {
  absl::MutexLock lock(&mu);
  worker_states.resize(this->job.num_workers);
}

void JobContext::Fail(absl::Status status) {
  failed = true;
  on_fatal(std::move(status));
}

absl::Duration JobContext::RemovalRetry() const {
  return std::max(options.elastic_timeout, 2 * membership->options().heartbeat_timeout);
}

absl::StatusOr<Partition> JobContext::PartitionOver(int servers) const {
  const int ranges_per_server = std::max(1, partition->num_ranges() / partition->num_servers());
  absl::StatusOr<Partition> next = Partition::Uniform(servers, ranges_per_server);
  if (next.ok() && partition->replicas() > 1) next = next->WithReplicas(partition->replicas());
  return next;
}

void JobContext::CountRemovals(size_t removed) {
  SchedulerMetrics::Get().elastic_removals().Increment(static_cast<double>(removed));
  absl::MutexLock lock(&mu);
  status.elastic_removals += removed;
}

}  // namespace kestrel
