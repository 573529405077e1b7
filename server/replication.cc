#include "server/replication.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace kestrel {

void ForwardToBackups(const HostedShards& hosted, int owner, const SendToBackup& send, ReplicationDone done) {
  const std::vector<int> backups = hosted.BackupsOf(owner);
  if (backups.empty()) return done(absl::OkStatus());
  struct Forwarding {
    explicit Forwarding(int n) : pending(n) {}
    ReplicationDone done;
    absl::Mutex mu;
    int pending ABSL_GUARDED_BY(mu);
    absl::Status first_error ABSL_GUARDED_BY(mu);
  };
  auto state = std::make_shared<Forwarding>(static_cast<int>(backups.size()));
  state->done = std::move(done);
  for (const int backup : backups) {
    send(backup, [state, owner, backup](absl::Status status) {
      bool last;
      absl::Status result;
      {
        absl::MutexLock lock(&state->mu);
        if (!status.ok() && state->first_error.ok()) {
          state->first_error = absl::UnavailableError(absl::StrFormat(
              "backup server %d of the ranges of server %d does not have the update (%s: %s); the push is not "
              "acknowledged: retry",
              backup, owner, absl::StatusCodeToString(status.code()), status.message()));
        }
        last = --state->pending == 0;
        result = state->first_error;
      }
      if (last) state->done(std::move(result));
    });
  }
}

absl::Status CheckReplicated(const HostedShards& hosted) {
  if (hosted.replicated()) return absl::OkStatus();
  return hosted.own().Count(absl::FailedPreconditionError(
      "this job keeps one copy of each key range (--replicas=1): there is nothing to replicate to this server"));
}

}  // namespace kestrel
