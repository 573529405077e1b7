#include "scheduler/rescaler.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/retry.h"
#include "common/logging.h"
#include "common/status.h"
#include "scheduler/epoch_plan.h"
#include "scheduler/rescale_layout.h"

namespace kestrel {
namespace {

// Whether `target` removes worker rank `w`.
bool Removes(const ScaleTarget& target, int w) {
  return std::find(target.remove_workers.begin(), target.remove_workers.end(), w) != target.remove_workers.end();
}

}  // namespace

Rescaler::Rescaler(JobContext* ctx, Checkpointer* checkpointer, std::function<void()> wake,
                   std::function<void(const std::string& why)> roll_back)
    : ctx_(ctx), checkpointer_(checkpointer), wake_(std::move(wake)), roll_back_(std::move(roll_back)) {}

absl::Status Rescaler::Scale(ScaleTarget target, absl::Duration join_timeout,
                             std::function<void(absl::StatusOr<ScaleResult>)> done, bool verify, int64_t at_clock) {
  const JobLayout layout = ctx_->membership->layout();
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
  {
    // Under the lock the controller thread reads them with, so it never sees the rescale without them.
    absl::MutexLock lock(&mu_);
    if (scale_pending_) return absl::FailedPreconditionError("a rescale is in progress");
    KESTREL_RETURN_IF_ERROR(ctx_->membership->BeginScale(target));
    scale_pending_ = true;
    scale_verify_ = verify;
    scale_at_ = std::max<int64_t>(at_clock, 0);
    scale_done_ = std::move(done);
    scale_deadline_ = absl::Now() + join_timeout;
  }
  // The job stops at the asked-for boundary even while the new ranks start (lifted when the rescale ends).
  if (at_clock > 0) ctx_->clocks->ReserveHoldAt(at_clock);
  wake_();
  return absl::OkStatus();
}

void Rescaler::RemoveDead() {
  if (ctx_->options.elastic_timeout <= absl::ZeroDuration() || absl::Now() < ctx_->next_removal) return;
  if (ctx_->membership->pending_scale().has_value() || scale_cut_ != ClockTable::kNoHold || ctx_->syncing >= 0) return;
  const JobState state = ctx_->membership->state();
  if (state != JobState::kRunning && state != JobState::kRecovering) return;
  const DeadMembers dead = ctx_->membership->DeadFor(ctx_->options.elastic_timeout, MonotonicNow());
  if (dead.empty()) return;
  // Another member dead but not for long enough yet holds the others back too (a BSP worker blocks the clock):
  // wait, and remove them together, rather than hold the job at a boundary it cannot reach.
  const DeadMembers all_dead = ctx_->membership->DeadFor(absl::ZeroDuration(), MonotonicNow());
  if (all_dead.servers.size() != dead.servers.size() || all_dead.workers.size() != dead.workers.size()) return;
  // A dead server still in service rolls the job back (DropDeadServers); one failed over is removed live.
  const RoutingState routing = ctx_->membership->routing();
  for (int s : dead.servers) {
    if (std::find(routing.out_of_service.begin(), routing.out_of_service.end(), s) == routing.out_of_service.end()) {
      return;
    }
  }
  const absl::Duration retry = ctx_->RemovalRetry();
  const int servers = ctx_->job.num_servers - static_cast<int>(dead.servers.size());
  const int workers = ctx_->job.num_workers - static_cast<int>(dead.workers.size());
  if (workers < 1 || servers < std::max(1, ctx_->partition->replicas())) {
    KLOG(Warning) << "elastic: " << dead.servers.size() << " servers and " << dead.workers.size()
                  << " workers are dead, but removing them would leave " << servers << " servers and " << workers
                  << " workers (the job needs a worker, and a server per copy of each range): waiting for them";
    ctx_->next_removal = absl::Now() + retry;
    return;
  }
  KLOG(Warning) << "elastic: removing server ranks [" << absl::StrJoin(dead.servers, ",") << "] and worker ranks ["
                << absl::StrJoin(dead.workers, ",") << "], dead for more than "
                << absl::FormatDuration(ctx_->options.elastic_timeout);
  const absl::Status started = Scale(
      ScaleTarget{servers, workers, dead.servers, dead.workers}, absl::ZeroDuration(),
      [this, retry](absl::StatusOr<ScaleResult> result) {  // on this thread (EndRescale)
        if (!result.ok()) {
          KLOG(Warning) << "elastic: the removal failed (tried again in " << absl::FormatDuration(retry)
                        << "): " << result.status();
          ctx_->next_removal = absl::Now() + retry;
        }
      });
  if (!started.ok()) {
    KLOG(Warning) << "elastic: cannot remove them now: " << started;
    ctx_->next_removal = absl::Now() + retry;
  }
}

bool Rescaler::Drive() {
  const std::optional<ScaleTarget> target = ctx_->membership->pending_scale();
  if (!target.has_value()) return false;
  const JobState state = ctx_->membership->state();
  if (scale_cut_ == ClockTable::kNoHold) return StartHold(*target, state);
  switch (CheckHeld(*target, state)) {
    case Held::kEnded:
      return false;
    case Held::kWaiting:
      return true;
    case Held::kReady:
      break;
  }
  RescaleAtCut(*target);
  return false;
}

bool Rescaler::StartHold(const ScaleTarget& target, JobState state) {
  // Removing dead members is how an elastic job recovers: it goes on while the job waits for them.
  const bool removes = !target.remove_servers.empty() || !target.remove_workers.empty();
  if (!(state == JobState::kRunning || (removes && state == JobState::kRecovering)) ||
      ctx_->membership->rolling_back()) {
    EndRescale(absl::AbortedError(absl::StrFormat("the job is %s: the rescale was abandoned",
                                                  JobStateName(ctx_->membership->state()))));
    return false;
  }
  for (auto [list, role] : {std::make_pair(&target.remove_servers, Role::kServer),
                            std::make_pair(&target.remove_workers, Role::kWorker)}) {
    for (int r : *list) {
      if (ctx_->membership->Alive(role, r)) {
        EndRescale(absl::AbortedError(absl::StrFormat(
            "%s rank %d came back before the job was held: it is not removed", RoleName(role), r)));
        return false;
      }
    }
  }
  if (!ctx_->membership->ScaleReady()) {
    absl::Time deadline;
    {
      absl::MutexLock lock(&mu_);
      deadline = scale_deadline_;
    }
    if (absl::Now() < deadline) return false;  // the job runs on while the new ranks start
    EndRescale(absl::DeadlineExceededError(absl::StrFormat(
        "the new ranks of a rescale to %d servers and %d workers did not all register in time: start them first",
        target.servers, target.workers)));
    return false;
  }
  int64_t at;
  {
    absl::MutexLock lock(&mu_);
    at = scale_at_;
  }
  // A checkpoint scheduled before the asked-for boundary is cut first (the workers cannot pass it meanwhile).
  if (at > 0 && ctx_->clocks->hold() < at && ctx_->clocks->MaxPermitted() < at) return false;
  scale_start_ = absl::Now();
  removed_at_.clear();
  const bool servers_hold = ctx_->clocks->lease_clocks() > 0 && ctx_->job.consistency.mode != CONSISTENCY_ASP;
  if (at > 0) {
    if (!ctx_->clocks->HoldAt(at)) {
      EndRescale(absl::FailedPreconditionError(absl::StrFormat(
          "the job passed clock %d before the new ranks registered: the rescale was not done", at)));
      return false;
    }
    scale_cut_ = at;
  } else if (servers_hold) {
    if (!HoldAtServers(target)) return false;
  } else {
    scale_cut_ = ctx_->clocks->HoldAtEarliest();
  }
  if (removed_at_.empty()) {
    for (int w : target.remove_workers) removed_at_.push_back(ctx_->clocks->ClockOf(w));
  }
  KLOG(Info) << "rescaling to " << target.servers << " servers and " << target.workers << " workers"
             << (removes ? absl::StrCat(" (removing server ranks [", absl::StrJoin(target.remove_servers, ","),
                                        "] and worker ranks [", absl::StrJoin(target.remove_workers, ","), "])")
                         : "")
             << ": every worker stops at clock " << scale_cut_;
  return true;
}

bool Rescaler::HoldAtServers(const ScaleTarget& target) {
  const bool removal = !target.remove_workers.empty();
  const std::string removing = absl::StrFormat("removing workers [%s]", absl::StrJoin(target.remove_workers, ","));
  const ConsistencyPolicy& policy = ctx_->job.consistency;
  const int64_t staleness = policy.bsp() ? 0 : policy.staleness;
  RescaleShardRequest ask;
  ask.set_phase(RescaleShardRequest::FRONTIER);
  ask.set_layout_generation(ctx_->membership->layout().generation + 1);
  if (removal) {
    for (int w : target.remove_workers) ask.add_removed_workers(w);
  } else {
    for (int w = 0; w < ctx_->job.num_workers; ++w) ask.add_removed_workers(w);
  }
  std::vector<RescaleShardResponse> answers;
  if (absl::Status asked = OnEveryServer(ask, &answers); !asked.ok() || answers.empty()) {
    EndRescale(absl::UnavailableError(absl::StrCat("cannot ask the servers where the workers' pushes end: ",
                                                   asked.ok() ? "no server is alive" : asked.message())));
    return false;
  }
  int64_t low = std::numeric_limits<int64_t>::max(), high = -1;
  for (const RescaleShardResponse& a : answers) {
    low = std::min(low, a.frontier());
    high = std::max(high, a.frontier_high());
  }
  // Removing: the others stop where the dead ones block them (BSP reads of clock low + 1 wait for its clock
  // low, SSP(s) reads s clocks later). Otherwise the next boundary the furthest worker reaches: it may be
  // computing clock `high` now, and push it before the hold lands. A scheduled checkpoint's hold comes first.
  const int64_t cut = std::min(removal ? low + staleness + 1 : high + 2, ctx_->clocks->hold());
  std::string why;
  if (removal && policy.bsp() && high > low) {
    why = absl::StrFormat("a removed worker died in the middle of clock %d's pushes, which some tables apply with "
                          "its part",
                          low);
  }
  for (int w = 0; w < ctx_->job.num_workers && why.empty(); ++w) {
    if (!Removes(target, w) && ctx_->clocks->ClockOf(w) > cut) {
      why = absl::StrFormat("worker %d passed clock %d, where the removed workers' pushes end", w, cut);
    }
  }
  if (!why.empty()) {  // only when removing: no other worker can be past `cut`
    EndRescale(absl::AbortedError(absl::StrCat(
        removing, ": ", why, "; the job rolls back to its last checkpoint, and they are removed from there")));
    roll_back_(removing);
    return false;
  }
  ctx_->clocks->HoldAtRevoking(cut);
  scale_cut_ = cut;
  reads_held_ = true;
  RescaleShardRequest hold;
  hold.set_phase(RescaleShardRequest::HOLD);
  hold.set_layout_generation(ask.layout_generation());
  hold.set_clock(cut);
  hold.set_hold_reads_from(std::max<int64_t>(0, cut - staleness));
  if (absl::Status held = OnEveryServer(hold, nullptr); !held.ok()) {
    EndRescale(absl::Status(held.code(), absl::StrCat("holding the servers' reads at clock ", cut, ": ",
                                                      held.message())));
    return false;
  }
  if (removal) {
    removed_at_.assign(target.remove_workers.size(), low);
    KLOG(Info) << removing << ": their pushes end at clock " << low << "; the servers hold every read from clock "
               << cut;
  }
  return true;
}

Rescaler::Held Rescaler::CheckHeld(const ScaleTarget& target, JobState state) {
  if (ctx_->membership->AnyServerDead() || ctx_->membership->rolling_back()) {
    EndRescale(absl::AbortedError("a server died while the job was held for a rescale: abandoned"));
    return Held::kEnded;
  }
  if (state == JobState::kFinished) {
    EndRescale(absl::FailedPreconditionError("the job finished before the rescale's boundary: nothing to rescale"));
    return Held::kEnded;
  }
  // Every worker that stays is at the cut; a removed one is wherever it died (BSP: the cut or the clock before).
  for (int w = 0; w < ctx_->job.num_workers; ++w) {
    if (Removes(target, w) || ctx_->clocks->ClockOf(w) == scale_cut_) continue;
    if (ctx_->clocks->ClockOf(w) > scale_cut_) {  // only with leases (HoldAtServers): no boundary to remove at
      const bool removal = !target.remove_workers.empty();
      EndRescale(absl::AbortedError(absl::StrFormat("worker rank %d passed clock %d, where the job was held%s", w,
                                                    scale_cut_, removal ? ": the job rolls back" : "")));
      if (removal) roll_back_("removing dead workers");
      return Held::kEnded;
    }
    if (!ctx_->membership->Alive(Role::kWorker, w)) {  // it may never reach the cut
      EndRescale(absl::AbortedError(absl::StrFormat(
          "worker rank %d died while the job was held for a rescale: abandoned (tried again once it is back or "
          "removed)",
          w)));
      return Held::kEnded;
    }
    return Held::kWaiting;
  }
  // Replicated jobs: every server must act on the latest routing (a failover just before) before rows move, or
  // a group whose primary changed could be sent by nobody.
  if (ctx_->partition->replicas() > 1 &&
      !ctx_->membership->ServersAtRouting(ctx_->membership->routing().generation)) {
    return Held::kWaiting;
  }
  return Held::kReady;
}

void Rescaler::RescaleAtCut(const ScaleTarget& target) {
  absl::StatusOr<Partition> next = ctx_->PartitionOver(target.servers);
  const int old_workers = ctx_->job.num_workers;
  const bool workers_change = target.workers != old_workers || !target.remove_workers.empty();
  const std::vector<int> worker_map = MapRanks(old_workers, target.workers, target.remove_workers);
  // The workers' shares of the rest of the epoch, before anything moves (a failure leaves the job as it was).
  absl::StatusOr<std::vector<WorkerState>> states =
      workers_change ? PlanWorkers(worker_map, target.remove_workers) : std::vector<WorkerState>();
  const std::string removing = absl::StrFormat("removing workers [%s]", absl::StrJoin(target.remove_workers, ","));
  if (!states.ok() && !target.remove_workers.empty() && scale_cut_ != removal_rollback_clock_) {
    // A removed worker's last report cannot be handed on (it stopped in another epoch than the others): from
    // the last checkpoint every worker's state is known at one clock. Once only: at that clock it is final.
    EndRescale(absl::AbortedError(absl::StrCat(states.status().message(), ": the job rolls back to its last "
                                               "checkpoint, and they are removed from there")));
    roll_back_(removing);
    removal_rollback_clock_ = checkpointer_->last_checkpoint_clock();
    return;
  }
  if (!states.ok()) next = states.status();
  // A removed BSP worker that died mid-clock left that clock half done on the servers: complete it without it.
  // From the fence on, the servers refuse its pushes of that clock: the removal must go through, or the job
  // roll back (a restore drops every fence and buffered push).
  std::vector<int> half_done;  // removed workers that died in the clock before the cut (the others finished it)
  for (size_t i = 0; i < target.remove_workers.size(); ++i) {
    if (removed_at_[i] < scale_cut_ && ctx_->job.consistency.bsp() && next.ok()) {
      half_done.push_back(target.remove_workers[i]);
    }
  }
  const bool fenced = !half_done.empty();
  if (fenced && !SettleHalfDoneClock(half_done, removing)) return;
  absl::StatusOr<ScaleResult> result =
      next.ok() ? MoveTo(*next, target, workers_change ? &*states : nullptr) : next.status();
  if (!result.ok()) {
    EndRescale(result.status());
    if (fenced && !ctx_->failed) roll_back_(absl::StrCat(removing, " failed after their clock was completed"));
    return;
  }
  ReleaseRescaled(target, *std::move(result), workers_change);
}

bool Rescaler::SettleHalfDoneClock(const std::vector<int>& half_done, const std::string& removing) {
  absl::StatusOr<bool> settled = CompleteWithout(half_done, scale_cut_ - 1);
  if (settled.ok() && *settled) return true;
  // Not settled: some server applied that clock with their parts (only a rollback undoes it), or a call failed
  // with the fence in place on some servers.
  EndRescale(absl::AbortedError(absl::StrFormat(
      "%s: clock %d %s; the job rolls back to its last checkpoint, and they are removed from there", removing,
      scale_cut_ - 1,
      settled.ok() ? "was applied with their pushes on some server"
                   : absl::StrCat("could not be completed without them (", settled.status().message(), ")"))));
  roll_back_(removing);
  return false;
}

void Rescaler::ReleaseRescaled(const ScaleTarget& target, ScaleResult result, bool workers_change) {
  // The held workers learn of the new layout by rejoining; they continue from this same clock.
  const size_t cancelled = ctx_->clocks->CancelAll(absl::AbortedError(absl::StrFormat(
      "the job was rescaled to %d servers and %d workers (rescale %d): rejoin", target.servers, target.workers,
      result.layout_generation)));
  // A new worker count changes every worker's share of the data: a rollback must not restore the old shares,
  // so the workers stay held until a checkpoint of the new ones is cut (a rollback to an older one is refused by
  // Restore; copy-on-write, the cut is in every server's memory and its write goes on while they train). Server
  // moves need none: a checkpoint of the old layout restores into the new one.
  if (workers_change) checkpointer_->CutRescaled(scale_cut_);
  result.held = absl::Now() - scale_start_;
  KLOG(Info) << absl::StrFormat(
      "rescale %d done at clock %d: %d servers, %d workers; %d rows (%.1f MB) moved in %.3f s, workers held %.3f s "
      "(%d waits answered: rejoin)",
      result.layout_generation, result.clock, target.servers, target.workers, result.rows_moved,
      result.bytes_moved / 1e6, absl::ToDoubleSeconds(result.moved), absl::ToDoubleSeconds(result.held), cancelled);
  EndRescale(std::move(result));
}

absl::Status Rescaler::OnEveryServer(const RescaleShardRequest& request, std::vector<RescaleShardResponse>* answers) {
  const std::vector<std::string> addresses = ctx_->membership->LiveServerAddresses();
  std::vector<absl::StatusOr<RescaleShardResponse>> results(addresses.size(), absl::UnknownError("not run"));
  std::vector<std::thread> calls;
  for (size_t s = 0; s < addresses.size(); ++s) {
    if (addresses[s].empty()) continue;  // a dead server being removed: its groups' copies are elsewhere
    calls.emplace_back([&, s] { results[s] = ctx_->admin->Rescale(static_cast<int>(s), addresses[s], request); });
  }
  for (std::thread& t : calls) t.join();
  absl::Status first;
  for (size_t s = 0; s < addresses.size(); ++s) {
    if (addresses[s].empty()) continue;
    if (!results[s].ok()) {
      if (first.ok()) first = results[s].status();
      continue;
    }
    if (answers != nullptr) answers->push_back(*std::move(results[s]));
  }
  return first;
}

absl::StatusOr<bool> Rescaler::CompleteWithout(const std::vector<int>& workers, int64_t clock) {
  const uint64_t generation = ctx_->membership->layout().generation + 1;
  auto phase = [&](RescaleShardRequest::Phase which, uint64_t* total) -> absl::Status {
    RescaleShardRequest request;
    request.set_phase(which);
    request.set_layout_generation(generation);
    for (int w : workers) request.add_removed_workers(w);
    request.set_clock(clock);
    std::vector<RescaleShardResponse> answers;
    KESTREL_RETURN_IF_ERROR(OnEveryServer(request, &answers));
    for (const RescaleShardResponse& a : answers) {
      *total += which == RescaleShardRequest::FENCE ? a.applied_with_removed() : a.completed();
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

// One server's part in a rescale's move.
struct Rescaler::Participant {
  int old_rank;  // -1: joining
  int new_rank;  // -1: leaving
  std::string address;
};

// A rescale's move, as every phase tells the servers.
struct Rescaler::MovePlan {
  ScaleTarget target;
  int old_servers = 0;  // the old layout's server count
  uint64_t generation = 0;  // the layout generation it moves to
  uint64_t attempt = 0;  // distinct for every attempt (a retry after an abort), across scheduler restarts too
  std::string partition;  // the new layout's (Partition::ToString())
  std::vector<std::string> addresses;  // by new rank
  std::vector<int> senders;  // the old ranks that send their rows: every live one
  // Who takes part: every live server of the old layout (it sends its rows; -1: it leaves), then the joining ones.
  std::vector<Participant> everyone;
  // The new layout's worker ids (servers check workers' certificates against them from the switch on).
  std::vector<int> worker_ids;
};

absl::StatusOr<ScaleResult> Rescaler::MoveTo(const Partition& next, ScaleTarget target,
                                             std::vector<WorkerState>* worker_states) {
  const JobLayout old = ctx_->membership->layout();
  MovePlan move;
  move.addresses = ctx_->membership->TargetServerAddresses();
  const std::vector<std::string> old_addresses = ctx_->membership->LiveServerAddresses();  // by old rank
  KESTREL_RETURN_IF_ERROR(Enlist(old, old_addresses, target, &move));
  move.target = std::move(target);
  move.old_servers = old.num_servers;
  move.generation = old.generation + 1;
  move.attempt = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  move.partition = next.ToString();
  bool verify;
  {
    absl::MutexLock lock(&mu_);
    verify = scale_verify_;
  }
  if (verify && static_cast<int>(move.senders.size()) != old.num_servers) {
    KLOG(Warning) << "rescale " << move.generation << ": a server being removed is dead, so its own groups cannot "
                  << "be read: no fingerprint check";
    verify = false;
  }
  uint64_t fingerprint_before = 0;
  if (verify) {
    KESTREL_ASSIGN_OR_RETURN(fingerprint_before, Fingerprint(old_addresses));
  }
  move.worker_ids = ctx_->membership->TargetIds(Role::kWorker);
  const absl::Time start = absl::Now();
  std::vector<RescaleShardResponse> sent;
  absl::Time installed;
  KESTREL_RETURN_IF_ERROR(SwitchServers(move, start, &sent, &installed));
  ScaleResult result;
  if (verify) {
    result.fingerprint_before = fingerprint_before;
    absl::StatusOr<uint64_t> after = Fingerprint(move.addresses);
    if (!after.ok()) KLOG(Warning) << "rescale " << move.generation << ": cannot verify: " << after.status();
    result.fingerprint_after = after.ok() ? *after : 0;
    if (after.ok() && *after != fingerprint_before) {
      KLOG(Error) << absl::StrFormat("rescale %d changed the table: fingerprint %016x before, %016x after",
                                     move.generation, fingerprint_before, *after);
    }
  }
  result.moved = installed - start;
  for (const RescaleShardResponse& r : sent) {
    result.rows_moved += r.rows_sent();
    result.bytes_moved += r.bytes_sent();
  }
  KESTREL_RETURN_IF_ERROR(CommitMove(move, next, worker_states));
  result.clock = scale_cut_;
  result.layout_generation = move.generation;
  return result;
}

absl::Status Rescaler::Enlist(const JobLayout& old, const std::vector<std::string>& old_addresses,
                              const ScaleTarget& target, MovePlan* move) {
  const int old_servers = old.num_servers;
  const std::vector<int> server_map = MapRanks(old_servers, target.servers, target.remove_servers);
  std::vector<int> new_of_old(old_servers, -1);
  for (int r = 0; r < target.servers; ++r) {
    if (server_map[r] >= 0) new_of_old[server_map[r]] = r;
  }
  // A dead server being removed takes no part: with replicas, the primaries of its groups send its rows.
  for (int s = 0; s < old_servers; ++s) {
    if (old_addresses[s].empty()) {
      if (std::find(target.remove_servers.begin(), target.remove_servers.end(), s) == target.remove_servers.end()) {
        return absl::UnavailableError(absl::StrFormat("server %d is not alive: the rescale was not done", s));
      }
      continue;
    }
    move->everyone.push_back({s, new_of_old[s], old_addresses[s]});
    move->senders.push_back(s);
  }
  for (int r = 0; r < target.servers; ++r) {
    if (server_map[r] == -1) move->everyone.push_back({-1, r, move->addresses[r]});
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Rescaler::Fingerprint(const std::vector<std::string>& at) {
  uint64_t sum = 0;
  for (size_t s = 0; s < at.size(); ++s) {
    KESTREL_ASSIGN_OR_RETURN(const uint64_t f, ctx_->admin->Fingerprint(static_cast<int>(s), at[s]));
    sum += f;
  }
  return sum;
}

absl::Status Rescaler::RunPhase(const MovePlan& move, RescaleShardRequest::Phase which, bool senders_only,
                             std::vector<RescaleShardResponse>* answers, bool keep_groups) {
  RescaleShardRequest request;
  request.set_phase(which);
  request.set_keep_groups(keep_groups);
  request.set_layout_generation(move.generation);
  request.set_attempt(move.attempt);
  request.set_partition(move.partition);
  for (const std::string& a : move.addresses) request.add_server_addresses(a);
  request.set_senders(move.old_servers);
  for (int s : move.senders) request.add_from_servers(s);
  request.set_bsp_workers(ctx_->job.consistency.bsp() ? move.target.workers : 0);
  request.set_routing_generation(ctx_->membership->routing().generation + 1);
  for (int id : move.worker_ids) request.add_worker_ids(id);
  request.set_clock(scale_cut_);
  request.set_workers(move.target.workers);
  const std::vector<Participant>& everyone = move.everyone;
  std::vector<absl::StatusOr<RescaleShardResponse>> results(everyone.size(), absl::UnknownError("not run"));
  std::vector<std::thread> calls;
  for (size_t i = 0; i < everyone.size(); ++i) {
    if (senders_only && everyone[i].old_rank < 0) continue;
    calls.emplace_back([&, i, request]() mutable {
      const Participant& p = everyone[i];
      request.set_new_rank(p.new_rank);
      results[i] = p.address.empty()
                       ? absl::UnavailableError(absl::StrFormat("server rank %d is not alive", p.new_rank))
                       : ctx_->admin->Rescale(p.old_rank >= 0 ? p.old_rank : p.new_rank, p.address, request);
    });
  }
  for (std::thread& t : calls) t.join();
  for (size_t i = 0; i < everyone.size(); ++i) {
    if (senders_only && everyone[i].old_rank < 0) continue;
    if (!results[i].ok()) return results[i].status();
    if (answers != nullptr) answers->push_back(*results[i]);
  }
  return absl::OkStatus();
}

absl::Status Rescaler::SwitchServers(const MovePlan& move, absl::Time start, std::vector<RescaleShardResponse>* sent,
                                     absl::Time* installed) {
  // Only the worker count changes: every server keeps its groups and rows and switches in place (idempotent, so a
  // failed call is retried before the servers are taken to disagree). Otherwise rows move, and a failure before
  // the switch aborts the rescale with the job unchanged.
  const bool in_place = move.partition == ctx_->partition->ToString() && move.target.servers == move.old_servers &&
                        move.target.remove_servers.empty() && !ctx_->options.move_rows_on_worker_change;
  absl::Status status;
  if (in_place) {
    *installed = start;
    for (int attempt = 1;; ++attempt) {
      status = RunPhase(move, RescaleShardRequest::SWITCH, false, nullptr, /*keep_groups=*/true);
      if (status.ok() || RetryScopeOf(status) == RetryScope::kNone || attempt == kFinalAttempts) break;
      absl::SleepFor(absl::Milliseconds(200) * attempt);
    }
  } else {
    status = RunPhase(move, RescaleShardRequest::SEND, /*senders_only=*/true, sent);
    if (status.ok()) status = RunPhase(move, RescaleShardRequest::INSTALL, false, nullptr);
    if (!status.ok()) {
      const absl::Status aborted = RunPhase(move, RescaleShardRequest::ABORT, false, nullptr);
      if (!aborted.ok()) KLOG(Warning) << "aborting the rescale: " << aborted;
      return absl::Status(status.code(), absl::StrCat("the rescale failed (the job goes on unchanged): ",
                                                      status.message()));
    }
    *installed = absl::Now();
    // From here the servers move on one by one: a failure leaves them disagreeing on the layout.
    status = RunPhase(move, RescaleShardRequest::SWITCH, false, nullptr);
  }
  if (!status.ok()) {
    ctx_->Fail(absl::InternalError(absl::StrCat(
        "a server failed to switch to the rescaled layout, so the servers disagree on who owns which keys or on "
        "BSP's worker count: ",
        status.message())));
    return absl::InternalError("the rescale failed during the switch");
  }
  return absl::OkStatus();
}

absl::Status Rescaler::CommitMove(const MovePlan& move, const Partition& next,
                                  std::vector<WorkerState>* worker_states) {
  const ScaleTarget& target = move.target;
  // The workers' side, right before the layout becomes the job's: a worker that rejoins from then on finds its
  // clock and state (new ranks are refused until the commit).
  if (worker_states != nullptr) {
    ctx_->clocks->Resize(target.workers, scale_cut_,
                         absl::AbortedError(absl::StrFormat("the job was rescaled to %d workers (rescale %d): rejoin",
                                                            target.workers, move.generation)));
    absl::MutexLock lock(&ctx_->mu);
    ctx_->worker_states = std::move(*worker_states);
  }
  KESTREL_ASSIGN_OR_RETURN(const uint64_t routing, ctx_->membership->CommitScale(move.partition));
  ctx_->partition = next;
  ctx_->job.partition = move.partition;
  ctx_->job.num_servers = target.servers;
  ctx_->job.num_workers = target.workers;
  if (const size_t removed = target.remove_servers.size() + target.remove_workers.size(); removed > 0) {
    KLOG(Warning) << "elastic: removed server ranks [" << absl::StrJoin(target.remove_servers, ",")
                  << "] and worker ranks [" << absl::StrJoin(target.remove_workers, ",") << "] (rescale "
                  << move.generation << ")";
    ctx_->CountRemovals(removed);
  }
  KLOG(Info) << "rescale " << move.generation << ": every server serves the layout of " << target.servers
             << " servers (routing generation " << routing << ")";
  return absl::OkStatus();
}

absl::StatusOr<std::vector<WorkerState>> Rescaler::PlanWorkers(const std::vector<int>& old_of_new,
                                                               const std::vector<int>& removed) {
  std::vector<WorkerState> old;
  {
    absl::MutexLock lock(&ctx_->mu);
    old = ctx_->worker_states;
  }
  return PlanEpoch(old, scale_cut_, old_of_new, removed, removed_at_);
}

void Rescaler::EndRescale(absl::StatusOr<ScaleResult> result) {
  if (!result.ok()) {
    ctx_->membership->CancelScale();
    KLOG(Warning) << "rescale failed: " << result.status();
  }
  if (reads_held_ && !result.ok() && !ctx_->failed) {
    // The servers answer reads again (a restore after a rollback would too); one that misses this refuses
    // them until the next switch or restore, and its readers report to the scheduler and rejoin.
    RescaleShardRequest abort;
    abort.set_phase(RescaleShardRequest::ABORT);
    abort.set_layout_generation(ctx_->membership->layout().generation + 1);
    if (absl::Status aborted = OnEveryServer(abort, nullptr); !aborted.ok()) {
      KLOG(Warning) << "lifting the servers' read hold: " << aborted;
    }
  }
  reads_held_ = false;
  std::function<void(absl::StatusOr<ScaleResult>)> done;
  {
    absl::MutexLock lock(&mu_);
    done.swap(scale_done_);
    scale_pending_ = false;
  }
  int64_t reserved;
  {
    absl::MutexLock lock(&mu_);
    reserved = scale_at_;
  }
  ctx_->clocks->ReserveHoldAt(ClockTable::kNoHold);
  if (scale_cut_ != ClockTable::kNoHold || reserved > 0) {
    scale_cut_ = ClockTable::kNoHold;
    // After a failed switch (JobContext::failed) the servers disagree on the layout: the workers stay held until the
    // scheduler exits.
    if (!ctx_->failed) ctx_->clocks->SetHold(ctx_->cut);  // the scheduled cut (kNoHold: none)
  }
  if (done) done(std::move(result));
}

void Rescaler::Abandon(const std::string& why) {
  bool pending;
  {
    absl::MutexLock lock(&mu_);
    pending = scale_pending_;
  }
  if (pending) {  // its hold and its plans are of the timeline being rolled back
    EndRescale(absl::AbortedError(absl::StrCat(why, ": the job rolls back, the rescale was abandoned")));
  }
}

void Rescaler::Shutdown() {
  std::function<void(absl::StatusOr<ScaleResult>)> done;
  {
    absl::MutexLock lock(&mu_);
    done.swap(scale_done_);
    scale_pending_ = false;
  }
  ctx_->clocks->ReserveHoldAt(ClockTable::kNoHold);
  if (done) done(absl::UnavailableError("the scheduler is shutting down: the rescale was not done"));
}

}  // namespace kestrel
