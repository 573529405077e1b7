#include "scheduler/checkpoint_coordinator.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/fault_injection.h"
#include "common/logging.h"
#include "common/status.h"
#include "scheduler/scheduler_metrics.h"
#include "worker/data/reshard.h"

namespace kestrel {
namespace {

// How often the coordinator looks when nothing wakes it.
constexpr absl::Duration kPoll = absl::Milliseconds(50);
// Tries at the final checkpoint before the workers are let go without it.
constexpr int kFinalAttempts = 3;

bool Retriable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) || absl::IsCancelled(status) ||
         absl::IsAborted(status);
}

}  // namespace

CheckpointCoordinator::CheckpointCoordinator(CheckpointOptions options, JobDescription job, Membership* membership,
                                             ClockTable* clocks, ShardAdmin* admin,
                                             std::function<void(absl::Status)> on_fatal)
    : options_(std::move(options)),
      job_(std::move(job)),
      layout_(options_.dir),
      membership_(membership),
      clocks_(clocks),
      admin_(admin),
      on_fatal_(std::move(on_fatal)) {
  absl::MutexLock lock(&mu_);
  worker_states_.resize(job_.num_workers);
}

CheckpointCoordinator::~CheckpointCoordinator() { Stop(); }

absl::Status CheckpointCoordinator::Start() {
  {
    absl::StatusOr<Partition> partition = job_.partition.empty() ? Partition::Uniform(job_.num_servers)
                                                                 : Partition::Parse(job_.partition);
    if (!partition.ok()) return partition.status();
    partition_ = *std::move(partition);
  }
  if (options_.keep < 1) return absl::InvalidArgumentError("must keep at least one checkpoint (--keep_checkpoints)");
  if (options_.every_clocks < 0) return absl::InvalidArgumentError("--checkpoint_every_clocks must be >= 0");
  if (options_.resume && options_.dir.empty()) {
    return absl::InvalidArgumentError("--resume needs --checkpoint_dir");
  }
  last_checkpoint_ = absl::Now();
  if (!options_.dir.empty()) {
    absl::StatusOr<std::optional<CheckpointManifest>> latest = layout_.ReadLatest();
    if (!latest.ok()) {
      return absl::Status(latest.status().code(),
                          absl::StrCat("cannot use checkpoint directory ", options_.dir, ": ", latest.status().message()));
    }
    if (latest->has_value()) {
      const CheckpointManifest& m = **latest;
      const std::string name = CheckpointLayout::CheckpointName(m.sequence());
      if (!options_.resume) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "checkpoint directory %s already holds checkpoints (latest %s at clock %d): pass --resume to continue "
            "from it, or use an empty directory",
            options_.dir, name, m.clock()));
      }
      if (m.num_workers() != job_.num_workers) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "checkpoint %s was written by %d workers; this job has %d (each worker's data shard and reader position "
            "depend on the worker count)",
            name, m.num_workers(), job_.num_workers));
      }
      if (m.job_id() != job_.job_id) {
        return absl::FailedPreconditionError(
            absl::StrFormat("checkpoint %s belongs to job '%s', not '%s'", name, m.job_id(), job_.job_id));
      }
      KLOG(Info) << "resuming from checkpoint " << name << " at clock " << m.clock() << " (written by "
                 << m.num_servers() << " servers; this job has " << job_.num_servers << ")";
      resume_from_ = m;
      rollback_generation_ = membership_->BeginRollback();
      clocks_->SetHold(0);
      clocks_->Reset(m.clock(), absl::AbortedError("the job is resuming from a checkpoint"));
      {
        absl::MutexLock lock(&mu_);
        for (const WorkerCheckpoint& w : m.workers()) {
          if (w.rank() >= 0 && w.rank() < job_.num_workers) worker_states_[w.rank()] = w.state();
        }
        status_.latest = name;
        status_.latest_clock = m.clock();
      }
      last_checkpoint_clock_ = m.clock();
    } else if (options_.resume) {
      KLOG(Info) << "no checkpoint in " << options_.dir << ": starting a new job";
    }
  }
  if (!resume_from_.has_value()) {
    cut_ = NextScheduledCut(-1);
    clocks_->SetHold(cut_);
  }
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void CheckpointCoordinator::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  // A Scale call still waiting is answered (its gRPC call must finish for the server to shut down).
  std::function<void(absl::StatusOr<ScaleResult>)> done;
  {
    absl::MutexLock lock(&mu_);
    done.swap(scale_done_);
    scale_pending_ = false;
  }
  if (done) done(absl::UnavailableError("the scheduler is shutting down: the rescale was not done"));
}

void CheckpointCoordinator::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

void CheckpointCoordinator::RecordWorkerState(int rank, const WorkerState& state) {
  absl::MutexLock lock(&mu_);
  if (rank >= 0 && rank < static_cast<int>(worker_states_.size())) worker_states_[rank] = state;
}

std::optional<WorkerState> CheckpointCoordinator::StateFor(int rank, int64_t clock) const {
  absl::MutexLock lock(&mu_);
  if (rank < 0 || rank >= static_cast<int>(worker_states_.size())) return std::nullopt;
  const WorkerState& state = worker_states_[rank];
  // Without a reader position the state still matters when it carries an epoch plan (a worker-count change at
  // an epoch's start: the epoch starts afresh, in the plan's schedule).
  if (state.clock() != clock || (!state.has_reader() && !state.has_plan())) return std::nullopt;
  return state;
}

absl::StatusOr<int64_t> CheckpointCoordinator::Request() {
  if (options_.dir.empty()) {
    return absl::FailedPreconditionError("this scheduler was started without --checkpoint_dir");
  }
  if (membership_->state() != JobState::kRunning) {
    return absl::FailedPreconditionError(absl::StrCat("the job is ", JobStateName(membership_->state()),
                                                      ", not running: no checkpoint can be cut now"));
  }
  const int64_t cut = clocks_->HoldAtEarliest();
  absl::MutexLock lock(&mu_);
  requested_ = true;
  woken_ = true;
  return cut;
}

CheckpointStatus CheckpointCoordinator::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

void CheckpointCoordinator::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(
                               +[](CheckpointCoordinator* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
                                 return c->woken_ || c->stop_;
                               },
                               this),
                           kPoll);
      if (stop_) return;
      woken_ = false;
    }
    if (!failed_) Step();
  }
}

int64_t CheckpointCoordinator::NextScheduledCut(int64_t permitted) const {
  if (options_.every_clocks <= 0) return ClockTable::kNoHold;
  return ((permitted + 1) / options_.every_clocks + 1) * options_.every_clocks;
}

