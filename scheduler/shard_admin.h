// ShardAdmin: how the scheduler's job controller (scheduler/job_controller.h) reaches the parameter servers (their Checkpoint and
// Restore admin calls), behind an interface so the coordinator's tests can use in-process servers.
#ifndef KESTREL_SCHEDULER_SHARD_ADMIN_H_
#define KESTREL_SCHEDULER_SHARD_ADMIN_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/security/credentials.h"
#include "proto/checkpoint.pb.h"
#include "proto/ps.pb.h"

namespace kestrel {

// Thread-safe: the coordinator calls every server concurrently.
class ShardAdmin {
 public:
  virtual ~ShardAdmin() = default;
  // Server `shard` at `address` writes its part of checkpoint `name` (cut at `clock`). With `copy_on_write` it
  // answers once the cut is marked (the answer holds shard, dir and cut_seconds) and writes in the background:
  // AwaitCheckpoint then answers the written part.
  virtual absl::StatusOr<ShardCheckpoint> Checkpoint(int shard, const std::string& address, const std::string& name,
                                                     int64_t clock, bool copy_on_write) = 0;
  // Waits for server `shard` to finish writing the copy-on-write checkpoint `name` it cut, and answers its part.
  virtual absl::StatusOr<ShardCheckpoint> AwaitCheckpoint(int shard, const std::string& address,
                                                          const std::string& name) = 0;
  // The scheduler is shutting down: AwaitCheckpoint calls in flight and later ones end at once (Cancelled).
  virtual void CancelAwaits() {}
  // Server `shard` replaces its state with its part of committed checkpoint `request.name()` ("" = empty tables)
  // and refuses worker requests older than `request.min_worker_generation()`; with request.layout_generation()
  // set, it does so in that new layout, as the rank the request names (ParameterServer.Restore). The header is
  // the admin's.
  virtual absl::Status Restore(int shard, const std::string& address, RestoreShardRequest request) = 0;
  // Re-replication: server `source` at `address`, the primary of `owner`'s range group, copies the group whole
  // to server `target` at `target_address`. Returns the rows copied.
  virtual absl::StatusOr<uint64_t> CopyGroup(int source, const std::string& address, int owner, int target,
                                             const std::string& target_address) = 0;
  // The sum of the fingerprints of every table of server `shard`'s own range group (ParameterServer.Stats).
  virtual absl::StatusOr<uint64_t> Fingerprint(int shard, const std::string& address) = 0;
  // Rescale: one phase of a rescale (ParameterServer.RescaleShard) on server `shard` at `address`.
  virtual absl::StatusOr<RescaleShardResponse> Rescale(int shard, const std::string& address,
                                                       RescaleShardRequest request) = 0;
};

// Over gRPC (ParameterServer.Checkpoint / Restore); each call has `deadline`. Channels are cached by address
// and use `credentials` (null: plaintext).
std::unique_ptr<ShardAdmin> NewGrpcShardAdmin(const std::string& job_id, absl::Duration deadline,
                                              std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_SHARD_ADMIN_H_
