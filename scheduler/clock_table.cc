#include "scheduler/clock_table.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/limits.h"

namespace kestrel {

absl::StatusOr<std::unique_ptr<ClockTable>> ClockTable::Create(int num_workers, ConsistencyPolicy policy,
                                                               int lease_clocks) {
  if (lease_clocks < 0 || lease_clocks > kMaxLeaseClocks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("lease_clocks must be in [0, %d], got %d", kMaxLeaseClocks, lease_clocks));
  }
  if (num_workers < 1 || num_workers > kMaxWorkers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("num_workers must be in [1, %d], got %d", kMaxWorkers, num_workers));
  }
  if (policy.mode == CONSISTENCY_SSP && policy.staleness < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("SSP staleness must be >= 0, got %d", policy.staleness));
  }
  return std::unique_ptr<ClockTable>(new ClockTable(num_workers, policy, lease_clocks));
}

ClockTable::ClockTable(int num_workers, ConsistencyPolicy policy, int lease_clocks)
    : policy_(policy), lease_clocks_(lease_clocks), clocks_size_(static_cast<size_t>(num_workers)) {
  absl::MutexLock lock(&mu_);
  clocks_.assign(num_workers, 0);
  clock_counts_[0] = num_workers;
}

absl::Status ClockTable::CheckRank(int rank) const {
  const size_t n = clocks_size_.load(std::memory_order_acquire);
  if (rank >= 0 && static_cast<size_t>(rank) < n) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat("worker rank %d is not in [0, %d)", rank, n));
}

void ClockTable::AdmitLocked(int64_t clock, Callback done, std::vector<Callback>* runnable) {
  if (lease_clocks_ > 0) {  // the servers enforce the policy; the lease stops short of any hold
    max_permitted_ = std::max(max_permitted_, LeaseEndLocked(clock));
    runnable->push_back(std::move(done));
    return;
  }
  const int64_t required = policy_.RequiredMinClock(clock);
  if (clock_counts_.begin()->first < required) {
    waiting_.emplace(required, Waiter{clock, std::move(done)});
    return;
  }
  max_permitted_ = std::max(max_permitted_, clock);
  runnable->push_back(std::move(done));
}

void ClockTable::WaitToStart(int rank, int64_t clock, Callback done, std::optional<uint64_t> epoch) {
  absl::Status status = CheckRank(rank);
  if (status.ok() && clock < 0) {
    status = absl::InvalidArgumentError(absl::StrFormat("worker %d asked for iteration %d", rank, clock));
  }
  if (!status.ok()) return done(status);
  std::vector<Callback> runnable;
  {
    absl::MutexLock lock(&mu_);
    if (epoch.has_value() && *epoch != epoch_) {
      status = last_cancel_.ok() ? absl::AbortedError("the wait was cancelled before it was queued") : last_cancel_;
    } else if (clock >= hold_) {
      held_.emplace(clock, std::move(done));
      return;
    } else {
      AdmitLocked(clock, std::move(done), &runnable);
    }
  }
  if (!status.ok()) return done(status);
  for (Callback& run : runnable) run(absl::OkStatus());
}

std::optional<int64_t> ClockTable::TryLease(int rank, int64_t clock, uint64_t epoch) {
  if (lease_clocks_ == 0 || clock < 0 || !CheckRank(rank).ok()) return std::nullopt;
  absl::MutexLock lock(&mu_);
  if (epoch != epoch_ || clock >= hold_) return std::nullopt;
  std::vector<Callback> none;  // a lease admits at once: no callback is queued or released
  AdmitLocked(clock, [](absl::Status) {}, &none);
  return std::max(clock, std::min(max_permitted_, LeaseEndLocked(clock)));
}

absl::Status ClockTable::Advance(int rank, int64_t finished) {
  if (absl::Status s = CheckRank(rank); !s.ok()) return s;
  std::vector<Callback> runnable;
  {
    absl::MutexLock lock(&mu_);
    if (static_cast<size_t>(rank) >= clocks_.size()) return CheckRank(rank);  // a rescale shrank the table
    const int64_t current = clocks_[rank];
    if (finished == current) return absl::OkStatus();
    if (finished < current) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "worker %d has finished %d iterations; its clock cannot go back to %d", rank, current, finished));
    }
    if (lease_clocks_ > 0 && finished > current + 1 && finished > max_permitted_ + 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "worker %d reports %d iterations finished; only iterations up to %d were permitted", rank, finished,
          max_permitted_));
    }
    if (lease_clocks_ == 0 && finished > current + 1) {  // one at a time: a jump would release barriers nobody reached
      return absl::InvalidArgumentError(absl::StrFormat(
          "worker %d has finished %d iterations; it may report %d next, not %d", rank, current, current + 1,
          finished));
    }
    clocks_[rank] = finished;
    auto it = clock_counts_.find(current);
    if (--it->second == 0) clock_counts_.erase(it);
    ++clock_counts_[finished];
    const int64_t min_clock = clock_counts_.begin()->first;
    auto end = waiting_.upper_bound(min_clock);
    for (auto w = waiting_.begin(); w != end; ++w) {
      max_permitted_ = std::max(max_permitted_, w->second.clock);
      runnable.push_back(std::move(w->second.done));
    }
    waiting_.erase(waiting_.begin(), end);
  }
  for (Callback& done : runnable) done(absl::OkStatus());
  if (listener_) listener_();
  return absl::OkStatus();
}