void CheckpointCoordinator::Step() {
  const JobState state = membership_->state();
  // A server died: with a copy of each of its ranges elsewhere, those take over; else its rows since the last
  // checkpoint are gone, and everyone rolls back to that checkpoint.
  if (!membership_->rolling_back() && state != JobState::kForming && membership_->AnyServerDead() && FailOver()) {
    return;  // the next step sees the job as it is now
  }
  if (!membership_->rolling_back() && state != JobState::kForming && membership_->AnyServerDead()) {
    if (state == JobState::kFinished) {
      if (!membership_->AnyWorkerAlive()) return;  // every worker left: nobody reads the servers any more
      bool settled, final_committed;
      {
        absl::MutexLock lock(&mu_);
        settled = status_.final_model_settled;
        final_committed = !status_.latest.empty() && status_.latest_clock == finished_clock_;
      }
      if (settled && !final_committed) {
        failed_ = true;
        on_fatal_(absl::DataLossError(
            "a parameter server died after the job finished, and the final model is in no checkpoint (no "
            "--checkpoint_dir, --final_checkpoint off, or it failed): that server's trained rows are lost"));
        return;
      }
      KLOG(Warning) << "a parameter server died after the job finished: "
                    << (final_committed ? "its replacement restores the final checkpoint"
                                        : "the workers redo their last iterations from the last checkpoint");
    }
    StartRollback("a parameter server died");
  }
  if (membership_->rolling_back()) {
    if (membership_->AllServersAlive() || DropDeadServers()) Restore();
    return;
  }
  RemoveDead();
  if (Rescale()) return;
  if (state == JobState::kFinished) {
    const int64_t clock = clocks_->MinClock();
    finished_clock_ = clock;
    bool settled, committed;
    {
      absl::MutexLock lock(&mu_);
      settled = status_.final_model_settled;
      committed = !status_.latest.empty() && status_.latest_clock == clock;
    }
    if (settled) return;
    if (Degraded() && !options_.dir.empty() && options_.final_checkpoint && !committed) {
      KLOG(Warning) << "no final checkpoint: a server is out of service (failed over), so its ranges' written copy "
                       "would be stale; the model of clock "
                    << clock << " is only in the servers' memory";
    }
    // Every worker waits for this before leaving, so the servers are all still there.
    if (!options_.dir.empty() && options_.final_checkpoint && !committed && !Degraded()) {
      if (!clocks_->AllAt(clock) || absl::Now() < next_final_attempt_) return;
      ++final_attempts_;
      if (TakeCheckpoint(clock, "final")) {
        last_checkpoint_clock_ = clock;
      } else if (final_attempts_ < kFinalAttempts) {
        // Far enough apart that a server which died meanwhile is declared dead (and rolled back) first.
        next_final_attempt_ = absl::Now() + 2 * membership_->options().heartbeat_timeout;
        return;
      } else {
        KLOG(Error) << "the final checkpoint failed " << final_attempts_
                    << " times: the workers leave, and the model of clock " << clock
                    << " is only in the servers' memory";
      }
    }
    absl::MutexLock lock(&mu_);
    status_.final_model_settled = true;
    return;
  }
  if (state == JobState::kRunning && ReReplicate()) return;
  if (options_.dir.empty()) return;
  if (state != JobState::kRunning) return;
  bool requested;
  {
    absl::MutexLock lock(&mu_);
    requested = requested_;
  }
  const bool timed = options_.every > absl::ZeroDuration() && absl::Now() - last_checkpoint_ >= options_.every;
  if (timed) clocks_->HoldAtEarliest();
  cut_ = clocks_->hold();
  if (cut_ == ClockTable::kNoHold || !clocks_->AllAt(cut_)) return;
  const std::string reason = requested ? "requested"
                             : timed   ? absl::StrCat("every ", absl::FormatDuration(options_.every))
                                       : absl::StrCat("every ", options_.every_clocks, " clocks");
  if (cut_ != last_checkpoint_clock_ && Degraded()) {
    KLOG(Warning) << "checkpoint at clock " << cut_ << " (" << reason
                  << ") skipped: a server is out of service (failed over); checkpoints resume once the job is "
                     "fully replicated again or rolls back";
    SchedulerMetrics::Get().checkpoints_failed().Increment();
  } else if (cut_ != last_checkpoint_clock_ && TakeCheckpoint(cut_, reason)) {
    absl::MutexLock lock(&mu_);
    requested_ = false;
  }
  last_checkpoint_ = absl::Now();
  last_checkpoint_clock_ = cut_;
  cut_ = NextScheduledCut(cut_ - 1);
  clocks_->SetHold(cut_);
}

void CheckpointCoordinator::StartRollback(const std::string& why) {
  bool pending;
  {
    absl::MutexLock lock(&mu_);
    pending = scale_pending_;
  }
  if (pending) {  // its hold and its plans are of the timeline being rolled back
    EndRescale(absl::AbortedError(absl::StrCat(why, ": the job rolls back, the rescale was abandoned")));
  }
  final_attempts_ = 0;
  next_final_attempt_ = absl::InfinitePast();
  syncing_ = -1;  // a rollback restores every server: nothing to re-replicate
  const uint64_t generation = membership_->BeginRollback();
  rollback_generation_ = generation;
  clocks_->SetHold(0);
  const size_t cancelled = clocks_->CancelAll(absl::AbortedError(absl::StrFormat(
      "%s: the job rolls back to its last checkpoint (generation %d); rejoin", why, generation)));
  cut_ = ClockTable::kNoHold;
  KLOG(Warning) << why << ": rolling the job back to its last checkpoint (generation " << generation << ", "
                << cancelled << " waits aborted); waiting for every server rank to be alive";
}

absl::Duration CheckpointCoordinator::RemovalRetry() const {
  return std::max(options_.elastic_timeout, 2 * membership_->options().heartbeat_timeout);
}

absl::StatusOr<Partition> CheckpointCoordinator::PartitionOver(int servers) const {
  const int ranges_per_server = std::max(1, partition_->num_ranges() / partition_->num_servers());
  absl::StatusOr<Partition> next = Partition::Uniform(servers, ranges_per_server);
  if (next.ok() && partition_->replicas() > 1) next = next->WithReplicas(partition_->replicas());
  return next;
}

void CheckpointCoordinator::CountRemovals(size_t removed) {
  SchedulerMetrics::Get().elastic_removals().Increment(static_cast<double>(removed));
  absl::MutexLock lock(&mu_);
  status_.elastic_removals += removed;
}

