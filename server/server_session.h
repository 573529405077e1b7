// ServerSession: a parameter server's membership in a cluster job — everything kestrel_server does with the
// scheduler, beside the worker's (worker/worker_session.h) and sharing its registration (client/registration.h):
//
//   Join        registers (retrying while the scheduler is not up, or while a crashed predecessor of the same id
//               is not yet declared dead), starts the primary lease from the registration, checks the job's layout
//               against the groups this server was started with (or takes a rescaled job's layout), and
//               heartbeats from its own thread.
//   heartbeats  each answer renews the primary lease (server/primary_lease.h), applies the job view (generations,
//               worker ids, the layout it is of) to the groups served and, in a replicated job, the routing and
//               the other servers' addresses; a worker generation the groups have not heard of makes the session
//               heartbeat at once. A refused heartbeat (this server was declared dead or superseded) runs
//               `on_refused`, a rescale that left this server out `on_removed`, each once, on the heartbeat thread.
//
// The core of a server's session: it speaks to the scheduler through a SchedulerClient and to the server through
// the served layout, the primary lease and the peer links, never through gRPC (server/main.cc connects them).
// Thread-safety: Join and the destructor on one thread. Owns the client and the heartbeat thread; the layout,
// the lease and the peer links are the caller's and must outlive the session.
#ifndef KESTREL_SERVER_SERVER_SESSION_H_
#define KESTREL_SERVER_SERVER_SESSION_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/heartbeater.h"
#include "client/scheduler_client.h"
#include "server/peer_links.h"
#include "server/primary_lease.h"
#include "server/served_layout.h"

namespace kestrel {

struct ServerSessionOptions {
  // The scheduler's host:port, named in messages. Required.
  std::string scheduler;
  // The id to register as (--rank: the rank the server's certificate names). Default: 0.
  int id = 0;
  // Where workers and the other servers reach this server (host:port). Required.
  std::string address;
  // How long to retry registering. Default: 30 s.
  absl::Duration scheduler_timeout = absl::Seconds(30);
  // Enforce the primary lease (docs/replication.md#fencing). Default: true; false only for the test hook
  // --unsafe_no_primary_fence.
  bool primary_fence = true;
  // Run on the heartbeat thread, once: the scheduler refused this server (declared dead, or superseded by a
  // replacement of the same id), or a rescale left it out of the job. Required.
  std::function<void(absl::Status)> on_refused;
  std::function<void()> on_removed;
};

// What the session acts on; all outlive it.
struct ServedServer {
  ServedLayout* layout = nullptr;
  PrimaryLease* lease = nullptr;
  PeerLinks* peers = nullptr;  // may be null: a server without links to others (no replication)
};

class ServerSession {
 public:
  // OUT_OF_RANGE: an elastic job removed this server when it did not come back (nothing to do: exit 0).
  // INVALID_ARGUMENT: this server's configuration (partition, BSP worker count) does not match the job's, or the
  // scheduler announced a rescaled layout it cannot take. FAILED_PRECONDITION: the scheduler announced no valid
  // consistency mode. Other codes: it could not register.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ServerSession>> Join(ServerSessionOptions options,
                                                             std::unique_ptr<SchedulerClient> client,
                                                             ServedServer served);
  ~ServerSession();

  ServerSession(const ServerSession&) = delete;
  ServerSession& operator=(const ServerSession&) = delete;

  // This server's rank in the job's layout as registered (its id, unless a rescale removed a lower rank).
  int rank() const { return rank_; }

 private:
  ServerSession(ServerSessionOptions options, std::unique_ptr<SchedulerClient> client, ServedServer served);
  // Checks the registration's view against the groups served, or adopts a rescaled job's layout.
  [[nodiscard]] absl::Status TakeLayout(const RegisterResponse& registration);
  void OnAnswer(const HeartbeatResponse& answer);

  const ServerSessionOptions options_;
  const std::unique_ptr<SchedulerClient> client_;
  const ServedServer served_;
  int rank_ = -1;
  absl::Duration lease_length_;
  uint64_t last_generation_ = 0;  // the heartbeat thread's: the job generation last logged
  std::atomic<bool> removed_{false};
  std::atomic<Heartbeater*> beat_{nullptr};  // heartbeater_, once Join has stored it (its thread reads it)
  std::unique_ptr<Heartbeater> heartbeater_;  // last: stopped first, before what its callbacks read
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_SERVER_SESSION_H_
