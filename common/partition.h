// Partitioning: the one place in Kestrel that maps keys to servers.
//
// The 64-bit key space is cut into contiguous, non-overlapping ranges that tile it completely; each range
// belongs to one server, and a server may own several ranges. Feature ids are hashed into the key space with a
// bijection (FeatureKey), so ranges of equal width receive equal shares of the features and distinct features
// never collide. Dense tensors are split into blocks whose keys come from DenseBlockKey, so they are placed by
// exactly the same mechanism.
//
// Replicas (docs/replication.md): each range has `replicas()` copies on distinct servers; replica 0 is its owner,
// replica j the server (owner + j) mod num_servers. Routing adds the servers currently out of service and says
// who serves and who backs up each range (failover order = replica order).
//
// Partition is an immutable value type: thread-safe for concurrent reads, cheap to copy.
#ifndef KESTREL_COMMON_PARTITION_H_
#define KESTREL_COMMON_PARTITION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/hash.h"
#include "common/server_addresses.h"

namespace kestrel {

// A closed key interval [first, last]. Closed so that the range ending at 2^64-1 needs no special case.
struct KeyRange {
  uint64_t first = 0;
  uint64_t last = 0;

  bool Contains(uint64_t key) const { return key >= first && key <= last; }
  // "[0x0000000000000000, 0x7fffffffffffffff]"
  std::string ToString() const;
  friend bool operator==(const KeyRange& a, const KeyRange& b) { return a.first == b.first && a.last == b.last; }
};

class Partition {
 public:
  // The key space cut into num_servers * ranges_per_server ranges of equal width (to within one key);
  // range r belongs to server r % num_servers, so with ranges_per_server > 1 each server holds
  // interleaved slices (useful for later resharding). num_servers in [1, 65536], ranges_per_server in
  // [1, 1024].
  [[nodiscard]] static absl::StatusOr<Partition> Uniform(int num_servers, int ranges_per_server = 1);

  // Explicit ranges, e.g. "0x0-0x7fffffffffffffff:0,0x8000000000000000-0xffffffffffffffff:1": comma-separated
  // `first-last:server` items (hex or decimal). They must be sorted, tile the key space without gaps or
  // overlaps, and name every server in [0, max server] at least once. An optional ";replicas=R" suffix sets
  // the replica count (default 1).
  [[nodiscard]] static absl::StatusOr<Partition> Parse(absl::string_view spec);

  // The same layout with `replicas` copies of every range, in [1, num_servers()].
  [[nodiscard]] absl::StatusOr<Partition> WithReplicas(int replicas) const;

  // The form Parse accepts (the replicas suffix only when replicas() > 1).
  std::string ToString() const;

  int num_servers() const { return num_servers_; }
  // Copies of every range, on distinct servers. 1: no replication.
  int replicas() const { return replicas_; }
  // Replica j (in [0, replicas())) of the range whose owner is `owner`: replica 0 is the owner.
  int ReplicaOfOwner(int owner, int j) const { return (owner + j) % num_servers_; }
  // The ranges of which `server` holds replica j (j = 0: RangesOf), in key order.
  std::vector<KeyRange> ReplicaRangesOf(int server, int j) const;
  int num_ranges() const { return static_cast<int>(ranges_.size()); }
  const std::vector<KeyRange>& ranges() const { return ranges_; }
  const std::vector<int>& owners() const { return owners_; }

  // The server that owns `key`. O(1) for Uniform partitions, O(log ranges) otherwise.
  int OwnerOf(uint64_t key) const {
    if (uniform_) {
      const uint64_t r = static_cast<uint64_t>((static_cast<unsigned __int128>(key) * ranges_.size()) >> 64);
      return static_cast<int>(r % num_servers_);
    }
    return OwnerOfSlow(key);
  }

  // The ranges server `server` owns, in key order.
  std::vector<KeyRange> RangesOf(int server) const;

  // Stable fingerprint of the layout (servers, ranges, owners): equal partitions have equal fingerprints.
  uint64_t Fingerprint() const;

