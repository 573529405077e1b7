// HostedShards: the range groups one parameter server holds, and which of them it serves
// (docs/replication.md).
//
// Without replication a server holds one group: its own key ranges. With Partition::replicas() = R it holds R:
// replica 0 of its own ranges, and replica j of the ranges owned by server (self - j) mod n for j = 1..R-1.
// Each group is a Shard created with its owner's index, so the Shard's key checks, statistics and checkpoints
// name the owner; the copies of a group are kept identical because the group's primary forwards every update
// to its backups (server/replication.h) and every copy applies it with the same arithmetic.
//
// Which copy of a group is its primary follows the scheduler's routing (common/partition.h RoutingTable):
// replica order, skipping the servers out of service. A server serves reads and accepts workers' writes only
// for the groups it is primary of; a backup takes writes only from the primary (Replicate).
//
// Thread-safe. Owns the Shards it creates; Single() wraps one the caller owns.
#ifndef KESTREL_SERVER_HOSTED_SHARDS_H_
#define KESTREL_SERVER_HOSTED_SHARDS_H_

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/partition.h"
#include "server/shard.h"

namespace kestrel {

class HostedShards {
 public:
  // The groups server options.owner hosts in `partition` (options.owner names this server; each
  // group's Shard gets its owner's index and otherwise the same options).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<HostedShards>> Create(const ShardOptions& options, Partition partition);
  // One unreplicated shard, owned by the caller (tests, tools): its own group only. It cannot be rescaled.
  static std::unique_ptr<HostedShards> Single(Shard* shard);
  // Owned by the caller as well (server/served_layout.h takes shared ownership of the groups it serves).
  static std::shared_ptr<HostedShards> Unowned(HostedShards* hosted);

  HostedShards(const HostedShards&) = delete;
  HostedShards& operator=(const HostedShards&) = delete;

  // This server's index.
  int server() const { return server_; }
  // The options Create() made the groups with (owner: this server); none for Single().
  const std::optional<ShardOptions>& options() const { return options_; }
  const Partition& partition() const { return own().partition(); }
  bool replicated() const { return partition().replicas() > 1; }
  // The group this server owns (replica 0 of its ranges).
  Shard& own() const { return *shards_.front(); }
  // Every group held, own first.
  const std::vector<Shard*>& shards() const { return shards_; }

  // The group a request names by its owner (RequestHeader.owner; unset: this server's own). InvalidArgument for
  // an owner outside the partition, NotFound for a group this server holds no copy of.
  [[nodiscard]] absl::StatusOr<Shard*> Group(std::optional<int> owner) const;
  // OK when this server is the primary of `owner`'s group at the routing it holds. Otherwise Unavailable
  // naming the primary (the sender's routing or this server's is behind; the listener set with
  // SetGenerationListener is told, so the server asks the scheduler at once).
  [[nodiscard]] absl::Status CheckPrimary(int owner) const;
  // The servers the primary of `owner`'s group forwards its updates to, in failover order (empty without
  // replication or when every backup is out of service).
  std::vector<int> BackupsOf(int owner) const;

  // The routing this server acts on: the scheduler's announcements go here (RoutingTable::Update).
  RoutingTable& routing() { return routing_; }
  uint64_t routing_generation() const { return routing_.generation(); }

  // Forwarded to every group: Shard::SetJobView and Shard::SetGenerationListener (the listener is also told
  // when CheckPrimary fails).
  void SetJobView(uint64_t job_generation, const std::vector<uint64_t>& worker_generations);
  void SetGenerationListener(std::function<void()> listener);

 private:
  HostedShards(int server, std::optional<ShardOptions> options, std::vector<std::unique_ptr<Shard>> owned,
               std::vector<Shard*> shards, std::vector<int> group_of_owner);

  const int server_;
  const std::optional<ShardOptions> options_;
  const std::vector<std::unique_ptr<Shard>> owned_;
  const std::vector<Shard*> shards_;
  const std::vector<int> group_of_owner_;  // by owner: index into shards_, or -1 (no copy held here)
  RoutingTable routing_;
  mutable absl::Mutex listener_mu_;
  std::function<void()> listener_ ABSL_GUARDED_BY(listener_mu_);
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_HOSTED_SHARDS_H_