void CheckpointCoordinator::RemoveDead() {
  if (options_.elastic_timeout <= absl::ZeroDuration() || absl::Now() < next_removal_) return;
  if (membership_->pending_scale().has_value() || scale_cut_ != ClockTable::kNoHold || syncing_ >= 0) return;
  const JobState state = membership_->state();
  if (state != JobState::kRunning && state != JobState::kRecovering) return;
  const DeadMembers dead = membership_->DeadFor(options_.elastic_timeout, MonotonicNow());
  if (dead.empty()) return;
  // Another member dead but not for long enough yet holds the others back too (a BSP worker blocks the clock):
  // wait, and remove them together, rather than hold the job at a boundary it cannot reach.
  const DeadMembers all_dead = membership_->DeadFor(absl::ZeroDuration(), MonotonicNow());
  if (all_dead.servers.size() != dead.servers.size() || all_dead.workers.size() != dead.workers.size()) return;
  // A dead server still in service rolls the job back (DropDeadServers); one failed over is removed live.
  const RoutingState routing = membership_->routing();
  for (int s : dead.servers) {
    if (std::find(routing.out_of_service.begin(), routing.out_of_service.end(), s) == routing.out_of_service.end()) {
      return;
    }
  }
  const absl::Duration retry = RemovalRetry();
  const int servers = job_.num_servers - static_cast<int>(dead.servers.size());
  const int workers = job_.num_workers - static_cast<int>(dead.workers.size());
  if (workers < 1 || servers < std::max(1, partition_->replicas())) {
    KLOG(Warning) << "elastic: " << dead.servers.size() << " servers and " << dead.workers.size()
                  << " workers are dead, but removing them would leave " << servers << " servers and " << workers
                  << " workers (the job needs a worker, and a server per copy of each range): waiting for them";
    next_removal_ = absl::Now() + retry;
    return;
  }
  KLOG(Warning) << "elastic: removing server ranks [" << absl::StrJoin(dead.servers, ",") << "] and worker ranks ["
                << absl::StrJoin(dead.workers, ",") << "], dead for more than "
                << absl::FormatDuration(options_.elastic_timeout);
  const absl::Status started = Scale(
      ScaleTarget{servers, workers, dead.servers, dead.workers}, absl::ZeroDuration(),
      [this, retry](absl::StatusOr<ScaleResult> result) {  // on this thread (EndRescale)
        if (!result.ok()) {
          KLOG(Warning) << "elastic: the removal failed (tried again in " << absl::FormatDuration(retry)
                        << "): " << result.status();
          next_removal_ = absl::Now() + retry;
        }
      });
  if (!started.ok()) {
    KLOG(Warning) << "elastic: cannot remove them now: " << started;
    next_removal_ = absl::Now() + retry;
  }
}

bool CheckpointCoordinator::DropDeadServers() {
  if (options_.elastic_timeout <= absl::ZeroDuration() || absl::Now() < next_removal_) return false;
  const DeadMembers dead = membership_->DeadFor(options_.elastic_timeout, MonotonicNow());
  if (dead.servers.empty()) return false;
  const std::vector<std::string> alive = membership_->LiveServerAddresses();
  for (int s = 0; s < static_cast<int>(alive.size()); ++s) {
    if (alive[s].empty() && std::find(dead.servers.begin(), dead.servers.end(), s) == dead.servers.end()) {
      return false;  // another server is down but may still come back: wait for it (or its timeout)
    }
  }
  const absl::Duration retry = RemovalRetry();
  const int servers = job_.num_servers - static_cast<int>(dead.servers.size());
  if (servers < std::max(1, partition_->replicas())) {
    KLOG(Warning) << "elastic: removing servers [" << absl::StrJoin(dead.servers, ",") << "] would leave " << servers
                  << ", fewer than the " << partition_->replicas() << " copies of each range: waiting for them";
    next_removal_ = absl::Now() + retry;
    return false;
  }
  absl::StatusOr<Partition> next = PartitionOver(servers);
  absl::Status status = next.status();
  if (status.ok()) status = membership_->BeginScale(ScaleTarget{servers, job_.num_workers, dead.servers, {}});
  const bool began = status.ok();
  absl::StatusOr<uint64_t> committed = began ? membership_->CommitScale(next->ToString()) : status;
  if (!committed.ok()) {
    if (began) membership_->CancelScale();  // only its own
    KLOG(Warning) << "elastic: cannot drop servers [" << absl::StrJoin(dead.servers, ",")
                  << "]: " << committed.status();
    next_removal_ = absl::Now() + retry;
    return false;
  }
  partition_ = *next;
  job_.partition = next->ToString();
  job_.num_servers = servers;
  relayout_restore_ = true;
  CountRemovals(dead.servers.size());
  KLOG(Warning) << "elastic: server ranks [" << absl::StrJoin(dead.servers, ",") << "] did not come back within "
                << absl::FormatDuration(options_.elastic_timeout) << ": the job continues with " << servers
                << " servers (rescale " << membership_->layout().generation
                << "); their ranges are restored onto the others from the last checkpoint";
  return true;
}

absl::Status CheckpointCoordinator::Scale(ScaleTarget target, absl::Duration join_timeout,
                                          std::function<void(absl::StatusOr<ScaleResult>)> done, bool verify,
                                          int64_t at_clock) {
  const JobLayout layout = membership_->layout();
  KESTREL_ASSIGN_OR_RETURN(const Partition partition, Partition::Parse(layout.partition));
  if (target.servers < partition.replicas()) {
    return absl::InvalidArgumentError(absl::StrFormat("%d servers cannot hold %d copies of every key range",
                                                      target.servers, partition.replicas()));
  }
  if (at_clock > 0 && (!target.remove_servers.empty() || !target.remove_workers.empty())) {
    return absl::InvalidArgumentError(
        "a rescale that removes dead ranks happens at the earliest clock boundary (the dead ones hold the others "
        "back): no at_clock");
  }
  // Under the lock the coordinator thread reads them with, so it never sees the rescale without them.
  absl::MutexLock lock(&mu_);
  if (scale_pending_) return absl::FailedPreconditionError("a rescale is in progress");
  KESTREL_RETURN_IF_ERROR(membership_->BeginScale(target));
  scale_pending_ = true;
  scale_verify_ = verify;
  scale_at_ = std::max<int64_t>(at_clock, 0);
  scale_done_ = std::move(done);
  scale_deadline_ = absl::Now() + join_timeout;
  woken_ = true;
  return absl::OkStatus();
}

