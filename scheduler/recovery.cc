#include "scheduler/recovery.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/retry.h"
#include "common/checkpoint_layout.h"
#include "common/logging.h"
#include "common/partition.h"
#include "scheduler/each_server.h"
#include "scheduler/scheduler_metrics.h"

namespace kestrel {

Recovery::Recovery(JobContext* ctx, Checkpointer* checkpointer) : ctx_(ctx), checkpointer_(checkpointer) {}

void Recovery::Resume(const CheckpointManifest& manifest) {
  resume_from_ = manifest;
  rollback_generation_ = ctx_->membership->BeginRollback();
  ctx_->clocks->SetHold(0);
  ctx_->clocks->Reset(manifest.clock(), absl::AbortedError("the job is resuming from a checkpoint"));
  absl::MutexLock lock(&ctx_->mu);
  for (const WorkerCheckpoint& w : manifest.workers()) {
    if (w.rank() >= 0 && w.rank() < ctx_->job.num_workers) ctx_->worker_states[w.rank()] = w.state();
  }
}

bool Recovery::FailOver() {
  if (!ctx_->partition.has_value() || ctx_->partition->replicas() < 2) return false;
  int under_replicated = 0;
  const std::vector<int> failed = ctx_->membership->FailOver([&](const std::vector<bool>& out_of_service) {
    absl::StatusOr<Routing> routing = Routing::Create(*ctx_->partition, out_of_service);
    if (!routing.ok() || routing->AnyRangeLost()) return false;
    under_replicated = routing->UnderReplicatedRanges();
    return true;
  });
  if (failed.empty()) {
    KLOG(Warning) << "a parameter server died and some key range has no other copy in service: rolling back";
    return false;
  }
  SchedulerMetrics::Get().failovers().Increment(static_cast<double>(failed.size()));
  KLOG(Warning) << "server(s) " << absl::StrJoin(failed, ",") << " failed over without a rollback (routing generation "
                << ctx_->membership->routing().generation << "): their ranges are served by their backups; "
                << under_replicated << " of " << ctx_->partition->num_ranges() << " key ranges now have fewer than "
                << ctx_->partition->replicas() << " copies";
  return true;
}

bool Recovery::MustRollBack(JobState state) {
  if (state == JobState::kFinished) {
    if (!ctx_->membership->AnyWorkerAlive()) return false;  // every worker left: nobody reads the servers any more
    bool settled, final_committed;
    {
      absl::MutexLock lock(&ctx_->mu);
      settled = ctx_->status.final_model_settled;
      final_committed = !ctx_->status.latest.empty() && ctx_->status.latest_clock == checkpointer_->finished_clock();
    }
    if (settled && !final_committed) {
      ctx_->Fail(absl::DataLossError(
          "a parameter server died after the job finished, and the final model is in no checkpoint (no "
          "--checkpoint_dir, --final_checkpoint off, or it failed): that server's trained rows are lost"));
      return false;
    }
    KLOG(Warning) << "a parameter server died after the job finished: "
                  << (final_committed ? "its replacement restores the final checkpoint"
                                      : "the workers redo their last iterations from the last checkpoint");
  }
  return true;
}

void Recovery::StartRollback(const std::string& why) {
  checkpointer_->ForgetFinalAttempts();
  checkpointer_->AbandonPending();
  ctx_->syncing = -1;  // a rollback restores every server: nothing to re-replicate
  const uint64_t generation = ctx_->membership->BeginRollback();
  rollback_generation_ = generation;
  ctx_->clocks->SetHold(0);
  const size_t cancelled = ctx_->clocks->CancelAll(absl::AbortedError(absl::StrFormat(
      "%s: the job rolls back to its last checkpoint (generation %d); rejoin", why, generation)));
  ctx_->cut = ClockTable::kNoHold;
  KLOG(Warning) << why << ": rolling the job back to its last checkpoint (generation " << generation << ", "
                << cancelled << " waits aborted); waiting for every server rank to be alive";
}

bool Recovery::DropDeadServers() {
  if (ctx_->options.elastic_timeout <= absl::ZeroDuration() || absl::Now() < ctx_->next_removal) return false;
  const DeadMembers dead = ctx_->membership->DeadFor(ctx_->options.elastic_timeout, MonotonicNow());
  if (dead.servers.empty()) return false;
  const std::vector<std::string> alive = ctx_->membership->LiveServerAddresses();
  for (int s = 0; s < static_cast<int>(alive.size()); ++s) {
    if (alive[s].empty() && std::find(dead.servers.begin(), dead.servers.end(), s) == dead.servers.end()) {
      return false;  // another server is down but may still come back: wait for it (or its timeout)
    }
  }
  const absl::Duration retry = ctx_->RemovalRetry();
  const int servers = ctx_->job.num_servers - static_cast<int>(dead.servers.size());
  if (servers < std::max(1, ctx_->partition->replicas())) {
    KLOG(Warning) << "elastic: removing servers [" << absl::StrJoin(dead.servers, ",") << "] would leave " << servers
                  << ", fewer than the " << ctx_->partition->replicas() << " copies of each range: waiting for them";
    ctx_->next_removal = absl::Now() + retry;
    return false;
  }
  absl::StatusOr<Partition> next = ctx_->PartitionOver(servers);
  absl::Status status = next.status();
  if (status.ok()) status = ctx_->membership->BeginScale(ScaleTarget{servers, ctx_->job.num_workers, dead.servers, {}});
  const bool began = status.ok();
  absl::StatusOr<uint64_t> committed = began ? ctx_->membership->CommitScale(next->ToString()) : status;
  if (!committed.ok()) {
    if (began) ctx_->membership->CancelScale();  // only its own
    KLOG(Warning) << "elastic: cannot drop servers [" << absl::StrJoin(dead.servers, ",")
                  << "]: " << committed.status();
    ctx_->next_removal = absl::Now() + retry;
    return false;
  }
  ctx_->partition = *next;
  ctx_->job.partition = next->ToString();
  ctx_->job.num_servers = servers;
  relayout_restore_ = true;
  ctx_->CountRemovals(dead.servers.size());
  KLOG(Warning) << "elastic: server ranks [" << absl::StrJoin(dead.servers, ",") << "] did not come back within "
                << absl::FormatDuration(ctx_->options.elastic_timeout) << ": the job continues with " << servers
                << " servers (rescale " << ctx_->membership->layout().generation
                << "); their ranges are restored onto the others from the last checkpoint";
  return true;
}

bool Recovery::Restore() {
  std::optional<CheckpointManifest> manifest = resume_from_;
  if (!manifest.has_value() && !ctx_->options.dir.empty()) {
    absl::StatusOr<std::optional<CheckpointManifest>> latest = ctx_->layout.ReadLatest();
    if (!latest.ok()) {
      ctx_->Fail(absl::Status(latest.status().code(), absl::StrCat("cannot roll back: ", latest.status().message())));
      return false;
    }
    manifest = *latest;
  }
  const std::string name = manifest ? CheckpointLayout::CheckpointName(manifest->sequence()) : "";
  if (manifest.has_value() && manifest->num_workers() != ctx_->job.num_workers) {
    // Written before a worker-count change whose own checkpoint failed: its shares of the data are another
    // count's. Restoring it would read lines twice or skip them.
    ctx_->Fail(absl::FailedPreconditionError(absl::StrFormat(
        "cannot roll back to %s: it was written by %d workers, the job has %d since a rescale whose checkpoint "
        "failed; restart the job from it with --resume and %d workers",
        name, manifest->num_workers(), ctx_->job.num_workers, manifest->num_workers())));
    return false;
  }
  // Every worker rank registered at or after the rollback's generation: older requests are the old timeline.
  const uint64_t generation = rollback_generation_;
  std::vector<std::string> addresses = ctx_->membership->LiveServerAddresses();
  addresses.resize(ctx_->job.num_servers);  // the job's ranks
  const JobLayout layout = ctx_->membership->layout();
  // The routing the job continues at (EndRollback puts every server back in service), acted on by each server as
  // its restore ends.
  const uint64_t routing_after = ctx_->membership->routing().AllInServiceGeneration();
  const std::vector<absl::Status> results =
      OnEachServer<absl::Status>(addresses, [&](int s, const std::string& address) {
        RestoreShardRequest request;
        request.set_name(name);
        request.set_min_worker_generation(generation);
        request.set_routing_generation(routing_after);
        if (relayout_restore_) {  // the job dropped a server: every server restores into the new layout
          request.set_layout_generation(layout.generation);
          request.set_partition(layout.partition);
          request.set_rank(s);
          request.set_bsp_workers(ctx_->job.consistency.bsp() ? ctx_->job.num_workers : 0);
          for (int id : layout.worker_ids) request.add_worker_ids(id);
        }
        return ctx_->admin->Restore(s, address, request);
      });
  for (const absl::Status& result : results) {
    if (result.ok()) continue;
    if (RetryScopeOf(result) != RetryScope::kNone) {  // the restore is redone whole
      KLOG(Warning) << "rollback: " << result << "; retrying";
      absl::SleepFor(absl::Milliseconds(200));
      return false;
    }
    ctx_->Fail(absl::Status(result.code(), absl::StrCat("cannot restore checkpoint ", name.empty() ? "(none)" : name,
                                                        ": ", result.message())));
    return false;
  }
  const int64_t clock = manifest ? manifest->clock() : 0;
  ctx_->clocks->Reset(clock, absl::AbortedError("the job rolled back to a checkpoint; rejoin"));
  {
    absl::MutexLock lock(&ctx_->mu);
    for (WorkerState& state : ctx_->worker_states) state = WorkerState();
    if (manifest) {
      for (const WorkerCheckpoint& w : manifest->workers()) {
        if (w.rank() >= 0 && w.rank() < ctx_->job.num_workers) ctx_->worker_states[w.rank()] = w.state();
      }
    }
    if (!resume_from_) ++ctx_->status.rollbacks;
  }
  if (!resume_from_) SchedulerMetrics::Get().rollbacks().Increment();
  resume_from_.reset();
  checkpointer_->RestartAt(clock);
  // The final checkpoint restored: every worker was done at it, so the job is finished again.
  const bool finished = clock == checkpointer_->finished_clock();
  {
    absl::MutexLock lock(&ctx_->mu);
    ctx_->status.final_model_settled = finished;
  }
  relayout_restore_ = false;
  ctx_->membership->EndRollback(finished);
  KLOG(Info) << "every server restored " << (name.empty() ? "empty tables (no checkpoint yet)" : name)
             << ": the job continues from clock " << clock << " at generation " << generation;
  return true;
}

bool Recovery::ReReplicate() {
  if (!ctx_->partition.has_value() || ctx_->partition->replicas() < 2) return false;
  if (ctx_->syncing < 0) {
    if (absl::Now() < next_sync_attempt_) return false;
    const RoutingState routing = ctx_->membership->routing();
    const std::vector<std::string> alive = ctx_->membership->LiveServerAddresses();
    for (int s : routing.out_of_service) {
      if (!alive[s].empty()) {
        ctx_->syncing = s;
        break;
      }
    }
    if (ctx_->syncing < 0) return false;
    sync_cut_ = ctx_->clocks->HoldAtEarliest();
    sync_routing_ = 0;
    KLOG(Info) << "re-replicating onto server " << ctx_->syncing << ": every worker stops at clock " << sync_cut_;
  }
  if (sync_routing_ == 0) {
    if (!ctx_->clocks->AllAt(sync_cut_)) return true;
    const absl::Time start = absl::Now();
    const RoutingState state = ctx_->membership->routing();
    std::vector<bool> out(ctx_->job.num_servers, false);
    for (int s : state.out_of_service) out[s] = true;
    absl::StatusOr<Routing> routing = Routing::Create(*ctx_->partition, out);
    const std::vector<std::string> addresses = ctx_->membership->LiveServerAddresses();
    absl::Status status = routing.status();
    uint64_t rows = 0;
    for (int j = 0; status.ok() && j < ctx_->partition->replicas(); ++j) {
      const int owner = ((ctx_->syncing - j) % ctx_->job.num_servers + ctx_->job.num_servers) % ctx_->job.num_servers;
      const int source = routing->PrimaryOfOwner(owner);
      if (source < 0 || addresses[source].empty() || addresses[ctx_->syncing].empty()) {
        status = absl::UnavailableError(absl::StrFormat("no live copy of the ranges of server %d to copy", owner));
        break;
      }
      absl::StatusOr<uint64_t> copied =
          ctx_->admin->CopyGroup(source, addresses[source], owner, ctx_->syncing, addresses[ctx_->syncing]);
      status = copied.status();
      if (copied.ok()) rows += *copied;
    }
    absl::StatusOr<uint64_t> generation = status.ok() ? ctx_->membership->PutBackInService(ctx_->syncing) : status;
    if (!generation.ok()) {
      KLOG(Warning) << "re-replicating onto server " << ctx_->syncing << " failed (tried again shortly): "
                    << generation.status();
      next_sync_attempt_ = absl::Now() + 2 * ctx_->membership->options().heartbeat_timeout;
      EndReReplication();
      return false;
    }
    sync_routing_ = *generation;
    SchedulerMetrics::Get().rereplications().Increment();
    KLOG(Info) << "server " << ctx_->syncing << " holds synced copies of its ranges (" << rows << " rows copied in "
               << absl::FormatDuration(absl::Now() - start) << ") and serves again: routing generation "
               << sync_routing_;
  }
  if (!ctx_->membership->ServersAtRouting(sync_routing_)) return true;
  KLOG(Info) << "every server acts on routing generation " << sync_routing_ << ": the workers go on";
  EndReReplication();
  return false;
}

void Recovery::EndReReplication() {
  ctx_->syncing = -1;
  sync_routing_ = 0;
  ctx_->clocks->SetHold(ctx_->cut);  // the scheduled cut (kNoHold: none)
}

}  // namespace kestrel
