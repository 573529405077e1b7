// PrimaryLease: the split-brain fence of a replicated server (docs/replication.md#fencing).
//
// A primary answers workers only while it holds a lease from the scheduler. Each heartbeat (or registration)
// the scheduler answers renews it until `sent + length`, where `sent` is when that call left this server and
// `length` is shorter than the scheduler's failure timeout (LeaseLength). The scheduler fails a server over only
// after hearing nothing from it for the whole timeout, counted from a heartbeat it received, which was sent no
// earlier than `sent`; so by the time a backup is promoted, the old primary's lease has lapsed, and a primary that
// is cut off from the scheduler or paused stops answering by itself. Times are this process's steady clock.
// Thread-safe (atomics).
#ifndef KESTREL_SERVER_PRIMARY_LEASE_H_
#define KESTREL_SERVER_PRIMARY_LEASE_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "absl/time/time.h"
#include "client/liveness.h"

namespace kestrel {

class PrimaryLease {
 public:
  using Clock = std::chrono::steady_clock;

  // The lease granted for a heartbeat interval of the scheduler's: its failure timeout (HeartbeatTimeoutFor) less
  // a quarter interval, a margin for the two steady clocks' rates. Servers heartbeat twice per interval.
  static absl::Duration LengthFor(absl::Duration heartbeat_interval) {
    return HeartbeatTimeoutFor(heartbeat_interval) - heartbeat_interval / 4;
  }

  // A call sent at `sent` was answered by the scheduler: held until sent + length (never shortened).
  void Renew(Clock::time_point sent, absl::Duration length) {
    const int64_t until = Nanos(sent) + absl::ToInt64Nanoseconds(length);
    int64_t held = until_.load(std::memory_order_relaxed);
    while (until > held && !until_.compare_exchange_weak(held, until, std::memory_order_release)) {
    }
  }
  bool Held() const { return Nanos(Clock::now()) < until_.load(std::memory_order_acquire); }
  // From now on the server's primaries answer workers only while the lease is held (kestrel_server, unless
  // --unsafe_no_primary_fence). Off by default: servers run without a scheduler (in-process tests) answer always.
  void Enforce() { enforced_.store(true, std::memory_order_relaxed); }
  bool Enforced() const { return enforced_.load(std::memory_order_relaxed); }
  // How long ago it lapsed (zero while held).
  absl::Duration LapsedFor() const {
    return std::max(absl::ZeroDuration(),
                    absl::Nanoseconds(Nanos(Clock::now()) - until_.load(std::memory_order_acquire)));
  }

 private:
  static int64_t Nanos(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }
  std::atomic<int64_t> until_{0};  // steady-clock nanoseconds; 0: never granted
  std::atomic<bool> enforced_{false};
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_PRIMARY_LEASE_H_
