// Push replication (docs/replication.md): a primary's update reaches every backup of its range group before the
// worker hears it was applied.
#ifndef KESTREL_SERVER_REPLICATION_H_
#define KESTREL_SERVER_REPLICATION_H_

#include <functional>

#include "absl/status/status.h"
#include "server/hosted_shards.h"

namespace kestrel {

using ReplicationDone = std::function<void(absl::Status)>;
// Sends the update to server `backup` and runs `done` with its answer (once, on any thread).
using SendToBackup = std::function<void(int backup, ReplicationDone done)>;

// Sends an update a primary applied to the backups of `owner`'s group through `send`, then runs `done` once: OK
// when each acknowledged it, else the first failure as Unavailable, naming the backup (the worker retries; a
// retried push is applied once everywhere). At once, on this thread, when there are none. No thread waits for a
// backup: the last answer's thread finishes the worker's call.
void ForwardToBackups(const HostedShards& hosted, int owner, const SendToBackup& send, ReplicationDone done);

// FailedPrecondition (counted) unless the job is replicated: a forwarded push or a group copy has no business
// on this server otherwise.
[[nodiscard]] absl::Status CheckReplicated(const HostedShards& hosted);

}  // namespace kestrel

#endif  // KESTREL_SERVER_REPLICATION_H_