bool CheckpointCoordinator::Rescale() {
  const std::optional<ScaleTarget> target = membership_->pending_scale();
  if (!target.has_value()) return false;
  // Removing dead members is how an elastic job recovers: it goes on while the job waits for them.
  const bool removes = !target->remove_servers.empty() || !target->remove_workers.empty();
  const JobState state = membership_->state();
  if (scale_cut_ == ClockTable::kNoHold) {
    if (!(state == JobState::kRunning || (removes && state == JobState::kRecovering)) ||
        membership_->rolling_back()) {
      EndRescale(absl::AbortedError(absl::StrFormat("the job is %s: the rescale was abandoned",
                                                    JobStateName(membership_->state()))));
      return false;
    }
    for (auto [list, role] : {std::make_pair(&target->remove_servers, Role::kServer),
                              std::make_pair(&target->remove_workers, Role::kWorker)}) {
      for (int r : *list) {
        if (membership_->Alive(role, r)) {
          EndRescale(absl::AbortedError(absl::StrFormat(
              "%s rank %d came back before the job was held: it is not removed", RoleName(role), r)));
          return false;
        }
      }
    }
    if (!membership_->ScaleReady()) {
      absl::Time deadline;
      {
        absl::MutexLock lock(&mu_);
        deadline = scale_deadline_;
      }
      if (absl::Now() < deadline) return false;  // the job runs on while the new ranks start
      EndRescale(absl::DeadlineExceededError(absl::StrFormat(
          "the new ranks of a rescale to %d servers and %d workers did not all register in time: start them first",
          target->servers, target->workers)));
      return false;
    }
    int64_t at;
    {
      absl::MutexLock lock(&mu_);
      at = scale_at_;
    }
    // A checkpoint scheduled before the asked-for boundary is cut first (the workers cannot pass it meanwhile).
    if (at > 0 && clocks_->hold() < at && clocks_->MaxPermitted() < at) return false;
    scale_start_ = absl::Now();
    if (at > 0) {
      if (!clocks_->HoldAt(at)) {
        EndRescale(absl::FailedPreconditionError(absl::StrFormat(
            "the job passed clock %d before the new ranks registered: the rescale was not done", at)));
        return false;
      }
      scale_cut_ = at;
    } else {
      scale_cut_ = clocks_->HoldAtEarliest();
    }
    KLOG(Info) << "rescaling to " << target->servers << " servers and " << target->workers << " workers"
               << (removes ? absl::StrCat(" (removing server ranks [", absl::StrJoin(target->remove_servers, ","),
                                          "] and worker ranks [", absl::StrJoin(target->remove_workers, ","), "])")
                           : "")
               << ": every worker stops at clock " << scale_cut_;
    return true;
  }
  if (membership_->AnyServerDead() || membership_->rolling_back()) {
    EndRescale(absl::AbortedError("a server died while the job was held for a rescale: abandoned"));
    return false;
  }
  if (state == JobState::kFinished) {
    EndRescale(absl::FailedPreconditionError("the job finished before the rescale's boundary: nothing to rescale"));
    return false;
  }
  // Every worker that stays is at the cut; a removed one is wherever it died (BSP: the cut or the clock before).
  for (int w = 0; w < job_.num_workers; ++w) {
    const bool removed =
        std::find(target->remove_workers.begin(), target->remove_workers.end(), w) != target->remove_workers.end();
    if (removed || clocks_->ClockOf(w) == scale_cut_) continue;
    if (!membership_->Alive(Role::kWorker, w)) {  // it may never reach the cut
      EndRescale(absl::AbortedError(absl::StrFormat(
          "worker rank %d died while the job was held for a rescale: abandoned (tried again once it is back or "
          "removed)",
          w)));
      return false;
    }
    return true;
  }
  // Replicated jobs: every server must act on the latest routing (a failover just before) before rows move, or
  // a group whose primary changed could be sent by nobody.
  if (partition_->replicas() > 1 && !membership_->ServersAtRouting(membership_->routing().generation)) return true;
  absl::StatusOr<Partition> next = PartitionOver(target->servers);
  const int old_workers = job_.num_workers;
  const bool workers_change = target->workers != old_workers || !target->remove_workers.empty();
  const std::vector<int> worker_map = MapRanks(old_workers, target->workers, target->remove_workers);
  // The workers' shares of the rest of the epoch, before anything moves (a failure leaves the job as it was).
  absl::StatusOr<std::vector<WorkerState>> states =
      workers_change ? PlanWorkers(worker_map, target->remove_workers) : std::vector<WorkerState>();
  const std::string removing = absl::StrFormat("removing workers [%s]", absl::StrJoin(target->remove_workers, ","));
  if (!states.ok() && !target->remove_workers.empty() && scale_cut_ != removal_rollback_clock_) {
    // A removed worker's last report cannot be handed on (it stopped in another epoch than the others): from
    // the last checkpoint every worker's state is known at one clock. Once only: at that clock it is final.
    EndRescale(absl::AbortedError(absl::StrCat(states.status().message(), ": the job rolls back to its last "
                                               "checkpoint, and they are removed from there")));
    StartRollback(removing);
    removal_rollback_clock_ = last_checkpoint_clock_;
    return false;
  }
  if (!states.ok()) next = states.status();
  // A removed BSP worker that died mid-clock left that clock half done on the servers: complete it without it.
  // From the fence on, the servers refuse its pushes of that clock: the removal must go through, or the job
  // roll back (a restore drops every fence and buffered push).
  std::vector<int> half_done;  // removed workers that died in the clock before the cut (the others finished it)
  for (int w : target->remove_workers) {
    if (clocks_->ClockOf(w) < scale_cut_ && job_.consistency == "bsp" && next.ok()) half_done.push_back(w);
  }
  const bool fenced = !half_done.empty();
  if (fenced) {
    absl::StatusOr<bool> settled = CompleteWithout(half_done, scale_cut_ - 1);
    if (!settled.ok() || !*settled) {
      // Not settled: some server applied that clock with their parts (only a rollback undoes it), or a call
      // failed with the fence in place on some servers.
      EndRescale(absl::AbortedError(absl::StrFormat(
          "%s: clock %d %s; the job rolls back to its last checkpoint, and they are removed from there", removing,
          scale_cut_ - 1,
          settled.ok() ? "was applied with their pushes on some server"
                       : absl::StrCat("could not be completed without them (", settled.status().message(), ")"))));
      StartRollback(removing);
      return false;
    }
  }
  absl::StatusOr<ScaleResult> result =
      next.ok() ? MoveTo(*next, *target, workers_change ? &*states : nullptr) : next.status();
  if (!result.ok()) {
    EndRescale(result.status());
    if (fenced && !failed_) StartRollback(absl::StrCat(removing, " failed after their clock was completed"));
    return false;
  }
  // The held workers learn of the new layout by rejoining; they continue from this same clock.
  const size_t cancelled = clocks_->CancelAll(absl::AbortedError(absl::StrFormat(
      "the job was rescaled to %d servers and %d workers (rescale %d): rejoin", target->servers, target->workers,
      result->layout_generation)));
  // A new worker count changes every worker's share of the data: a rollback must not restore the old shares,
  // so the workers stay held until a checkpoint of the new ones is committed (a rollback to an older one is
  // refused by Restore). Server moves need none: a checkpoint of the old layout restores into the new one.
  if (!options_.dir.empty() && workers_change) {
    for (int attempt = 1;; ++attempt) {
      if (TakeCheckpoint(scale_cut_, "rescale")) {
        last_checkpoint_clock_ = scale_cut_;
        break;
      }
      if (attempt == kFinalAttempts) {
        KLOG(Error) << "no checkpoint of the new worker count after " << attempt
                    << " attempts: a rollback before the next one would be refused";
        break;
      }
      absl::SleepFor(2 * membership_->options().heartbeat_timeout);
    }
  }
  result->held = absl::Now() - scale_start_;
  KLOG(Info) << absl::StrFormat(
      "rescale %d done at clock %d: %d servers, %d workers; %d rows (%.1f MB) moved in %.3f s, workers held %.3f s "
      "(%d waits answered: rejoin)",
      result->layout_generation, result->clock, target->servers, target->workers, result->rows_moved,
      result->bytes_moved / 1e6, absl::ToDoubleSeconds(result->moved), absl::ToDoubleSeconds(result->held), cancelled);
  EndRescale(*std::move(result));
  return false;
}

