#include "scheduler/checkpointer.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/checkpoint_layout.h"
#include "common/fault_injection.h"
#include "common/logging.h"
#include "scheduler/each_server.h"
#include "scheduler/scheduler_metrics.h"

namespace kestrel {

Checkpointer::Checkpointer(JobContext* ctx) : ctx_(ctx) {}

absl::StatusOr<std::optional<CheckpointManifest>> Checkpointer::Open() {
  if (ctx_->options.keep < 1) {
    return absl::InvalidArgumentError("must keep at least one checkpoint (--keep_checkpoints)");
  }
  if (ctx_->options.every_clocks < 0) return absl::InvalidArgumentError("--checkpoint_every_clocks must be >= 0");
  const std::vector<int64_t>& at = ctx_->options.at_clocks;
  if (at.size() > CheckpointOptions::kMaxCheckpointAtClocks) {
    return absl::InvalidArgumentError(absl::StrCat("--checkpoint_at_clocks lists ", at.size(), " clocks, more than ",
                                                   CheckpointOptions::kMaxCheckpointAtClocks));
  }
  for (size_t i = 0; i < at.size(); ++i) {
    if (at[i] <= 0 || (i > 0 && at[i] <= at[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat("--checkpoint_at_clocks must ascend from above 0 (clock ", at[i],
                                                     " at position ", i, ")"));
    }
  }
  if (ctx_->options.resume && ctx_->options.dir.empty()) {
    return absl::InvalidArgumentError("--resume needs --checkpoint_dir");
  }
  last_checkpoint_ = absl::Now();
  if (!ctx_->options.dir.empty()) {
    absl::StatusOr<std::optional<CheckpointManifest>> latest = ctx_->layout.ReadLatest();
    if (!latest.ok()) {
      return absl::Status(latest.status().code(), absl::StrCat("cannot use checkpoint directory ", ctx_->options.dir,
                                                               ": ", latest.status().message()));
    }
    if (latest->has_value()) {
      const CheckpointManifest& m = **latest;
      const std::string name = CheckpointLayout::CheckpointName(m.sequence());
      if (!ctx_->options.resume) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "checkpoint directory %s already holds checkpoints (latest %s at clock %d): pass --resume to continue "
            "from it, or use an empty directory",
            ctx_->options.dir, name, m.clock()));
      }
      if (m.num_workers() != ctx_->job.num_workers) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "checkpoint %s was written by %d workers; this job has %d (each worker's part of the data and reader position "
            "depend on the worker count)",
            name, m.num_workers(), ctx_->job.num_workers));
      }
      if (m.job_id() != ctx_->job.job_id) {
        return absl::FailedPreconditionError(
            absl::StrFormat("checkpoint %s belongs to job '%s', not '%s'", name, m.job_id(), ctx_->job.job_id));
      }
      KLOG(Info) << "resuming from checkpoint " << name << " at clock " << m.clock() << " (written by "
                 << m.num_servers() << " servers; this job has " << ctx_->job.num_servers << ")";
      {
        absl::MutexLock lock(&ctx_->mu);
        ctx_->status.latest = name;
        ctx_->status.latest_clock = m.clock();
      }
      last_checkpoint_clock_ = m.clock();
      return m;
    } else if (ctx_->options.resume) {
      KLOG(Info) << "no checkpoint in " << ctx_->options.dir << ": starting a new job";
    }
  }
  return std::nullopt;
}

absl::StatusOr<int64_t> Checkpointer::Request() {
  if (ctx_->options.dir.empty()) {
    return absl::FailedPreconditionError("this scheduler was started without --checkpoint_dir");
  }
  if (ctx_->membership->state() != JobState::kRunning) {
    return absl::FailedPreconditionError(absl::StrCat("the job is ", JobStateName(ctx_->membership->state()),
                                                      ", not running: no checkpoint can be cut now"));
  }
  const int64_t cut = ctx_->clocks->HoldAtEarliest();
  absl::MutexLock lock(&mu_);
  requested_ = true;
  return cut;
}

int64_t Checkpointer::NextScheduledCut(int64_t permitted) const {
  const int64_t every = ctx_->options.every_clocks;
  const int64_t periodic = every <= 0 ? ClockTable::kNoHold : ((permitted + 1) / every + 1) * every;
  const std::vector<int64_t>& at = ctx_->options.at_clocks;
  const auto next = std::upper_bound(at.begin(), at.end(), permitted + 1);  // as the periodic one: past permitted + 1
  return next == at.end() ? periodic : std::min(periodic, *next);
}

