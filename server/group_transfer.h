// GroupTransfer: a whole copy of one range group's rows, sent from a server holding it to one that should
// (re-replication after a server was replaced: CopyGroup on the sender, ReceiveGroup on the receiver).
#ifndef KESTREL_SERVER_GROUP_TRANSFER_H_
#define KESTREL_SERVER_GROUP_TRANSFER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/ps.pb.h"
#include "server/hosted_shards.h"
#include "server/shard.h"

namespace kestrel {

class PeerLinks;

// The receiver stages one copy at a time, piece by piece in order, and installs it into its copy of the group
// with the last piece; a copy restarted from piece 0 replaces the one staged.
//
// Thread-safe (Receive runs on handler threads; Send on the admin thread, blocking for the whole copy). Owns
// the rows staged; does not own `peers`.
class GroupTransfer {
 public:
  // `job_id`: the pieces' header. `peers` (may be null: this server sends no copies) reaches the receiver.
  GroupTransfer(std::string job_id, PeerLinks* peers);

  GroupTransfer(const GroupTransfer&) = delete;
  GroupTransfer& operator=(const GroupTransfer&) = delete;

  // Sends `request.owner()`'s group, whole and at one cut, to the server at `request.target_address()`.
  [[nodiscard]] absl::Status Send(const HostedShards& hosted, const CopyGroupRequest& request, CopyGroupResponse* response);
  // Stages one piece of a group copy (chunk.layout_generation() == 0); installs the copy with its last piece
  // (into *installed: rows). FailedPrecondition for a piece out of order, ResourceExhausted (the copy is
  // dropped) past the staging bound, InvalidArgument for a piece that is not whole rows of a table of the copy
  // or a row outside the group's ranges.
  [[nodiscard]] absl::Status Receive(const HostedShards& hosted, const GroupChunk& chunk, uint64_t* installed);

  // Most bytes of rows a copy being received may stage before it is installed. Set before serving.
  // Default: 16 GiB.
  void set_max_staged_bytes(uint64_t bytes) { max_staged_bytes_ = bytes; }

 private:
  struct Piece {
    int owner = -1;
    std::string table;
    std::string keys, rows;
  };
  struct IncomingCopy {
    int owner = -1;
    uint64_t next_sequence = 0;
    std::vector<TableConfig> tables;
    int64_t complete_clocks = 0;  // GroupChunk.complete_clocks
    std::vector<Piece> pieces;
    bool done = false;  // its last piece arrived
  };

  // Checks one piece against `copy` (its sequence, tables, whole rows, the staging bound) and stages it.
  [[nodiscard]] absl::Status StagePieceLocked(const GroupChunk& chunk, IncomingCopy* copy) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replaces `group`'s state with the rows of `pieces` (InvalidArgument for a row outside its ranges); returns
  // the rows installed.
  [[nodiscard]] static absl::StatusOr<uint64_t> Install(Shard& group, const std::vector<TableConfig>& tables,
                                          const std::vector<const Piece*>& pieces);
  void DropCopyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string job_id_;
  PeerLinks* const peers_;
  uint64_t max_staged_bytes_ = uint64_t{16} << 30;
  absl::Mutex mu_;
  std::optional<IncomingCopy> incoming_ ABSL_GUARDED_BY(mu_);
  uint64_t staged_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // in incoming_
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_GROUP_TRANSFER_H_
