// RescaleParticipant: one server's part in a rescale (docs/elasticity.md), the RescaleShard phases the
// scheduler's job controller drives: SEND its rows to their servers in the new layout, stage the rows received
// into the new groups, INSTALL them, SWITCH to them (or ABORT), and FENCE / COMPLETE removed BSP workers' clock.
#ifndef KESTREL_SERVER_RESCALE_PARTICIPANT_H_
#define KESTREL_SERVER_RESCALE_PARTICIPANT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/partition.h"
#include "proto/ps.pb.h"
#include "server/hosted_shards.h"
#include "server/shard_store.h"

namespace kestrel {

class PeerLinks;
class ServedLayout;

// The new layout's groups are built from the first piece of rows received and loaded as pieces arrive (from
// every sender at once); INSTALL checks every sender's last piece is in and keeps them aside; SWITCH hands
// them to the ServedLayout. A rescale that leaves this server out makes it serve nothing from SWITCH on.
//
// Thread-safety: Handle runs on the admin thread only (one phase at a time, in arrival order); Receive runs on
// any handler thread, concurrently with Handle and with itself. Owns the groups being built; does not own
// `layout`, `store` or `peers`, which must outlive it.
class RescaleParticipant {
 public:
  // `job_id`: the pieces' header. `layout`: what this server serves, switched by SWITCH. `store` (may be null):
  // rebased at SWITCH. `peers` (may be null: this server sends no rows to others) reaches the other servers,
  // and is told the addresses a replicated job forwards to after SWITCH.
  RescaleParticipant(std::string job_id, ServedLayout* layout, ShardStore* store, PeerLinks* peers);

  RescaleParticipant(const RescaleParticipant&) = delete;
  RescaleParticipant& operator=(const RescaleParticipant&) = delete;

  // Runs the phase `request` names on `hosted`, the groups served now.
  [[nodiscard]] absl::Status Handle(const HostedShards& hosted, const RescaleShardRequest& request, RescaleShardResponse* response);
  // A rescale's piece of rows (chunk.layout_generation() > 0): builds the new groups from the first one, loads
  // the rows into them. Aborted for a piece of an aborted attempt.
  [[nodiscard]] absl::Status Receive(const HostedShards& hosted, const GroupChunk& chunk);

  // Most bytes of rows a rescale may load into this server's new groups. Set before serving. Default: 16 GiB.
  void set_max_bytes(uint64_t bytes) { max_bytes_ = bytes; }

 private:
  // A rescale's new groups, built from the first piece received and loaded as rows arrive, until INSTALL hands
  // them over (once every sender's last piece arrived).
  struct IncomingLayout {
    uint64_t generation = 0;
    uint64_t attempt = 0;
    std::string partition;  // the pieces' (all must agree)
    int bsp_workers = 0;
    int rank = -1;  // this server's in the new layout (the pieces' recipient: all must agree)
    std::shared_ptr<HostedShards> groups;
    struct Sender {
      uint64_t next_sequence = 0;  // pieces accepted
      uint64_t loaded = 0;         // of which: rows loaded
      bool done = false;           // its last piece is in
    };
    std::map<int, Sender> senders;
    uint64_t bytes = 0;  // of rows loaded (bounded by max_bytes_)
  };

  // Receive's steps. CheckPiece: what a piece says of itself (sender and group in range, a rescale ahead of this
  // server's layout). AcceptPieceLocked: takes the piece into the incoming layout (dropping an earlier attempt's),
  // checking its attempt, its sender's order of pieces and the byte bound; answers the groups its rows go to.
  // StartSenderLocked: a sender's first piece, which must name the layout and tables the others name (the first
  // piece of the rescale builds the new groups: StartLayoutLocked). LoadPiece: loads the piece's rows into its group
  // (outside the lock); on failure drops the layout it half loaded.
  [[nodiscard]] absl::Status CheckPiece(const GroupChunk& chunk) const;
  [[nodiscard]] absl::StatusOr<std::shared_ptr<HostedShards>> AcceptPieceLocked(const HostedShards& hosted, const GroupChunk& chunk)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::StatusOr<IncomingLayout::Sender*> StartSenderLocked(const HostedShards& hosted, const GroupChunk& chunk)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::Status StartLayoutLocked(const HostedShards& hosted, const GroupChunk& chunk)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::Status LoadPiece(const std::shared_ptr<HostedShards>& groups, const GroupChunk& chunk) ABSL_LOCKS_EXCLUDED(mu_);

  // The new layout, if this server can move to it.
  [[nodiscard]] absl::StatusOr<Partition> CheckRescale(const HostedShards& hosted, const RescaleShardRequest& request) const;
  // FailedPrecondition when a table keeps rows on disk: a new layout is built in memory only.
  [[nodiscard]] static absl::Status CheckNoDiskTier(const HostedShards& hosted);
  [[nodiscard]] absl::Status Send(const HostedShards& hosted, const RescaleShardRequest& request, RescaleShardResponse* response);
  [[nodiscard]] absl::Status Install(const HostedShards& hosted, const RescaleShardRequest& request,
                       RescaleShardResponse* response);
  [[nodiscard]] absl::Status Switch(const HostedShards& hosted, const RescaleShardRequest& request);
  // SWITCH with keep_groups: the groups stay, BSP's worker count changes in place.
  [[nodiscard]] absl::Status SwitchInPlace(const HostedShards& hosted, const RescaleShardRequest& request);
  void Abort(uint64_t generation, uint64_t attempt);
  // FENCE and COMPLETE (removed BSP workers' half-done clock) on every group held; CheckSettle: the request may
  // act here (the rescale is ahead of this server's layout, which it has not left).
  [[nodiscard]] absl::Status CheckSettle(const RescaleShardRequest& request) const;
  [[nodiscard]] absl::Status Fence(const HostedShards& hosted, const RescaleShardRequest& request, RescaleShardResponse* response);
  [[nodiscard]] absl::Status Complete(const HostedShards& hosted, const RescaleShardRequest& request,
                        RescaleShardResponse* response);
  // FRONTIER and HOLD (removing workers under server-enforced clocks) on every group held.
  [[nodiscard]] absl::Status Frontier(const HostedShards& hosted, const RescaleShardRequest& request,
                                      RescaleShardResponse* response);
  [[nodiscard]] absl::Status Hold(const HostedShards& hosted, const RescaleShardRequest& request);
  void DropLayoutLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { incoming_layout_.reset(); }

  const std::string job_id_;
  ServedLayout* const layout_;
  ShardStore* const store_;
  PeerLinks* const peers_;
  uint64_t max_bytes_ = uint64_t{16} << 30;
  // Admin thread only: the new layout's groups, complete since INSTALL, served from SWITCH.
  uint64_t next_generation_ = 0;
  std::shared_ptr<HostedShards> next_;

  absl::Mutex mu_;
  std::optional<IncomingLayout> incoming_layout_ ABSL_GUARDED_BY(mu_);
  // The last rescale attempt aborted here, (generation, attempt): its late pieces are refused.
  std::pair<uint64_t, uint64_t> aborted_ ABSL_GUARDED_BY(mu_) = {0, 0};
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_RESCALE_PARTICIPANT_H_