bool Checkpointer::AtListedClock(int64_t clock) const {
  return std::binary_search(ctx_->options.at_clocks.begin(), ctx_->options.at_clocks.end(), clock);
}

void Checkpointer::CutScheduled() {
  if (ctx_->options.dir.empty()) return;
  Poll();
  if (pending_ != nullptr) return;  // the last cut is still being written: the workers wait at the next one
  bool requested;
  {
    absl::MutexLock lock(&mu_);
    requested = requested_;
  }
  const bool timed =
      ctx_->options.every > absl::ZeroDuration() && absl::Now() - last_checkpoint_ >= ctx_->options.every;
  if (timed) ctx_->clocks->HoldAtEarliest();
  ctx_->cut = ctx_->clocks->hold();
  if (ctx_->cut == ClockTable::kNoHold || !ctx_->clocks->AllAt(ctx_->cut)) return;
  const std::string reason = requested               ? "requested"
                             : timed                   ? absl::StrCat("every ", absl::FormatDuration(ctx_->options.every))
                             : AtListedClock(ctx_->cut) ? "a listed clock"
                                                       : absl::StrCat("every ", ctx_->options.every_clocks, " clocks");
  if (ctx_->cut != last_checkpoint_clock_ && Degraded()) {
    Abandoned(absl::StrCat("(", reason, ")"), ctx_->cut,
              absl::UnavailableError("skipped: a server is out of service (failed over); checkpoints resume once "
                                     "the job is fully replicated again or rolls back"));
  } else if (ctx_->cut != last_checkpoint_clock_) {
    const absl::Time held = absl::Now();
    if (TakeCheckpoint(ctx_->cut, reason, /*wait=*/!ctx_->options.copy_on_write)) {
      absl::MutexLock lock(&mu_);
      requested_ = false;
    }
    SchedulerMetrics::Get().checkpoint_hold().Observe(absl::ToDoubleSeconds(absl::Now() - held));
  }
  last_checkpoint_ = absl::Now();
  last_checkpoint_clock_ = ctx_->cut;
  ctx_->cut = NextScheduledCut(ctx_->cut - 1);
  ctx_->clocks->SetHold(ctx_->cut);
}

void Checkpointer::SettleFinalModel() {
  FinishPending();  // a scheduled cut at the last clock may be the final checkpoint
  const int64_t clock = ctx_->clocks->MinClock();
  finished_clock_ = clock;
  bool settled, committed;
  {
    absl::MutexLock lock(&ctx_->mu);
    settled = ctx_->status.final_model_settled;
    committed = !ctx_->status.latest.empty() && ctx_->status.latest_clock == clock;
  }
  if (settled) return;
  if (Degraded() && !ctx_->options.dir.empty() && ctx_->options.final_checkpoint && !committed) {
    KLOG(Warning) << "no final checkpoint: a server is out of service (failed over), so its ranges' written copy "
                     "would be stale; the model of clock "
                  << clock << " is only in the servers' memory";
  }
  // Every worker waits for this before leaving, so the servers are all still there.
  if (!ctx_->options.dir.empty() && ctx_->options.final_checkpoint && !committed && !Degraded()) {
    if (!ctx_->clocks->AllAt(clock) || absl::Now() < next_final_attempt_) return;
    ++final_attempts_;
    if (TakeCheckpoint(clock, "final", /*wait=*/true)) {
      last_checkpoint_clock_ = clock;
    } else if (final_attempts_ < kFinalAttempts) {
      // Far enough apart that a server which died meanwhile is declared dead (and rolled back) first.
      next_final_attempt_ = absl::Now() + 2 * ctx_->membership->options().heartbeat_timeout;
      return;
    } else {
      KLOG(Error) << "the final checkpoint failed " << final_attempts_
                  << " times: the workers leave, and the model of clock " << clock << " is only in the servers' memory";
      SchedulerMetrics::Get().final_checkpoint_failed().Set(1);
      absl::MutexLock lock(&ctx_->mu);
      ctx_->status.final_checkpoint_failed = true;
    }
  }
  absl::MutexLock lock(&ctx_->mu);
  ctx_->status.final_model_settled = true;
}

void Checkpointer::Abandoned(absl::string_view name, int64_t clock, const absl::Status& why) {
  KLOG(Warning) << "checkpoint " << name << " at clock " << clock << " abandoned (nothing committed): " << why;
  SchedulerMetrics::Get().checkpoints_failed().Increment();
  SchedulerMetrics::Get().checkpoint_failures(why.code()).Increment();
  absl::MutexLock lock(&ctx_->mu);
  ++ctx_->status.failed;
  ctx_->status.last_failure = absl::StrCat(name, " at clock ", clock, ": ", why.ToString());
}

