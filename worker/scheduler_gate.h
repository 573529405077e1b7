// The ClockGate of a cluster worker: asks kestrel_scheduler for each iteration (the scheduler decides BSP / SSP /
// ASP), or, under server-enforced clocks, for a lease of iterations (the servers decide). Thread-safe; the SchedulerClient must outlive it.
#ifndef KESTREL_WORKER_SCHEDULER_GATE_H_
#define KESTREL_WORKER_SCHEDULER_GATE_H_

#include <memory>
#include <optional>

#include "client/scheduler_client.h"
#include "worker/trainer.h"

namespace kestrel {

// `generation` and `incarnation`: what the scheduler answered this worker's Register (or Rejoin); `rollbacks`: the job's rollback
// count then. WaitAllFinished polls every `poll` and fails with ABORTED once the job has rolled back since
// (a server died: continue from the checkpoint); a recovery from a worker's death just waits.
// `layout_generation`: the rescale whose layout the worker trains in (WaitToStart carries it; WaitAllFinished
// fails with ABORTED once the job was rescaled since: rejoin, and evaluate in the new layout).
// `leased` (ClusterView.lease_clocks > 0): the scheduler grants leases; the gate asks once per lease and reports
// progress at its end (and when done), not every iteration. `read_lag`: set when the servers enforce the
// consistency (BSP 0, SSP its staleness): training reads of iteration c wait at the servers for the clocks
// < c - read_lag (ClockGate::WaitClock).
// `patience`: a scheduler that cannot be reached (UNAVAILABLE or DEADLINE_EXCEEDED: partitioned, paused,
// restarting) is asked again, backing off to 1 s between tries, for this long before the error is returned; a
// worker that stopped answering meanwhile is declared dead by the scheduler, which its Heartbeater learns. Every
// call the gate repeats is idempotent at the scheduler (a clock reported twice moves once).
std::unique_ptr<ClockGate> NewSchedulerGate(SchedulerClient* client, int rank, uint64_t generation,
                                            std::string incarnation, uint64_t rollbacks,
                                            uint64_t layout_generation = 0,
                                            absl::Duration poll = absl::Milliseconds(20), bool leased = false,
                                            std::optional<int> read_lag = std::nullopt,
                                            absl::Duration patience = absl::Minutes(10));

}  // namespace kestrel

#endif  // KESTREL_WORKER_SCHEDULER_GATE_H_