absl::StatusOr<bool> CheckpointCoordinator::CompleteWithout(const std::vector<int>& workers, int64_t clock) {
  const std::vector<std::string> addresses = membership_->LiveServerAddresses();
  const uint64_t generation = membership_->layout().generation + 1;
  auto phase = [&](RescaleShardRequest::Phase which, uint64_t* total) -> absl::Status {
    RescaleShardRequest request;
    request.set_phase(which);
    request.set_layout_generation(generation);
    for (int w : workers) request.add_removed_workers(w);
    request.set_clock(clock);
    std::vector<absl::StatusOr<RescaleShardResponse>> results(addresses.size(), absl::UnknownError("not run"));
    std::vector<std::thread> calls;
    for (size_t s = 0; s < addresses.size(); ++s) {
      if (addresses[s].empty()) continue;  // a dead server being removed: its groups' copies are elsewhere
      calls.emplace_back([&, s] { results[s] = admin_->Rescale(static_cast<int>(s), addresses[s], request); });
    }
    for (std::thread& t : calls) t.join();
    for (size_t s = 0; s < addresses.size(); ++s) {
      if (addresses[s].empty()) continue;
      if (!results[s].ok()) return results[s].status();
      *total += which == RescaleShardRequest::FENCE ? results[s]->applied_with_removed() : results[s]->completed();
    }
    return absl::OkStatus();
  };
  uint64_t applied = 0, completed = 0;
  KESTREL_RETURN_IF_ERROR(phase(RescaleShardRequest::FENCE, &applied));
  if (applied > 0) {
    KLOG(Warning) << applied << " tables had applied clock " << clock << " with the pushes of workers ["
                  << absl::StrJoin(workers, ",") << "]: it cannot be completed without them";
    return false;
  }
  KESTREL_RETURN_IF_ERROR(phase(RescaleShardRequest::COMPLETE, &completed));
  KLOG(Info) << "clock " << clock << " applied without the pushes of workers [" << absl::StrJoin(workers, ",")
             << "], averaged over the others (" << completed << " tables); their batch of it goes to the others";
  return true;
}

absl::StatusOr<ScaleResult> CheckpointCoordinator::MoveTo(const Partition& next, ScaleTarget target,
                                                          std::vector<WorkerState>* worker_states) {
  const JobLayout old = membership_->layout();
  const std::vector<std::string> addresses = membership_->TargetServerAddresses();  // by new rank
  const std::vector<std::string> old_addresses = membership_->LiveServerAddresses();  // by old rank
  const std::vector<int> server_map = MapRanks(old.num_servers, target.servers, target.remove_servers);
  std::vector<int> new_of_old(old.num_servers, -1);
  for (int r = 0; r < target.servers; ++r) {
    if (server_map[r] >= 0) new_of_old[server_map[r]] = r;
  }
  // Who takes part: every live server of the old layout (it sends its rows; -1: it leaves), then the joining
  // ones. A dead server being removed takes no part: with replicas, the primaries of its groups send its rows.
  struct Participant {
    int old_rank;  // -1: joining
    int new_rank;  // -1: leaving
    std::string address;
  };
  std::vector<Participant> everyone;
  std::vector<int> senders;
  for (int s = 0; s < old.num_servers; ++s) {
    if (old_addresses[s].empty()) {
      if (std::find(target.remove_servers.begin(), target.remove_servers.end(), s) == target.remove_servers.end()) {
        return absl::UnavailableError(absl::StrFormat("server %d is not alive: the rescale was not done", s));
      }
      continue;
    }
    everyone.push_back({s, new_of_old[s], old_addresses[s]});
    senders.push_back(s);
  }
  for (int r = 0; r < target.servers; ++r) {
    if (server_map[r] == -1) everyone.push_back({-1, r, addresses[r]});
  }
  const uint64_t generation = old.generation + 1;
  // Distinct for every attempt (a retry after an abort), across scheduler restarts too.
  const uint64_t attempt = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  bool verify;
  {
    absl::MutexLock lock(&mu_);
    verify = scale_verify_;
  }
  if (verify && static_cast<int>(senders.size()) != old.num_servers) {
    KLOG(Warning) << "rescale " << generation << ": a server being removed is dead, so its own groups cannot be read: "
                  << "no fingerprint check";
    verify = false;
  }
  // The full table over the servers at `at` (each one's own group).
  auto fingerprint = [&](const std::vector<std::string>& at) -> absl::StatusOr<uint64_t> {
    uint64_t sum = 0;
    for (size_t s = 0; s < at.size(); ++s) {
      KESTREL_ASSIGN_OR_RETURN(const uint64_t f, admin_->Fingerprint(static_cast<int>(s), at[s]));
      sum += f;
    }
    return sum;
  };
  uint64_t fingerprint_before = 0;
  if (verify) {
    KESTREL_ASSIGN_OR_RETURN(fingerprint_before, fingerprint(old_addresses));
  }
  // The new layout's worker ids (servers check workers' certificates against them from the switch on).
  const std::vector<int> worker_ids = membership_->TargetIds(Role::kWorker);
  const absl::Time start = absl::Now();
  // One phase on `who`, concurrently; the first failure.
  auto phase = [&](RescaleShardRequest::Phase which, bool senders_only, std::vector<RescaleShardResponse>* answers,
                   bool keep_groups = false) -> absl::Status {
    RescaleShardRequest request;
    request.set_phase(which);
    request.set_keep_groups(keep_groups);
    request.set_layout_generation(generation);
    request.set_attempt(attempt);
    request.set_partition(next.ToString());
    for (const std::string& a : addresses) request.add_server_addresses(a);
    request.set_senders(old.num_servers);
    for (int s : senders) request.add_from_servers(s);
    request.set_bsp_workers(job_.consistency == "bsp" ? target.workers : 0);
    request.set_routing_generation(membership_->routing().generation + 1);
    for (int id : worker_ids) request.add_worker_ids(id);
    std::vector<absl::StatusOr<RescaleShardResponse>> results(everyone.size(), absl::UnknownError("not run"));
    std::vector<std::thread> calls;
    for (size_t i = 0; i < everyone.size(); ++i) {
      if (senders_only && everyone[i].old_rank < 0) continue;
      calls.emplace_back([&, i, request]() mutable {
        const Participant& p = everyone[i];
        request.set_new_rank(p.new_rank);
        results[i] = p.address.empty()
                         ? absl::UnavailableError(absl::StrFormat("server rank %d is not alive", p.new_rank))
                         : admin_->Rescale(p.old_rank >= 0 ? p.old_rank : p.new_rank, p.address, request);
      });
    }
    for (std::thread& t : calls) t.join();
    for (size_t i = 0; i < everyone.size(); ++i) {
      if (senders_only && everyone[i].old_rank < 0) continue;
      if (!results[i].ok()) return results[i].status();
      if (answers != nullptr) answers->push_back(*results[i]);
    }
    return absl::OkStatus();
  };
  std::vector<RescaleShardResponse> sent;
  // Only the worker count changes: every server keeps its groups and rows and switches in place (idempotent, so a
  // failed call is retried before the servers are taken to disagree). Otherwise rows move, and a failure before
  // the switch aborts the rescale with the job unchanged.
  const bool in_place = next.ToString() == partition_->ToString() && target.servers == old.num_servers &&
                        target.remove_servers.empty() && !options_.move_rows_on_worker_change;
  absl::Status status;
  absl::Time installed;
  if (in_place) {
    installed = start;
    for (int attempt = 1;; ++attempt) {
      status = phase(RescaleShardRequest::SWITCH, false, nullptr, /*keep_groups=*/true);
      if (status.ok() || !Retriable(status) || attempt == kFinalAttempts) break;
      absl::SleepFor(absl::Milliseconds(200) * attempt);
    }
  } else {
    status = phase(RescaleShardRequest::SEND, /*senders_only=*/true, &sent);
    if (status.ok()) status = phase(RescaleShardRequest::INSTALL, false, nullptr);
    if (!status.ok()) {
      const absl::Status aborted = phase(RescaleShardRequest::ABORT, false, nullptr);
      if (!aborted.ok()) KLOG(Warning) << "aborting the rescale: " << aborted;
      return absl::Status(status.code(), absl::StrCat("the rescale failed (the job goes on unchanged): ",
                                                      status.message()));
    }
    installed = absl::Now();
    // From here the servers move on one by one: a failure leaves them disagreeing on the layout.
    status = phase(RescaleShardRequest::SWITCH, false, nullptr);
  }
  if (!status.ok()) {
    failed_ = true;
    on_fatal_(absl::InternalError(absl::StrCat(
        "a server failed to switch to the rescaled layout, so the servers disagree on who owns which keys or on "
        "BSP's worker count: ",
        status.message())));
    return absl::InternalError("the rescale failed during the switch");
  }
  ScaleResult result;
  if (verify) {
    result.fingerprint_before = fingerprint_before;
    absl::StatusOr<uint64_t> after = fingerprint(addresses);
    if (!after.ok()) KLOG(Warning) << "rescale " << generation << ": cannot verify: " << after.status();
    result.fingerprint_after = after.ok() ? *after : 0;
    if (after.ok() && *after != fingerprint_before) {
      KLOG(Error) << absl::StrFormat("rescale %d changed the table: fingerprint %016x before, %016x after",
                                     generation, fingerprint_before, *after);
    }
  }
  // The workers' side, right before the layout becomes the job's: a worker that rejoins from then on finds its
  // clock and state (new ranks are refused until the commit).
  if (worker_states != nullptr) {
    clocks_->Resize(target.workers, scale_cut_,
                    absl::AbortedError(absl::StrFormat("the job was rescaled to %d workers (rescale %d): rejoin",
                                                       target.workers, generation)));
    absl::MutexLock lock(&mu_);
    worker_states_ = std::move(*worker_states);
  }
  KESTREL_ASSIGN_OR_RETURN(const uint64_t routing, membership_->CommitScale(next.ToString()));
  partition_ = next;
  job_.partition = next.ToString();
  job_.num_servers = target.servers;
  job_.num_workers = target.workers;
  result.clock = scale_cut_;
  result.layout_generation = generation;
  result.moved = installed - start;
  for (const RescaleShardResponse& r : sent) {
    result.rows_moved += r.rows_sent();
    result.bytes_moved += r.bytes_sent();
  }
  if (const size_t removed = target.remove_servers.size() + target.remove_workers.size(); removed > 0) {
    KLOG(Warning) << "elastic: removed server ranks [" << absl::StrJoin(target.remove_servers, ",")
                  << "] and worker ranks [" << absl::StrJoin(target.remove_workers, ",") << "] (rescale "
                  << generation << ")";
    CountRemovals(removed);
  }
  KLOG(Info) << "rescale " << generation << ": every server serves the layout of " << target.servers
             << " servers (routing generation " << routing << ")";
  return result;
}

