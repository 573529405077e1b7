// CheckpointRestore: the scheduler's Checkpoint and Restore calls on the groups a server serves: write the own
// group to the checkpoint store, or load a checkpoint (or empty tables) into every group held, possibly into the
// groups of a new layout (a rollback across a rescale).
#ifndef KESTREL_SERVER_CHECKPOINT_RESTORE_H_
#define KESTREL_SERVER_CHECKPOINT_RESTORE_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/ps.pb.h"
#include "server/hosted_shards.h"
#include "server/shard_store.h"

namespace kestrel {

class ServedLayout;

// Checkpoint and Restore each take seconds of disk work: they run on the admin thread, one at a time, never
// on a gRPC thread. Not thread-safe for concurrent calls (the admin thread serializes them); does not own
// `layout` or `store`, which must outlive it.
class CheckpointRestore {
 public:
  // `store` may be null (no --checkpoint_dir): Checkpoint is then refused, and only Restore to empty tables
  // (a rollback without checkpoints) works. `layout`: a restore into a new layout is adopted there.
  CheckpointRestore(ServedLayout* layout, ShardStore* store) : layout_(layout), store_(store) {}

  // Writes the own group of `hosted` as checkpoint `request.name()`. With request.copy_on_write(), only cuts it
  // (ShardStore::BeginCheckpoint): the caller must then run WriteCut (the admin thread's next task), whose result
  // Await answers.
  [[nodiscard]] absl::Status Checkpoint(const HostedShards& hosted, const CheckpointShardRequest& request,
                          CheckpointShardResponse* response);
  // Writes the pending copy-on-write cut, keeping the result for Await.
  void WriteCut();
  // The result of the last WriteCut, when it was of checkpoint `request.name()`; else FailedPrecondition.
  [[nodiscard]] absl::Status Await(const AwaitCheckpointRequest& request, CheckpointShardResponse* response);
  // Restores `request.name()` (empty: empty tables) into every group of `served`, or into the groups of the new
  // layout the request names, which are served from then on.
  [[nodiscard]] absl::Status Restore(const HostedShards& served, const RestoreShardRequest& request,
                       RestoreShardResponse* response);

 private:
  // Restore into a new layout (RestoreShardRequest.layout_generation): builds the groups of rank `rank` of it;
  // null when the request names none, or the layout served already.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<HostedShards>> GroupsForRestore(const HostedShards& hosted,
                                                                 const RestoreShardRequest& request) const;

  // Counts a written checkpoint part in the server's metrics.
  static void Record(const ShardCheckpoint& written, absl::Duration took);

  ServedLayout* const layout_;
  ShardStore* const store_;
  absl::Time cut_start_;          // of the pending cut
  std::string written_name_;      // the last copy-on-write cut written (or whose write failed)
  absl::StatusOr<ShardCheckpoint> written_ = absl::FailedPreconditionError("no copy-on-write checkpoint cut");
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_CHECKPOINT_RESTORE_H_
