// ClockTable: the one component that decides consistency (BSP, SSP, ASP) between workers.
//
// Each worker has a clock: the number of iterations it has finished (an iteration = pull, compute, push, all
// pushes acknowledged). Before reading the weights for iteration c (0-based), a worker asks WaitToStart(c):
//   BSP      c may start once every worker has finished c (i.e. min clock >= c): iteration c sees all updates
//            of iterations < c of every worker.
//   SSP(s)   c may start once the slowest worker has finished c - s iterations (min clock >= c - s): no worker
//            runs more than s iterations ahead of the slowest, and every read sees all updates of iterations
//            <= c - s - 1 of all workers. BSP is SSP(0).
//   ASP      never waits.
// A permitted request is answered at once; others are answered, in order of their requirement, by the
// Advance() that satisfies them. Answers are callbacks, so no thread (gRPC's included) blocks on a wait.
//
// Checkpoints and rollbacks. A hold at clock h (SetHold) additionally keeps every iteration >= h from
// starting, so all workers stop at the clock boundary h: the state of the servers is then exactly the updates
// of iterations < h (a global cut). Reset(c) moves every worker's clock to c (a rollback to a checkpoint).
//
// Leases (server-enforced clocks, docs/protocol.md): with lease_clocks L > 0 the servers enforce BSP and SSP
// from the clocks reads carry (server/read_gate.h), so the table no longer applies the policy's rule: a worker
// asking for iteration c is permitted (unless held) through min(c + L - 1, hold - 1) at once, and reports its
// progress at the end of that lease rather than every iteration (Advance may then move several clocks at once,
// never past what was permitted). Holds still stop every worker at a clock boundary: no lease reaches past one.
//
// Thread-safe. Callbacks run outside the lock, on the thread that made them runnable; they must not block.
#ifndef KESTREL_SCHEDULER_CLOCK_TABLE_H_
#define KESTREL_SCHEDULER_CLOCK_TABLE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/consistency.h"

namespace kestrel {

class ClockTable {
 public:
  using Callback = std::function<void(absl::Status)>;

  // num_workers in [1, kMaxWorkers] (common/limits.h); SSP staleness >= 0; lease_clocks in [0, kMaxLeaseClocks]
  // (0: no leases, the table enforces the policy). All clocks start at 0.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ClockTable>> Create(int num_workers, ConsistencyPolicy policy,
                                                            int lease_clocks = 0);
  static constexpr int kMaxLeaseClocks = 1 << 20;
  int lease_clocks() const { return lease_clocks_; }
  // The last iteration a worker permitted to start `clock` may start without asking again: `clock` without
  // leases, else the end of its lease (never past a hold or MaxPermitted()).
  int64_t PermittedThrough(int64_t clock) const;

  // Worker `rank` asks to start iteration `clock`. `done(Ok)` runs before this returns when the policy allows
  // it now, else when an Advance() allows it. `done(error)` for a bad rank or clock (InvalidArgument) or when
  // the wait is cancelled (CancelAll's status).
  // `epoch`, when given, is what epoch() returned before the caller checked the request against other state
  // (the worker's generation): if a cancellation ran since, the request belongs to the timeline it ended and
  // is answered at once with that cancellation's status instead of waiting past it.
  void WaitToStart(int rank, int64_t clock, Callback done, std::optional<uint64_t> epoch = std::nullopt);
  // How many cancellations (CancelAll, Reset) have run.
  uint64_t epoch() const;
  // Leases only: the lease starting at `clock` for worker `rank`, granted now (its end, as PermittedThrough)
  // when WaitToStart(clock) would be answered at once; nullopt without leases, for a bad rank or clock, when
  // `clock` is held, or when a cancellation ran since `epoch` (the caller asks with WaitToStart instead).
  std::optional<int64_t> TryLease(int rank, int64_t clock, uint64_t epoch);

  // Worker `rank` has finished `finished` iterations. Clocks only move forward, one iteration at a time:
  // repeating the current value is a no-op (retries are safe), going back is FailedPrecondition, skipping
  // ahead (more than current + 1) InvalidArgument. Runs the callbacks this allows.
  [[nodiscard]] absl::Status Advance(int rank, int64_t finished);

  // Fails every waiting (and held) request with `status` (e.g. Aborted when the job rolls back); returns how many.
  size_t CancelAll(absl::Status status);