bool Checkpointer::Degraded() const { return !ctx_->membership->routing().out_of_service.empty(); }

struct Checkpointer::Pending {
  std::string name;
  int64_t clock = 0;
  std::string reason;
  absl::Time start;
  CheckpointManifest manifest;  // everything but the servers' parts
  std::vector<absl::StatusOr<ShardCheckpoint>> answers;  // by rank, once done
  std::thread waiter;            // copy-on-write: collects the written parts
  std::atomic<bool> done{false};

  ~Pending() {
    if (waiter.joinable()) waiter.join();
  }
};

Checkpointer::~Checkpointer() {
  // Waiters still collecting written parts end now rather than at the admin deadline (a hung server).
  if (pending_ != nullptr || !abandoned_.empty()) ctx_->admin->CancelAwaits();
}

bool Checkpointer::TakeCheckpoint(int64_t clock, const std::string& reason, bool wait) {
  FinishPending();  // the previous copy-on-write checkpoint commits (or fails) first
  if (!Cut(clock, reason)) return false;
  if (!wait) return true;
  return Commit();
}

bool Checkpointer::Cut(int64_t clock, const std::string& reason) {
  const absl::Time start = absl::Now();
  absl::StatusOr<uint64_t> sequence = ctx_->layout.NextSequence();
  if (!sequence.ok()) {
    Abandoned(absl::StrCat("(", reason, ")"), clock, sequence.status());
    return false;
  }
  // An abandoned attempt's directory may not exist yet (a server still writing it): never reuse its name.
  sequence = std::max(*sequence, last_sequence_ + 1);
  last_sequence_ = *sequence;
  const std::string name = CheckpointLayout::CheckpointName(*sequence);
  const bool copy_on_write = ctx_->options.copy_on_write;
  std::vector<std::string> addresses = ctx_->membership->LiveServerAddresses();
  addresses.resize(ctx_->job.num_servers);  // the job's ranks (a rescale may have more registered)
  std::vector<absl::StatusOr<ShardCheckpoint>> answers = OnEachServer<absl::StatusOr<ShardCheckpoint>>(
      addresses, [&](int s, const std::string& address) {
        return ctx_->admin->Checkpoint(s, address, name, clock, copy_on_write);
      });
  for (auto& answer : answers) {
    if (!answer.ok()) {
      // Servers that did cut write their part anyway (their stores then hold it); it is never committed.
      Abandoned(name, clock, answer.status());
      return false;
    }
  }
  auto pending = std::make_unique<Pending>();
  pending->name = name;
  pending->clock = clock;
  pending->reason = reason;
  pending->start = start;
  pending->manifest.set_format_version(1);
  pending->manifest.set_sequence(*sequence);
  pending->manifest.set_clock(clock);
  pending->manifest.set_job_id(ctx_->job.job_id);
  pending->manifest.set_config_fingerprint(ctx_->job.config_fingerprint);
  pending->manifest.set_partition(ctx_->job.partition);
  pending->manifest.set_num_servers(ctx_->job.num_servers);
  pending->manifest.set_num_workers(ctx_->job.num_workers);
  pending->manifest.set_consistency(ctx_->job.consistency.mode);
  pending->manifest.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  pending->manifest.set_reason(reason);
  {
    const JobLayout layout = ctx_->membership->layout();
    pending->manifest.set_layout_generation(layout.generation);
    for (int id : layout.server_ids) pending->manifest.add_server_ids(id);
    for (int id : layout.worker_ids) pending->manifest.add_worker_ids(id);
  }
  {
    absl::MutexLock lock(&ctx_->mu);
    for (int w = 0; w < ctx_->job.num_workers; ++w) {
      WorkerCheckpoint* entry = pending->manifest.add_workers();
      entry->set_rank(w);
      if (ctx_->worker_states[w].clock() == clock) {
        *entry->mutable_state() = ctx_->worker_states[w];
      } else {
        entry->mutable_state()->set_clock(clock);  // reader position unknown: the worker re-reads and skips
      }
    }
  }
  if (!copy_on_write) {
    pending->answers = std::move(answers);
    pending->done = true;
  } else {
    pending->waiter = std::thread([this, p = pending.get(), addresses] {
      p->answers = OnEachServer<absl::StatusOr<ShardCheckpoint>>(addresses, [&](int s, const std::string& address) {
        return ctx_->admin->AwaitCheckpoint(s, address, p->name);
      });
      p->done = true;
    });
  }
  pending_ = std::move(pending);
  return true;
}

