// ServerAdmin: how the scheduler's job controller (scheduler/job_controller.h) reaches the parameter servers (their
// checkpoint, restore, group copy and rescale admin calls), as an interface: scheduler/server_admin_client.h
// makes the gRPC one, and the job controller's tests use in-process servers.
#ifndef KESTREL_SCHEDULER_SERVER_ADMIN_H_
#define KESTREL_SCHEDULER_SERVER_ADMIN_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/checkpoint.pb.h"
#include "proto/ps.pb.h"

namespace kestrel {

// Thread-safe: the job controller calls every server concurrently.
class ServerAdmin {
 public:
  virtual ~ServerAdmin() = default;
  // Server `server` at `address` writes its part of checkpoint `name` (cut at `clock`). With `copy_on_write` it
  // answers once the cut is marked (the answer holds the server's rank, dir and cut_seconds) and writes in the background:
  // AwaitCheckpoint then answers the written part.
  [[nodiscard]] virtual absl::StatusOr<ShardCheckpoint> Checkpoint(int server, const std::string& address, const std::string& name,
                                                     int64_t clock, bool copy_on_write) = 0;
  // Waits for server `server` to finish writing the copy-on-write checkpoint `name` it cut, and answers its part.
  [[nodiscard]] virtual absl::StatusOr<ShardCheckpoint> AwaitCheckpoint(int server, const std::string& address,
                                                          const std::string& name) = 0;
  // The scheduler is shutting down: AwaitCheckpoint calls in flight and later ones end at once (Cancelled).
  virtual void CancelAwaits() {}
  // Server `server` replaces its state with its part of committed checkpoint `request.name()` ("" = empty tables)
  // and refuses worker requests older than `request.min_worker_generation()`; with request.layout_generation()
  // set, it does so in that new layout, as the rank the request names (ParameterServer.Restore). The header is
  // the admin's.
  [[nodiscard]] virtual absl::Status Restore(int server, const std::string& address, RestoreShardRequest request) = 0;
  // Re-replication: server `source` at `address`, the primary of `owner`'s range group, copies the group whole
  // to server `target` at `target_address`. Returns the rows copied.
  [[nodiscard]] virtual absl::StatusOr<uint64_t> CopyGroup(int source, const std::string& address, int owner, int target,
                                             const std::string& target_address) = 0;
  // The sum of the fingerprints of every table of server `server`'s own range group (ParameterServer.Stats).
  [[nodiscard]] virtual absl::StatusOr<uint64_t> Fingerprint(int server, const std::string& address) = 0;
  // Rescale: one phase of a rescale (ParameterServer.RescaleShard) on server `server` at `address`.
  [[nodiscard]] virtual absl::StatusOr<RescaleShardResponse> Rescale(int server, const std::string& address,
                                                       RescaleShardRequest request) = 0;
};

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_SERVER_ADMIN_H_
