#include "server/read_gate.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/held_reads.h"

namespace kestrel {

ReadGate::ReadGate(bool bsp, int num_workers) : bsp_(bsp), num_workers_(std::max(0, num_workers)) {}

ReadGate::TableClocks& ReadGate::TableLocked(absl::string_view table) {
  auto [it, inserted] = tables_.try_emplace(table);
  if (inserted) {
    it->second.through = floor_;
    if (!bsp_) it->second.workers.assign(num_workers_, WorkerClock{floor_});
  }
  return it->second;
}

void ReadGate::RecomputeLocked(TableClocks& t) {
  if (bsp_) return;
  if (t.workers.empty()) return;  // no workers known: nothing completes
  int64_t low = std::numeric_limits<int64_t>::max();
  for (const WorkerClock& w : t.workers) low = std::min(low, w.done);
  t.through = std::max(t.through, low);
}

void ReadGate::ReleaseLocked(TableClocks& t, std::vector<Callback>* ready) {
  while (!t.waiting.empty() && t.waiting.begin()->first <= t.through) {
    ready->push_back(std::move(t.waiting.begin()->second.done));
    t.waiting.erase(t.waiting.begin());
    --waiting_;
  }
}

void ReadGate::SetWorkers(int num_workers) {
  std::vector<Callback> ready;
  {
    absl::MutexLock lock(&mu_);
    num_workers = std::max(0, num_workers);
    if (num_workers == num_workers_) return;
    num_workers_ = num_workers;
    for (auto& [name, t] : tables_) {
      if (bsp_) continue;
      // A rank that joins starts where the table's clocks are complete (it has pushed nothing yet).
      t.workers.resize(num_workers, WorkerClock{t.through});
      RecomputeLocked(t);
      ReleaseLocked(t, &ready);
    }
  }
  for (Callback& done : ready) done(absl::OkStatus());
}

void ReadGate::StartAt(int64_t clock, const absl::Status& cancel) {
  std::vector<Callback> cancelled;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [name, t] : tables_) {
      for (auto& [need, waiter] : t.waiting) cancelled.push_back(std::move(waiter.done));
    }
    tables_.clear();
    waiting_ = 0;
    floor_ = std::max<int64_t>(clock, 0) - 1;
    held_from_ = kNotHeld;
  }
  for (Callback& done : cancelled) done(cancel);
}

void ReadGate::Raise(int64_t clock) {
  std::vector<Callback> ready;
  {
    absl::MutexLock lock(&mu_);
    if (clock - 1 <= floor_) return;
    floor_ = clock - 1;
    for (auto& [name, t] : tables_) {
      t.through = std::max(t.through, floor_);
      for (WorkerClock& w : t.workers) {
        if (w.done >= floor_) continue;
        w = WorkerClock{floor_};
      }
      ReleaseLocked(t, &ready);
    }
  }
  for (Callback& done : ready) done(absl::OkStatus());
}

void ReadGate::HoldReads(int64_t from, int64_t at) {
  std::vector<Callback> held;
  {
    absl::MutexLock lock(&mu_);
    held_from_ = from;
    held_at_ = at;
    for (auto& [name, t] : tables_) {
      for (auto it = t.waiting.lower_bound(from - 1); it != t.waiting.end(); it = t.waiting.erase(it)) {
        held.push_back(std::move(it->second.done));
        --waiting_;
      }
    }
  }
  for (Callback& done : held) done(ReadsHeldAt(at));
}

void ReadGate::ReleaseReads() {
  absl::MutexLock lock(&mu_);
  held_from_ = kNotHeld;
}

void ReadGate::Applied(absl::string_view table, int64_t clock, std::vector<Callback>* ready) {
  absl::MutexLock lock(&mu_);
  TableClocks& t = TableLocked(table);
  if (clock <= t.through) return;
  t.through = clock;
  ReleaseLocked(t, ready);
}