absl::StatusOr<std::vector<WorkerState>> PlanEpoch(const std::vector<WorkerState>& states, int64_t cut,
                                                   const std::vector<int>& old_of_new,
                                                   const std::vector<int>& removed) {
  auto is_removed = [&](int w) { return std::find(removed.begin(), removed.end(), w) != removed.end(); };
  int ref = -1;  // a staying worker: they agree on where the cut falls
  for (int w = 0; w < static_cast<int>(states.size()); ++w) {
    if (is_removed(w)) continue;
    const WorkerState& s = states[w];
    if (s.clock() != cut || !s.has_reader() || !s.has_share() || s.share().count() < 1) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "worker %d has not reported where its reader is at clock %d (an older worker binary?): its share of the "
          "epoch cannot be handed on",
          w, cut));
    }
    if (ref == -1) ref = w;
    if (s.epoch() != states[ref].epoch() || s.epoch_start() != states[ref].epoch_start()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "workers %d and %d disagree on the epoch at clock %d (%d and %d)", w, ref, cut, s.epoch(),
          states[ref].epoch()));
    }
  }
  if (ref == -1) return absl::FailedPreconditionError("no worker stays: nobody to hand the epoch to");
  const WorkerState& at = states[ref];
  EpochPlan plan;
  plan.set_epoch(at.epoch());
  plan.set_start_clock(cut);
  std::optional<ReaderPositionProto> reader;  // none at an epoch's start: the next epoch starts afresh
  if (cut != at.epoch_start()) {
    // Mid-epoch: every unread line of the epoch goes to exactly one worker (worker/data/reshard.h), read from
    // the slowest worker's position (every unread line lies beyond it). A removed worker hands on the lines
    // from where its last report says its reader was: under BSP its half-done clock was completed without it.
    std::vector<ShardAssignment> shares;
    std::vector<uint64_t> consumed;
    bool from_start = false;  // some worker's lines start at the epoch's first line
    for (int w = 0; w < static_cast<int>(states.size()); ++w) {
      const WorkerState& s = states[w];
      if (s.has_share() && s.has_reader() && s.share().count() >= 1 && s.epoch() == at.epoch() &&
          s.epoch_start() == at.epoch_start()) {
        ShardAssignment a = AssignmentOf(s.share());
        consumed.push_back(a.CountBelow(s.reader().global_line()));
        shares.push_back(std::move(a));
        if (!reader.has_value() || s.reader().global_line() < reader->global_line()) reader = s.reader();
      } else if (is_removed(w) && !s.has_share() && at.epoch() == 0 && !at.has_plan()) {
        // Removed before it ever reported: it read nothing of the first epoch's plain sharding.
        shares.push_back(PlainShard(w, static_cast<int>(states.size())));
        consumed.push_back(0);
        from_start = true;
      } else {
        return absl::FailedPreconditionError(absl::StrFormat(
            "removed worker %d stopped in epoch %d, the others are in epoch %d: its unread lines cannot be handed on",
            w, s.epoch(), at.epoch()));
      }
    }
    if (from_start) reader = ReaderPositionProto();
    KESTREL_ASSIGN_OR_RETURN(std::vector<ShardAssignment> next, Reshard(shares, consumed, old_of_new));
    for (const ShardAssignment& a : next) *plan.add_shares() = LineShareOf(a);
  }
  // Each new worker's state at the cut as it will report it (a rollback to the checkpoint cut here, then another
  // rescale at that clock, plans from these): its share of the epoch (the plan's, or the new count's modulo at
  // an epoch's start), nothing of it read yet.
  const int new_count = static_cast<int>(old_of_new.size());
  std::vector<WorkerState> out(new_count);
  for (int v = 0; v < new_count; ++v) {
    WorkerState& s = out[v];
    s.set_clock(cut);
    if (reader.has_value()) *s.mutable_reader() = *reader;
    *s.mutable_plan() = plan;
    s.set_epoch(at.epoch());
    s.set_epoch_start(plan.shares_size() > 0 ? at.epoch_start() : cut);
    *s.mutable_share() = plan.shares_size() > 0 ? plan.shares(v) : LineShareOf(PlainShard(v, new_count));
  }
  return out;
}

