// Heartbeater: a member's heartbeats to the scheduler, from a thread of its own.
#ifndef KESTREL_CLIENT_HEARTBEATER_H_
#define KESTREL_CLIENT_HEARTBEATER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/scheduler_client.h"
#include "proto/scheduler.pb.h"

namespace kestrel {

// Sends a heartbeat every `interval` from its own thread until destroyed. `on_refused` runs (once, on that
// thread) when the scheduler refuses the heartbeat with FailedPrecondition: this member was declared dead or
// superseded and must stop. Transient errors are logged and retried. Thread-safe.
class Heartbeater {
 public:
  // `id`: the member's id (as registered). `on_answer` (optional) runs with every answered heartbeat
  // (generation, the member's rank, worker generations).
  Heartbeater(SchedulerClient* client, MemberRole role, int id, std::string incarnation, absl::Duration interval,
              std::function<void(absl::Status)> on_refused,
              std::function<void(const HeartbeatResponse&)> on_answer = nullptr);
  ~Heartbeater();

  // Sends the next heartbeat now instead of at the end of the interval (a server that met a worker generation
  // it has not heard of yet learns it within one round trip). Never blocks.
  void BeatSoon();
  // Servers of replicated jobs: the routing generation they act on, sent with every later heartbeat (the
  // scheduler waits for it before it lets workers use a new routing that needs every server to know).
  void SetRoutingGeneration(uint64_t generation) { routing_generation_.store(generation); }
  // Workers: iterations finished, sent with every later heartbeat (status only).
  void SetProgress(int64_t finished) { progress_.store(finished, std::memory_order_relaxed); }
  // When the latest answered heartbeat was sent (steady clock; set before on_answer runs with its answer).
  std::chrono::steady_clock::time_point last_answered_sent() const {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(answered_sent_.load()));
  }

 private:
  std::atomic<int64_t> answered_sent_{0};
  std::atomic<uint64_t> routing_generation_{0};
  std::atomic<int64_t> progress_{0};
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool soon_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace kestrel

#endif  // KESTREL_CLIENT_HEARTBEATER_H_