void ReadGate::Pushed(absl::string_view table, int worker, int64_t clock, int part, int parts,
                      std::vector<Callback>* ready) {
  {
    absl::MutexLock lock(&mu_);
    if (bsp_ || worker < 0 || worker >= num_workers_ || parts < 1 || part < 0 || part >= parts) return;
    TableClocks& t = TableLocked(table);
    WorkerClock& w = t.workers[worker];
    // Only the clock after the last complete one counts: a worker pushes its clocks in order, and a repeat of
    // an earlier clock (a retry) adds nothing.
    if (clock != w.done + 1) return;
    if (w.collecting != clock || static_cast<int>(w.parts.size()) != parts) {
      w.collecting = clock;
      w.parts.assign(parts, false);
      w.received = 0;
    }
    if (w.parts[part]) return;
    w.parts[part] = true;
    if (++w.received < parts) return;
    w.done = clock;
    w.collecting = -1;
    w.parts.clear();
    w.received = 0;
    const int64_t before = t.through;
    RecomputeLocked(t);
    if (t.through == before) return;
    ReleaseLocked(t, ready);
  }
}

absl::StatusOr<bool> ReadGate::Await(absl::string_view table, int64_t need, absl::Time deadline, Callback done) {
  absl::MutexLock lock(&mu_);
  if (need >= held_from_) return ReadsHeldAt(held_at_);
  TableClocks& t = TableLocked(table);
  if (need - 1 <= t.through) return true;
  if (waiting_ >= kMaxWaitingReads) {
    return absl::UnavailableError(absl::StrFormat(
        "%d reads already wait for their clocks on this server; retry", waiting_));
  }
  t.waiting.emplace(need - 1, Waiter{deadline, std::move(done)});
  ++waiting_;
  return false;
}

size_t ReadGate::Expire(absl::Time now) {
  std::vector<std::pair<Callback, std::string>> expired;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [name, t] : tables_) {
      for (auto it = t.waiting.begin(); it != t.waiting.end();) {
        if (it->second.deadline > now) {
          ++it;
          continue;
        }
        expired.emplace_back(std::move(it->second.done),
                             absl::StrFormat("a read of table '%s' waited until its deadline for clock %d to "
                                             "complete (every worker's updates are in through clock %d); retry",
                                             name.substr(0, 64), it->first, t.through));
        it = t.waiting.erase(it);
        --waiting_;
      }
    }
  }
  for (auto& [done, why] : expired) done(absl::UnavailableError(why));
  return expired.size();
}

int64_t ReadGate::Complete(absl::string_view table) const {
  absl::MutexLock lock(&mu_);
  auto it = tables_.find(table);
  return (it == tables_.end() ? floor_ : it->second.through) + 1;
}

int64_t ReadGate::CompleteAll() const {
  absl::MutexLock lock(&mu_);
  int64_t low = floor_;
  bool any = false;
  for (const auto& [name, t] : tables_) {
    low = any ? std::min(low, t.through) : t.through;
    any = true;
  }
  return low + 1;
}

int64_t ReadGate::CompleteFor(int worker) const {
  if (bsp_) return CompleteAll();
  absl::MutexLock lock(&mu_);
  int64_t low = floor_;
  bool any = false;
  for (const auto& [name, t] : tables_) {
    const int64_t done =
        worker >= 0 && static_cast<size_t>(worker) < t.workers.size() ? t.workers[worker].done : t.through;
    low = any ? std::min(low, done) : done;
    any = true;
  }
  return low + 1;
}

int64_t ReadGate::PushedBy(absl::string_view table, int worker) const {
  absl::MutexLock lock(&mu_);
  auto it = tables_.find(table);
  if (it == tables_.end()) return floor_ + 1;
  const TableClocks& t = it->second;
  if (bsp_ || worker < 0 || static_cast<size_t>(worker) >= t.workers.size()) return t.through + 1;
  return t.workers[worker].done + 1;
}

size_t ReadGate::waiting() const {
  absl::MutexLock lock(&mu_);
  return waiting_;
}

}  // namespace kestrel