  // Iterations >= `hold` may not start until the hold moves past them (kNoHold: none). Raising the hold
  // answers the held requests it now allows.
  static constexpr int64_t kNoHold = std::numeric_limits<int64_t>::max();
  void SetHold(int64_t hold);
  int64_t hold() const;
  // Lowers the hold to the earliest clock boundary every worker can still stop at (MaxPermitted() + 1), in one
  // step with respect to WaitToStart; returns the hold.
  int64_t HoldAtEarliest();
  // Lowers the hold to `hold` unless an iteration >= `hold` was already permitted or the hold is below it
  // (false: nothing changes); checked and set in one step, so no worker slips past `hold` in between.
  bool HoldAt(int64_t hold);
  // Leases: lowers the hold to `hold` even where leases already reach past it. Only where the servers stop the
  // workers at `hold` themselves (a removal of dead workers under server-enforced clocks, RescaleShard HOLD:
  // their reads of iterations >= `hold` are refused, and they report there). No-op when the hold is lower.
  void HoldAtRevoking(int64_t hold);
  // Reserves a hold at `clock` (a rescale asked for at that boundary, ScaleRequest.at_clock): no iteration >=
  // `clock` starts from now on unless it was already permitted, and SetHold never lifts the hold past it, so the
  // boundary stays reachable while the rescale's new ranks start or an earlier checkpoint is cut (with leases,
  // a worker may otherwise be permitted past it before HoldAt). kNoHold lifts the reservation (then SetHold
  // moves the hold). Default: none.
  void ReserveHoldAt(int64_t clock);
  // Every worker's clock is `clock`.
  bool AllAt(int64_t clock) const;
  // The highest clock any worker was allowed to start, or (after Create/Reset to c) c - 1.
  int64_t MaxPermitted() const;
  // Sets every worker's clock to `clock` (a rollback), failing waiting and held requests with `status`.
  void Reset(int64_t clock, absl::Status status);
  // A rescale: `num_workers` workers (in [1, kMaxWorkers], common/limits.h), every one at `clock` (the boundary the job was held at),
  // failing waiting and held requests with `status`.
  void Resize(int num_workers, int64_t clock, absl::Status status);
  // Runs after every Advance that moved a clock (outside the lock; must not block). Set before use.
  void SetListener(std::function<void()> listener);

  const ConsistencyPolicy& policy() const { return policy_; }
  int num_workers() const { return static_cast<int>(clocks_size_.load(std::memory_order_acquire)); }
  int64_t MinClock() const;
  int64_t ClockOf(int rank) const;
  size_t num_waiting() const;
  // The smallest min clock some waiting request needs, or the highest int64 when none waits. Always above
  // MinClock(): a request that could run never waits.
  int64_t NextRequiredMinClock() const;

 private:
  ClockTable(int num_workers, ConsistencyPolicy policy, int lease_clocks);
  [[nodiscard]] absl::Status CheckRank(int rank) const;

  struct Waiter {
    int64_t clock = 0;  // the iteration asked for
    Callback done;
  };
  // Queues or answers (into `runnable`) a request that is not held.
  void AdmitLocked(int64_t clock, Callback done, std::vector<Callback>* runnable) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The last iteration a lease starting at `clock` may reach: lease_clocks_ long, short of the hold.
  int64_t LeaseEndLocked(int64_t clock) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After the hold was lowered: moves the waiting requests it now stops into held_, so that no Advance
  // releases them past the hold (only raising the hold does, through AdmitLocked).
  void HoldWaitersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ConsistencyPolicy policy_;
  const int lease_clocks_;
  std::atomic<size_t> clocks_size_;  // clocks_.size(), read without the lock

  mutable absl::Mutex mu_;
  std::vector<int64_t> clocks_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<int64_t, int> clock_counts_ ABSL_GUARDED_BY(mu_);  // clock -> workers at it
  std::multimap<int64_t, Waiter> waiting_ ABSL_GUARDED_BY(mu_);      // required min clock -> request
  std::multimap<int64_t, Callback> held_ ABSL_GUARDED_BY(mu_);       // clock asked for -> held request
  int64_t hold_ ABSL_GUARDED_BY(mu_) = kNoHold;
  int64_t reserved_ ABSL_GUARDED_BY(mu_) = kNoHold;  // ReserveHoldAt
  int64_t max_permitted_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status last_cancel_ ABSL_GUARDED_BY(mu_);  // the status the latest cancellation answered with
  std::function<void()> listener_;
};

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_CLOCK_TABLE_H_
