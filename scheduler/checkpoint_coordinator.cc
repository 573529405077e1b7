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
    final_attempts_ = 0;
    next_final_attempt_ = absl::InfinitePast();
    syncing_ = -1;  // a rollback restores every server: nothing to re-replicate
    const uint64_t generation = membership_->BeginRollback();
    rollback_generation_ = generation;
    clocks_->SetHold(0);
    const size_t cancelled = clocks_->CancelAll(absl::AbortedError(absl::StrFormat(
        "a parameter server died: the job rolls back to its last checkpoint (generation %d); rejoin", generation)));
    cut_ = ClockTable::kNoHold;
    KLOG(Warning) << "a parameter server died: rolling the job back to its last checkpoint (generation "
                  << generation << ", " << cancelled << " waits aborted); waiting for every server rank to be alive";
  }
  if (membership_->rolling_back()) {
    if (membership_->AllServersAlive()) Restore();
    return;
  }
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

absl::Status CheckpointCoordinator::Scale(ScaleTarget target, absl::Duration join_timeout,
                                          std::function<void(absl::StatusOr<ScaleResult>)> done, bool verify,
                                          int64_t at_clock) {
  const JobLayout layout = membership_->layout();
  KESTREL_ASSIGN_OR_RETURN(const Partition partition, Partition::Parse(layout.partition));
  if (target.servers < partition.replicas()) {
    return absl::InvalidArgumentError(absl::StrFormat("%d servers cannot hold %d copies of every key range",
                                                      target.servers, partition.replicas()));
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
  if (scale_cut_ == ClockTable::kNoHold) {
    if (membership_->state() != JobState::kRunning || membership_->rolling_back()) {
      EndRescale(absl::AbortedError(absl::StrFormat("the job is %s: the rescale was abandoned",
                                                    JobStateName(membership_->state()))));
      return false;
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
    KLOG(Info) << "rescaling to " << target->servers << " servers and " << target->workers
               << " workers: every worker stops at clock " << scale_cut_;
    return true;
  }
  if (membership_->AnyServerDead() || membership_->rolling_back()) {
    EndRescale(absl::AbortedError("a server died while the job was held for a rescale: abandoned"));
    return false;
  }
  if (membership_->state() == JobState::kFinished) {
    EndRescale(absl::FailedPreconditionError("the job finished before the rescale's boundary: nothing to rescale"));
    return false;
  }
  if (!clocks_->AllAt(scale_cut_)) return true;
  const int ranges_per_server = std::max(1, partition_->num_ranges() / partition_->num_servers());
  absl::StatusOr<Partition> next = Partition::Uniform(target->servers, ranges_per_server);
  if (next.ok() && partition_->replicas() > 1) next = next->WithReplicas(partition_->replicas());
  const int old_workers = job_.num_workers;
  // The workers' shares of the rest of the epoch, before anything moves (a failure leaves the job as it was).
  absl::StatusOr<std::vector<WorkerState>> states =
      target->workers != old_workers ? PlanWorkers(target->workers) : std::vector<WorkerState>();
  if (!states.ok()) next = states.status();
  absl::StatusOr<ScaleResult> result =
      next.ok() ? MoveTo(*next, *target, target->workers != old_workers ? &*states : nullptr) : next.status();
  if (!result.ok()) {
    EndRescale(result.status());
    return false;
  }
  // The held workers learn of the new layout by rejoining; they continue from this same clock.
  const size_t cancelled = clocks_->CancelAll(absl::AbortedError(absl::StrFormat(
      "the job was rescaled to %d servers and %d workers (rescale %d): rejoin", target->servers, target->workers,
      result->layout_generation)));
  // A new worker count changes every worker's share of the data: a rollback must not restore the old shares,
  // so the workers stay held until a checkpoint of the new ones is committed (a rollback to an older one is
  // refused by Restore). Server moves need none: a checkpoint of the old layout restores into the new one.
  if (!options_.dir.empty() && target->workers != old_workers) {
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

absl::StatusOr<ScaleResult> CheckpointCoordinator::MoveTo(const Partition& next, ScaleTarget target,
                                                          std::vector<WorkerState>* worker_states) {
  const JobLayout old = membership_->layout();
  const std::vector<std::string> addresses = membership_->TargetServerAddresses();
  const std::vector<std::string> old_addresses = membership_->LiveServerAddresses();
  const int everyone = std::max(old.num_servers, target.servers);
  auto address = [&](int s) { return s < old.num_servers ? old_addresses[s] : addresses[s]; };
  const uint64_t generation = old.generation + 1;
  // Distinct for every attempt (a retry after an abort), across scheduler restarts too.
  const uint64_t attempt = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  bool verify;
  {
    absl::MutexLock lock(&mu_);
    verify = scale_verify_;
  }
  // The full table over servers [0, n).
  auto fingerprint = [&](int n) -> absl::StatusOr<uint64_t> {
    uint64_t sum = 0;
    for (int s = 0; s < n; ++s) {
      KESTREL_ASSIGN_OR_RETURN(const uint64_t f, admin_->Fingerprint(s, address(s)));
      sum += f;
    }
    return sum;
  };
  uint64_t fingerprint_before = 0;
  if (verify) {
    KESTREL_ASSIGN_OR_RETURN(fingerprint_before, fingerprint(old.num_servers));
  }
  const absl::Time start = absl::Now();
  // One phase on servers [0, n), concurrently; the first failure.
  auto phase = [&](RescaleShardRequest::Phase which, int n,
                   std::vector<RescaleShardResponse>* answers) -> absl::Status {
    RescaleShardRequest request;
    request.set_phase(which);
    request.set_layout_generation(generation);
    request.set_attempt(attempt);
    request.set_partition(next.ToString());
    for (const std::string& a : addresses) request.add_server_addresses(a);
    request.set_senders(old.num_servers);
    request.set_bsp_workers(job_.consistency == "bsp" ? target.workers : 0);
    request.set_routing_generation(membership_->routing().generation + 1);
    std::vector<absl::StatusOr<RescaleShardResponse>> results(n, absl::UnknownError("not run"));
    std::vector<std::thread> calls;
    for (int s = 0; s < n; ++s) {
      calls.emplace_back([&, s] {
        results[s] = address(s).empty() ? absl::UnavailableError(absl::StrFormat("server %d is not alive", s))
                                        : admin_->Rescale(s, address(s), request);
      });
    }
    for (std::thread& t : calls) t.join();
    for (auto& r : results) {
      if (!r.ok()) return r.status();
      if (answers != nullptr) answers->push_back(*r);
    }
    return absl::OkStatus();
  };
  std::vector<RescaleShardResponse> sent;
  absl::Status status = phase(RescaleShardRequest::SEND, old.num_servers, &sent);
  if (status.ok()) status = phase(RescaleShardRequest::INSTALL, everyone, nullptr);
  if (!status.ok()) {
    const absl::Status aborted = phase(RescaleShardRequest::ABORT, everyone, nullptr);
    if (!aborted.ok()) KLOG(Warning) << "aborting the rescale: " << aborted;
    return absl::Status(status.code(), absl::StrCat("the rescale failed (the job goes on unchanged): ",
                                                    status.message()));
  }
  const absl::Time installed = absl::Now();
  // From here the servers move on one by one: a failure leaves them disagreeing on the layout.
  status = phase(RescaleShardRequest::SWITCH, everyone, nullptr);
  if (!status.ok()) {
    failed_ = true;
    on_fatal_(absl::InternalError(absl::StrCat(
        "a server failed to switch to the rescaled layout, so the servers disagree on who owns which keys: ",
        status.message())));
    return absl::InternalError("the rescale failed during the switch");
  }
  ScaleResult result;
  if (verify) {
    result.fingerprint_before = fingerprint_before;
    absl::StatusOr<uint64_t> after = fingerprint(target.servers);
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
  KLOG(Info) << "rescale " << generation << ": every server serves the layout of " << target.servers
             << " servers (routing generation " << routing << ")";
  return result;
}

absl::StatusOr<std::vector<WorkerState>> CheckpointCoordinator::PlanWorkers(int new_count) {
  std::vector<WorkerState> old;
  {
    absl::MutexLock lock(&mu_);
    old = worker_states_;
  }
  const int64_t cut = scale_cut_;
  for (size_t w = 0; w < old.size(); ++w) {
    const WorkerState& s = old[w];
    if (s.clock() != cut || !s.has_reader() || !s.has_share() || s.share().count() < 1) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "worker %d has not reported where its reader is at clock %d (an older worker binary?): its share of the "
          "epoch cannot be handed on",
          w, cut));
    }
    if (s.epoch() != old[0].epoch() || s.epoch_start() != old[0].epoch_start()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "workers %d and 0 disagree on the epoch at clock %d (%d and %d)", w, cut, s.epoch(), old[0].epoch()));
    }
  }
  EpochPlan plan;
  plan.set_epoch(old[0].epoch());
  plan.set_start_clock(cut);
  std::optional<ReaderPositionProto> reader;  // none at an epoch's start: the next epoch starts afresh
  if (cut != old[0].epoch_start()) {
    // Mid-epoch: every unread line of the epoch goes to exactly one worker (worker/data/reshard.h), read from
    // the slowest worker's position (every unread line lies beyond it).
    std::vector<ShardAssignment> shares;
    std::vector<uint64_t> consumed;
    for (const WorkerState& s : old) {
      ShardAssignment a = AssignmentOf(s.share());
      consumed.push_back(a.CountBelow(s.reader().global_line()));
      shares.push_back(std::move(a));
      if (!reader.has_value() || s.reader().global_line() < reader->global_line()) reader = s.reader();
    }
    KESTREL_ASSIGN_OR_RETURN(std::vector<ShardAssignment> next, Reshard(shares, consumed, new_count));
    for (const ShardAssignment& a : next) *plan.add_shares() = LineShareOf(a);
  }
  std::vector<WorkerState> out(new_count);
  for (WorkerState& s : out) {
    s.set_clock(cut);
    if (reader.has_value()) *s.mutable_reader() = *reader;
    *s.mutable_plan() = plan;
  }
  return out;
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
  manifest.set_layout_generation(membership_->layout().generation);
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
  std::vector<absl::Status> results(job_.num_servers);
  {
    std::vector<std::thread> calls;
    for (int s = 0; s < job_.num_servers; ++s) {
      calls.emplace_back([&, s] {
        results[s] = addresses[s].empty() ? absl::UnavailableError(absl::StrFormat("server %d is not alive", s))
                                          : admin_->Restore(s, addresses[s], name, generation);
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
  membership_->EndRollback(finished);
  KLOG(Info) << "every server restored " << (name.empty() ? "empty tables (no checkpoint yet)" : name)
             << ": the job continues from clock " << clock << " at generation " << generation;
  return true;
}

}  // namespace kestrel