absl::StatusOr<std::vector<WorkerState>> CheckpointCoordinator::PlanWorkers(const std::vector<int>& old_of_new,
                                                                            const std::vector<int>& removed) {
  std::vector<WorkerState> old;
  {
    absl::MutexLock lock(&mu_);
    old = worker_states_;
  }
  return PlanEpoch(old, scale_cut_, old_of_new, removed);
}

void CheckpointCoordinator::EndRescale(absl::StatusOr<ScaleResult> result) {
  if (!result.ok()) {
    membership_->CancelScale();
    KLOG(Warning) << "rescale failed: " << result.status();
  }
  std::function<void(absl::StatusOr<ScaleResult>)> done;
  {
    absl::MutexLock lock(&mu_);
    done.swap(scale_done_);
    scale_pending_ = false;
  }
  if (scale_cut_ != ClockTable::kNoHold) {
    scale_cut_ = ClockTable::kNoHold;
    // After a failed switch (failed_) the servers disagree on the layout: the workers stay held until the
    // scheduler exits.
    if (!failed_) clocks_->SetHold(cut_);  // the scheduled cut (kNoHold: none)
  }
  if (done) done(std::move(result));
}

bool CheckpointCoordinator::ReReplicate() {
  if (!partition_.has_value() || partition_->replicas() < 2) return false;
  if (syncing_ < 0) {
    if (absl::Now() < next_sync_attempt_) return false;
    const RoutingState routing = membership_->routing();
    const std::vector<std::string> alive = membership_->LiveServerAddresses();
    for (int s : routing.out_of_service) {
      if (!alive[s].empty()) {
        syncing_ = s;
        break;
      }
    }
    if (syncing_ < 0) return false;
    sync_cut_ = clocks_->HoldAtEarliest();
    sync_routing_ = 0;
    KLOG(Info) << "re-replicating onto server " << syncing_ << ": every worker stops at clock " << sync_cut_;
  }
  if (sync_routing_ == 0) {
    if (!clocks_->AllAt(sync_cut_)) return true;
    const absl::Time start = absl::Now();
    const RoutingState state = membership_->routing();
    std::vector<bool> out(job_.num_servers, false);
    for (int s : state.out_of_service) out[s] = true;
    absl::StatusOr<Routing> routing = Routing::Create(*partition_, out);
    const std::vector<std::string> addresses = membership_->LiveServerAddresses();
    absl::Status status = routing.status();
    uint64_t rows = 0;
    for (int j = 0; status.ok() && j < partition_->replicas(); ++j) {
      const int owner = ((syncing_ - j) % job_.num_servers + job_.num_servers) % job_.num_servers;
      const int source = routing->PrimaryOfOwner(owner);
      if (source < 0 || addresses[source].empty() || addresses[syncing_].empty()) {
        status = absl::UnavailableError(absl::StrFormat("no live copy of the ranges of server %d to copy", owner));
        break;
      }
      absl::StatusOr<uint64_t> copied = admin_->CopyGroup(source, addresses[source], owner, syncing_, addresses[syncing_]);
      status = copied.status();
      if (copied.ok()) rows += *copied;
    }
    absl::StatusOr<uint64_t> generation = status.ok() ? membership_->PutBackInService(syncing_) : status;
    if (!generation.ok()) {
      KLOG(Warning) << "re-replicating onto server " << syncing_ << " failed (tried again shortly): "
                    << generation.status();
      next_sync_attempt_ = absl::Now() + 2 * membership_->options().heartbeat_timeout;
      EndReReplication();
      return false;
    }
    sync_routing_ = *generation;
    SchedulerMetrics::Get().rereplications().Increment();
    KLOG(Info) << "server " << syncing_ << " holds synced copies of its ranges (" << rows << " rows copied in "
               << absl::FormatDuration(absl::Now() - start) << ") and serves again: routing generation "
               << sync_routing_;
  }
  if (!membership_->ServersAtRouting(sync_routing_)) return true;
  KLOG(Info) << "every server acts on routing generation " << sync_routing_ << ": the workers go on";
  EndReReplication();
  return false;
}

void CheckpointCoordinator::EndReReplication() {
  syncing_ = -1;
  sync_routing_ = 0;
  clocks_->SetHold(cut_);  // the scheduled cut (kNoHold: none)
}

bool CheckpointCoordinator::Degraded() const { return !membership_->routing().out_of_service.empty(); }

