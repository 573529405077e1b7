// ClockGate: how a worker asks for permission to run an iteration (the scheduler decides; see
// scheduler/clock_table.h), and the gate of a single worker, which never waits.
#ifndef KESTREL_WORKER_CLOCK_GATE_H_
#define KESTREL_WORKER_CLOCK_GATE_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "proto/checkpoint.pb.h"

namespace kestrel {

// Implementations say whether they are thread-safe.
class ClockGate {
 public:
  virtual ~ClockGate() = default;
  // Blocks until iteration `clock` may start.
  [[nodiscard]] virtual absl::Status WaitToStart(int64_t clock) = 0;
  // This worker has finished `finished` iterations (their pushes acknowledged); `done`: it has no more.
  // `state`: where its reader is now (the scheduler keeps it for checkpoints and replacements).
  [[nodiscard]] virtual absl::Status Advance(int64_t finished, bool done, const WorkerState& state) = 0;
  // Blocks until every worker has finished `iterations` iterations (before the final evaluation).
  [[nodiscard]] virtual absl::Status WaitAllFinished(int64_t iterations) = 0;
  // The highest min clock (every worker's finished iterations, their pushes acknowledged) this gate has
  // heard of; -1 when it knows none. Rows pulled after it was read hold every update of iterations below it.
  virtual int64_t KnownMinClock() const { return -1; }
  // Server-enforced clocks (server/read_gate.h): the wait_clock a training read of iteration `clock` carries
  // (CallClock::wait_clock: the servers answer it once every worker's updates of the clocks before it are in),
  // or nullopt when the gate itself is the barrier (or ASP: no read waits). Default: nullopt.
  virtual std::optional<int64_t> WaitClock(int64_t clock) const { return std::nullopt; }
  // Whether the scheduler grants leases of iterations (the servers enforce the clocks): WaitToStart asks it once
  // per lease. Default: false.
  virtual bool Leased() const { return false; }
  // Whether WaitToStart(clock) would be answered at once, without asking anyone (within a lease). Default: false.
  virtual bool PermittedNow(int64_t clock) const { return false; }
  // The servers hold reads at `clock` (common/held_reads.h) and this worker has finished every iteration before
  // it: reports `state` there whatever a lease says (the scheduler needs it to remove a dead worker), then waits
  // for permission to run `clock` (the scheduler's answer: Aborted to rejoin once the rescale is done).
  [[nodiscard]] virtual absl::Status StopAt(int64_t clock, const WorkerState& state) {
    absl::Status reported = Advance(clock, /*done=*/false, state);
    return reported.ok() ? WaitToStart(clock) : reported;
  }
};

// A gate that never waits: a single worker.
std::unique_ptr<ClockGate> NewSingleWorkerGate();

}  // namespace kestrel

#endif  // KESTREL_WORKER_CLOCK_GATE_H_
