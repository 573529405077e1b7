// The ClockGate of a cluster worker: asks kestrel_scheduler (which alone decides BSP / SSP / ASP) for each
// iteration. Thread-safe; the SchedulerClient must outlive it.
#ifndef KESTREL_WORKER_SCHEDULER_GATE_H_
#define KESTREL_WORKER_SCHEDULER_GATE_H_

#include <memory>

#include "scheduler/scheduler_client.h"
#include "worker/trainer.h"

namespace kestrel {

// `generation`: the job generation this worker registered at. `poll`: how often WaitAllFinished asks.
std::unique_ptr<ClockGate> NewSchedulerGate(SchedulerClient* client, int rank, uint64_t generation,
                                            absl::Duration poll = absl::Milliseconds(20));

}  // namespace kestrel

#endif  // KESTREL_WORKER_SCHEDULER_GATE_H_
