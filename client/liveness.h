// The liveness rule every process shares: how long a member may stay silent before the scheduler declares it
// dead, derived from the heartbeat interval (the scheduler's membership, the servers' primary fence and the
// tests all read it from here).
#ifndef KESTREL_CLIENT_LIVENESS_H_
#define KESTREL_CLIENT_LIVENESS_H_

#include "absl/time/time.h"

namespace kestrel {

// The scheduler declares a member dead once it has been silent this long (its heartbeat interval and a half):
// the one rule every process derives the failure timeout from (server/primary_lease.h fences by it).
inline absl::Duration HeartbeatTimeoutFor(absl::Duration heartbeat_interval) { return heartbeat_interval * 3 / 2; }

}  // namespace kestrel

#endif  // KESTREL_CLIENT_LIVENESS_H_