void Checkpointer::Poll() {
  for (auto it = abandoned_.begin(); it != abandoned_.end();) {
    it = (*it)->done ? abandoned_.erase(it) : it + 1;  // its waiter is done: joined at once
  }
  if (pending_ != nullptr && pending_->done) Commit();
}

void Checkpointer::FinishPending() {
  if (pending_ != nullptr) Commit();
}

void Checkpointer::AbandonPending() {
  if (pending_ == nullptr) return;
  Abandoned(pending_->name, pending_->clock, absl::AbortedError("the job rolls back while it is written"));
  abandoned_.push_back(std::move(pending_));
  // The last checkpoint is the last committed one again: the rollback restores it (a removal's reads it: Rescaler).
  absl::MutexLock lock(&ctx_->mu);
  last_checkpoint_clock_ = ctx_->status.latest_clock;
}

bool Checkpointer::Commit() {
  std::unique_ptr<Pending> p = std::move(pending_);
  if (p->waiter.joinable()) p->waiter.join();
  const std::string& name = p->name;
  const int64_t clock = p->clock;
  const std::string& reason = p->reason;
  const absl::Time start = p->start;
  CheckpointManifest& manifest = p->manifest;
  std::vector<ShardCheckpoint> shards;
  uint64_t rows = 0, rows_written = 0, bytes_written = 0;
  for (auto& answer : p->answers) {
    if (!answer.ok()) {
      Abandoned(name, clock, answer.status());
      return false;
    }
    rows += answer->rows();
    rows_written += answer->rows_written();
    bytes_written += answer->bytes_written();
    shards.push_back(*std::move(answer));
  }
  if (ctx_->membership->AnyServerDead()) {  // an answer may come from a replacement that holds none of the rows
    Abandoned(name, clock, absl::UnavailableError("a server was lost while it was written"));
    return false;
  }
  CrashPoint("scheduler.checkpoint.shards_written");
  // The servers of the cut: a rescale may have changed the count since (its rows restore into any layout).
  absl::Status status = AddShardsToManifest(std::move(shards), manifest.num_servers(), &manifest);
  if (status.ok()) status = ctx_->layout.WriteManifest(manifest);
  CrashPoint("scheduler.checkpoint.manifest_written");
  if (status.ok()) status = ctx_->layout.MoveLatest(name);
  if (!status.ok()) {
    Abandoned(name, clock, status);
    return false;
  }
  CrashPoint("scheduler.checkpoint.committed");
  {
    absl::MutexLock lock(&ctx_->mu);
    ctx_->status.latest = name;
    ctx_->status.latest_clock = clock;
    ++ctx_->status.committed;
  }
  SchedulerMetrics::Get().checkpoints_committed().Increment();
  SchedulerMetrics::Get().checkpoint_duration().Observe(absl::ToDoubleSeconds(absl::Now() - start));
  KLOG(Info) << absl::StrFormat(
      "checkpoint %s committed at clock %d (%s): %d rows, %d changed rows (%.1f MB) written, %.3f s", name, clock,
      reason, rows, rows_written, bytes_written / 1e6, absl::ToDoubleSeconds(absl::Now() - start));
  absl::StatusOr<std::vector<std::string>> pruned =
      ctx_->layout.Prune(ctx_->options.keep, [this](const CheckpointManifest& m) { return AtListedClock(m.clock()); });
  if (!pruned.ok()) KLOG(Warning) << "pruning old checkpoints: " << pruned.status();
  return true;
}

void Checkpointer::CutRescaled(int64_t clock) {
  if (ctx_->options.dir.empty()) return;
  for (int attempt = 1;; ++attempt) {
    // Copy-on-write: the workers go on once every server cut it; the write commits as the scheduled ones do.
    if (TakeCheckpoint(clock, "rescale", /*wait=*/!ctx_->options.copy_on_write)) {
      last_checkpoint_clock_ = clock;
      break;
    }
    if (attempt == kFinalAttempts) {
      KLOG(Error) << "no checkpoint of the new worker count after " << attempt
                  << " attempts: a rollback before the next one would be refused";
      break;
    }
    absl::SleepFor(2 * ctx_->membership->options().heartbeat_timeout);
  }
}

void Checkpointer::RestartAt(int64_t clock) {
  last_checkpoint_ = absl::Now();
  last_checkpoint_clock_ = clock;
  ctx_->cut = NextScheduledCut(clock - 1);
  ctx_->clocks->SetHold(ctx_->cut);
}

void Checkpointer::ForgetFinalAttempts() {
  final_attempts_ = 0;
  next_final_attempt_ = absl::InfinitePast();
}

}  // namespace kestrel