  // Maps an application feature id into the key space (a bijection: distinct ids never collide).
  static uint64_t FeatureKey(uint64_t feature_id) { return Mix64(feature_id); }
  // Maps (field, value) into the key space, e.g. Criteo's categorical field 3 with hashed value v. A bijection
  // of the value within each field; fields are separated by a hashed 64-bit field seed, so small values of
  // different fields (bucket 3 of field 4, bucket 5 of field 6) never meet (a plain `field ^ value` seed would
  // make them collide).
  static uint64_t FieldFeatureKey(uint32_t field, uint64_t value) {
    return Mix64(HashCombine(Mix64(0x6b657374ULL + field), value));
  }
  // Blocks of a dense tensor of `dense_size` floats cut into blocks of `dim` floats (the last one padded).
  static uint64_t DenseBlockCount(uint64_t dense_size, int dim) {
    const uint64_t d = static_cast<uint64_t>(dim);
    return dense_size / d + (dense_size % d != 0 ? 1 : 0);
  }
  // The key of block `block` of dense table `table`.
  static uint64_t DenseBlockKey(absl::string_view table, uint64_t block) {
    return Mix64(HashCombine(Hash64(table), block));
  }

 private:
  Partition(int num_servers, std::vector<KeyRange> ranges, std::vector<int> owners, bool uniform);
  // Parse without the replicas suffix.
  [[nodiscard]] static absl::StatusOr<Partition> ParseRanges(absl::string_view spec);
  int OwnerOfSlow(uint64_t key) const;

  int num_servers_ = 0;
  int replicas_ = 1;
  std::vector<KeyRange> ranges_;  // sorted, tiling [0, 2^64-1]
  std::vector<int> owners_;       // owners_[i] owns ranges_[i]
  bool uniform_ = false;          // ranges_ are the Uniform() cut, owners round-robin
};

// Key ranges whose owner changes between two partitions (elastic rescaling, docs/elasticity.md): the rows of
// `range` move from server `from` (in the old partition) to server `to` (in the new one).
struct RangeMove {
  KeyRange range;
  int from = 0;
  int to = 0;
};

// Every move from `from` to `to`, in key order: the overlaps of their ranges whose owners differ. Together they
// cover exactly the keys whose owner changes; keys that stay put are not in any move.
std::vector<RangeMove> MovesBetween(const Partition& from, const Partition& to);

// A Partition and the servers currently out of service (declared dead and not yet replaced by a synced copy):
// who serves each key (the first of its replicas in service, in replica order) and who backs it up. Every
// process derives the same answers from the same partition and the scheduler's out-of-service set, so two
// processes at the same routing generation never disagree on a range's primary. Immutable value type.
class Routing {
 public:
  // `out_of_service[s]`: server s serves nothing (size num_servers; empty: every server in service).
  [[nodiscard]] static absl::StatusOr<Routing> Create(Partition partition, std::vector<bool> out_of_service = {});

  const Partition& partition() const { return partition_; }
  bool in_service(int server) const { return !out_of_service_[server]; }

  // The server that serves `key` (pulls and pushes), or -1 when every replica of its range is out of service
  // (the job must roll back).
  int ServerOf(uint64_t key) const { return PrimaryOfOwner(partition_.OwnerOf(key)); }
  // The same for the ranges owned by `owner` (all of an owner's ranges share their replica servers).
  int PrimaryOfOwner(int owner) const { return primary_of_owner_[owner]; }
  // The servers in service after the primary that keep copies of `owner`'s ranges, in failover order.
  std::vector<int> BackupsOfOwner(int owner) const;
  // Whether some range has no replica in service.
  bool AnyRangeLost() const;
  // Ranges with fewer replicas in service than the partition's replicas (lost ones included).
  int UnderReplicatedRanges() const;

 private:
  Routing(Partition partition, std::vector<bool> out_of_service);

  Partition partition_;
  std::vector<bool> out_of_service_;  // by server
  std::vector<int> primary_of_owner_;  // by owner: the first replica in service, or -1
};

// The job's current Routing as the scheduler announces it (a routing generation and the servers out of service
// at it), held by every process that routes: workers' clients and servers' forwarding. Announcements arrive
// from heartbeats in any order; an older one than the one held is ignored. Thread-safe.
class RoutingTable {
 public:
  // Generation 0, every server in service.
  explicit RoutingTable(Partition partition);

  // Takes the routing of `generation` unless an equal or newer one is held. InvalidArgument (nothing changes)
  // when `out_of_service` names a server outside the partition.
  [[nodiscard]] absl::Status Update(uint64_t generation, absl::Span<const int> out_of_service);

  // The routing held now; stays valid (and unchanged) however the table moves on.
  std::shared_ptr<const Routing> Current() const;
  uint64_t generation() const;

  // Where the partition's servers serve, as last announced (a replacement server may come back elsewhere).
  ServerAddresses& addresses() { return addresses_; }
  const ServerAddresses& addresses() const { return addresses_; }

 private:
  const Partition partition_;
  ServerAddresses addresses_;
  mutable absl::Mutex mu_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<const Routing> current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kestrel

#endif  // KESTREL_COMMON_PARTITION_H_