size_t ClockTable::CancelAll(absl::Status status) {
  std::multimap<int64_t, Waiter> cancelled;
  std::multimap<int64_t, Callback> held;
  {
    absl::MutexLock lock(&mu_);
    cancelled.swap(waiting_);
    held.swap(held_);
    ++epoch_;
    last_cancel_ = status;
  }
  for (auto& [required, waiter] : cancelled) waiter.done(status);
  for (auto& [clock, done] : held) done(status);
  return cancelled.size() + held.size();
}

void ClockTable::HoldWaitersLocked() {
  for (auto w = waiting_.begin(); w != waiting_.end();) {
    if (w->second.clock >= hold_) {
      held_.emplace(w->second.clock, std::move(w->second.done));
      w = waiting_.erase(w);
    } else {
      ++w;
    }
  }
}

void ClockTable::SetHold(int64_t hold) {
  std::vector<Callback> runnable;
  {
    absl::MutexLock lock(&mu_);
    hold = std::min(hold, reserved_);
    const bool lowered = hold < hold_;
    hold_ = hold;
    if (lowered) HoldWaitersLocked();
    auto end = held_.lower_bound(hold);
    std::vector<std::pair<int64_t, Callback>> released;
    for (auto h = held_.begin(); h != end; ++h) released.emplace_back(h->first, std::move(h->second));
    held_.erase(held_.begin(), end);
    for (auto& [clock, done] : released) AdmitLocked(clock, std::move(done), &runnable);
  }
  for (Callback& done : runnable) done(absl::OkStatus());
}

int64_t ClockTable::LeaseEndLocked(int64_t clock) const {
  return std::min(hold_ - 1, clock + lease_clocks_ - 1);
}

void ClockTable::ReserveHoldAt(int64_t clock) {
  absl::MutexLock lock(&mu_);
  if (clock != kNoHold && max_permitted_ >= clock) return;  // passed already: HoldAt will say so
  reserved_ = clock;
  if (clock < hold_) {
    hold_ = clock;
    HoldWaitersLocked();
  }
}

bool ClockTable::HoldAt(int64_t hold) {
  absl::MutexLock lock(&mu_);
  if (max_permitted_ >= hold || hold > hold_) return false;
  hold_ = hold;
  HoldWaitersLocked();
  return true;
}

void ClockTable::HoldAtRevoking(int64_t hold) {
  absl::MutexLock lock(&mu_);
  if (hold >= hold_) return;
  hold_ = hold;
  HoldWaitersLocked();
}

uint64_t ClockTable::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

int64_t ClockTable::hold() const {
  absl::MutexLock lock(&mu_);
  return hold_;
}

int64_t ClockTable::HoldAtEarliest() {
  absl::MutexLock lock(&mu_);
  if (max_permitted_ + 1 < hold_) {
    hold_ = max_permitted_ + 1;
    HoldWaitersLocked();
  }
  return hold_;
}

bool ClockTable::AllAt(int64_t clock) const {
  absl::MutexLock lock(&mu_);
  return clock_counts_.size() == 1 && clock_counts_.begin()->first == clock;
}

int64_t ClockTable::PermittedThrough(int64_t clock) const {
  if (lease_clocks_ == 0) return clock;
  absl::MutexLock lock(&mu_);
  // Capped by the hold now too: one lowered since the grant (SetHold) shortens the lease (a shorter one is safe).
  return std::max(clock, std::min(max_permitted_, LeaseEndLocked(clock)));
}

int64_t ClockTable::MaxPermitted() const {
  absl::MutexLock lock(&mu_);
  return max_permitted_;
}

void ClockTable::Reset(int64_t clock, absl::Status status) {
  CancelAll(status);
  absl::MutexLock lock(&mu_);
  clocks_.assign(clocks_.size(), clock);
  clock_counts_.clear();
  clock_counts_[clock] = static_cast<int>(clocks_.size());
  max_permitted_ = clock - 1;
}

void ClockTable::Resize(int num_workers, int64_t clock, absl::Status status) {
  CancelAll(status);
  absl::MutexLock lock(&mu_);
  clocks_.assign(static_cast<size_t>(std::clamp(num_workers, 1, kMaxWorkers)), clock);
  clocks_size_.store(clocks_.size(), std::memory_order_release);
  clock_counts_.clear();
  clock_counts_[clock] = static_cast<int>(clocks_.size());
  max_permitted_ = clock - 1;
}

void ClockTable::SetListener(std::function<void()> listener) { listener_ = std::move(listener); }

int64_t ClockTable::MinClock() const {
  absl::MutexLock lock(&mu_);
  return clock_counts_.begin()->first;
}

int64_t ClockTable::ClockOf(int rank) const {
  if (!CheckRank(rank).ok()) return -1;
  absl::MutexLock lock(&mu_);
  return static_cast<size_t>(rank) < clocks_.size() ? clocks_[rank] : -1;
}

size_t ClockTable::num_waiting() const {
  absl::MutexLock lock(&mu_);
  return waiting_.size() + held_.size();
}

int64_t ClockTable::NextRequiredMinClock() const {
  absl::MutexLock lock(&mu_);
  return waiting_.empty() ? std::numeric_limits<int64_t>::max() : waiting_.begin()->first;
}

}  // namespace kestrel