bool CheckpointCoordinator::FailOver() {
  if (!partition_.has_value() || partition_->replicas() < 2) return false;
  int under_replicated = 0;
  const std::vector<int> failed = membership_->FailOver([&](const std::vector<bool>& out_of_service) {
    absl::StatusOr<Routing> routing = Routing::Create(*partition_, out_of_service);
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
                << membership_->routing().generation << "): their ranges are served by their backups; "
                << under_replicated << " of " << partition_->num_ranges() << " key ranges now have fewer than "
                << partition_->replicas() << " copies";
  return true;
}

bool CheckpointCoordinator::TakeCheckpoint(int64_t clock, const std::string& reason) {
  const absl::Time start = absl::Now();
  absl::StatusOr<uint64_t> sequence = layout_.NextSequence();
  if (!sequence.ok()) {
    KLOG(Error) << "checkpoint at clock " << clock << " not taken: " << sequence.status();
    SchedulerMetrics::Get().checkpoints_failed().Increment();
    return false;
  }
  const std::string name = CheckpointLayout::CheckpointName(*sequence);
  const std::vector<std::string> addresses = membership_->LiveServerAddresses();
  std::vector<absl::StatusOr<ShardCheckpoint>> answers(job_.num_servers, absl::UnknownError("not run"));
  {
    std::vector<std::thread> calls;
    for (int s = 0; s < job_.num_servers; ++s) {
      calls.emplace_back([&, s] {
        answers[s] = addresses[s].empty() ? absl::UnavailableError(absl::StrFormat("server %d is not alive", s))
                                          : admin_->Checkpoint(s, addresses[s], name, clock);
      });
    }
    for (std::thread& t : calls) t.join();
  }
  std::vector<ShardCheckpoint> shards;
  uint64_t rows = 0, rows_written = 0, bytes_written = 0;
  for (auto& answer : answers) {
    if (!answer.ok()) {
      KLOG(Warning) << "checkpoint " << name << " at clock " << clock << " abandoned (nothing committed): "
                    << answer.status();
      SchedulerMetrics::Get().checkpoints_failed().Increment();
      return false;
    }
    rows += answer->rows();
    rows_written += answer->rows_written();
    bytes_written += answer->bytes_written();
    shards.push_back(*std::move(answer));
  }
  if (membership_->AnyServerDead()) {  // an answer may come from a replacement that holds none of the rows
    KLOG(Warning) << "checkpoint " << name << " at clock " << clock
                  << " abandoned (nothing committed): a server was lost while it was written";
    SchedulerMetrics::Get().checkpoints_failed().Increment();
    return false;
  }
  CrashPoint("scheduler.checkpoint.shards_written");
  CheckpointManifest manifest;
  manifest.set_format_version(1);
  manifest.set_sequence(*sequence);
  manifest.set_clock(clock);
  manifest.set_job_id(job_.job_id);
  manifest.set_config_fingerprint(job_.config_fingerprint);
  manifest.set_partition(job_.partition);
  manifest.set_num_servers(job_.num_servers);
  manifest.set_num_workers(job_.num_workers);
  manifest.set_consistency(job_.consistency);
  manifest.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  manifest.set_reason(reason);
  {
    const JobLayout layout = membership_->layout();
    manifest.set_layout_generation(layout.generation);
    for (int id : layout.server_ids) manifest.add_server_ids(id);
    for (int id : layout.worker_ids) manifest.add_worker_ids(id);
  }
  {
    absl::MutexLock lock(&mu_);
    for (int w = 0; w < job_.num_workers; ++w) {
      WorkerCheckpoint* entry = manifest.add_workers();
      entry->set_rank(w);
      if (worker_states_[w].clock() == clock) {
        *entry->mutable_state() = worker_states_[w];
      } else {
        entry->mutable_state()->set_clock(clock);  // reader position unknown: the worker re-reads and skips
      }
    }
  }
  absl::Status status = AddShardsToManifest(std::move(shards), job_.num_servers, &manifest);
  if (status.ok()) status = layout_.WriteManifest(manifest);
  CrashPoint("scheduler.checkpoint.manifest_written");
  if (status.ok()) status = layout_.MoveLatest(name);
  if (!status.ok()) {
    KLOG(Warning) << "checkpoint " << name << " at clock " << clock << " abandoned (not committed): " << status;
    SchedulerMetrics::Get().checkpoints_failed().Increment();
    return false;
  }
  CrashPoint("scheduler.checkpoint.committed");
  {
    absl::MutexLock lock(&mu_);
    status_.latest = name;
    status_.latest_clock = clock;
    ++status_.committed;
  }
  SchedulerMetrics::Get().checkpoints_committed().Increment();
  SchedulerMetrics::Get().checkpoint_duration().Observe(absl::ToDoubleSeconds(absl::Now() - start));
  KLOG(Info) << absl::StrFormat(
      "checkpoint %s committed at clock %d (%s): %d rows, %d changed rows (%.1f MB) written, %.3f s", name, clock,
      reason, rows, rows_written, bytes_written / 1e6, absl::ToDoubleSeconds(absl::Now() - start));
  absl::StatusOr<std::vector<std::string>> pruned = layout_.Prune(options_.keep);
  if (!pruned.ok()) KLOG(Warning) << "pruning old checkpoints: " << pruned.status();
  return true;
}

bool CheckpointCoordinator::Restore() {
  std::optional<CheckpointManifest> manifest = resume_from_;
  if (!manifest.has_value() && !options_.dir.empty()) {
    absl::StatusOr<std::optional<CheckpointManifest>> latest = layout_.ReadLatest();
    if (!latest.ok()) {
      failed_ = true;
      on_fatal_(absl::Status(latest.status().code(),
                             absl::StrCat("cannot roll back: ", latest.status().message())));
      return false;
    }
    manifest = *latest;
  }
  const std::string name = manifest ? CheckpointLayout::CheckpointName(manifest->sequence()) : "";
  if (manifest.has_value() && manifest->num_workers() != job_.num_workers) {
    // Written before a worker-count change whose own checkpoint failed: its shares of the data are another
    // count's. Restoring it would read lines twice or skip them.
    failed_ = true;
    on_fatal_(absl::FailedPreconditionError(absl::StrFormat(
        "cannot roll back to %s: it was written by %d workers, the job has %d since a rescale whose checkpoint "
        "failed; restart the job from it with --resume and %d workers",
        name, manifest->num_workers(), job_.num_workers, manifest->num_workers())));
    return false;
  }
  // Every worker rank registered at or after the rollback's generation: older requests are the old timeline.
  const uint64_t generation = rollback_generation_;
  const std::vector<std::string> addresses = membership_->LiveServerAddresses();
  const JobLayout layout = membership_->layout();
  std::vector<absl::Status> results(job_.num_servers);
  {
    std::vector<std::thread> calls;
    for (int s = 0; s < job_.num_servers; ++s) {
      RestoreShardRequest request;
      request.set_name(name);
      request.set_min_worker_generation(generation);
      if (relayout_restore_) {  // the job dropped a server: every server restores into the new layout
        request.set_layout_generation(layout.generation);
        request.set_partition(layout.partition);
        request.set_rank(s);
        request.set_bsp_workers(job_.consistency == "bsp" ? job_.num_workers : 0);
        for (int id : layout.worker_ids) request.add_worker_ids(id);
      }
      calls.emplace_back([&, s, request] {
        results[s] = addresses[s].empty() ? absl::UnavailableError(absl::StrFormat("server %d is not alive", s))
                                          : admin_->Restore(s, addresses[s], request);
      });
    }
    for (std::thread& t : calls) t.join();
  }
  for (const absl::Status& result : results) {
    if (result.ok()) continue;
    if (Retriable(result)) {
      KLOG(Warning) << "rollback: " << result << "; retrying";
      absl::SleepFor(absl::Milliseconds(200));
      return false;
    }
    failed_ = true;
    on_fatal_(absl::Status(result.code(), absl::StrCat("cannot restore checkpoint ", name.empty() ? "(none)" : name,
                                                       ": ", result.message())));
    return false;
  }
  const int64_t clock = manifest ? manifest->clock() : 0;
  clocks_->Reset(clock, absl::AbortedError("the job rolled back to a checkpoint; rejoin"));
  {
    absl::MutexLock lock(&mu_);
    for (WorkerState& state : worker_states_) state = WorkerState();
    if (manifest) {
      for (const WorkerCheckpoint& w : manifest->workers()) {
        if (w.rank() >= 0 && w.rank() < job_.num_workers) worker_states_[w.rank()] = w.state();
      }
    }
    if (!resume_from_) ++status_.rollbacks;
  }
  if (!resume_from_) SchedulerMetrics::Get().rollbacks().Increment();
  resume_from_.reset();
  last_checkpoint_ = absl::Now();
  last_checkpoint_clock_ = clock;
  cut_ = NextScheduledCut(clock - 1);
  clocks_->SetHold(cut_);
  // The final checkpoint restored: every worker was done at it, so the job is finished again.
  const bool finished = clock == finished_clock_;
  {
    absl::MutexLock lock(&mu_);
    status_.final_model_settled = finished;
  }
  relayout_restore_ = false;
  membership_->EndRollback(finished);
  KLOG(Info) << "every server restored " << (name.empty() ? "empty tables (no checkpoint yet)" : name)
             << ": the job continues from clock " << clock << " at generation " << generation;
  return true;
}

}  // namespace kestrel
