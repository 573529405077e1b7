// ServerAddresses: where each server of the job serves, by server rank, as the scheduler last announced it. The
// one address book of a process and its one update rule: workers' clients dial from it (through their
// RoutingTable), servers forward to their backups from it (server/replication.h PeerServers).
#ifndef KESTREL_COMMON_SERVER_ADDRESSES_H_
#define KESTREL_COMMON_SERVER_ADDRESSES_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kestrel {

// Thread-safe. Announcements (ClusterView.server_addresses, heartbeat answers, rescale requests) arrive by rank,
// "" for a server that is not alive now.
class ServerAddresses {
 public:
  // `num_servers` ranks, none announced yet.
  explicit ServerAddresses(int num_servers);

  // A rescale changed the job's server count: ranks beyond it are dropped, new ranks start unannounced.
  void Resize(int num_servers);

  // Takes an announcement. A named address replaces the rank's last one and marks it alive; "" marks it not alive
  // and keeps its last address (a replacement may come back there). Entries beyond the server count are
  // ignored. version() moves whenever some rank's last address changes.
  void Update(const std::vector<std::string>& announced);

  // By rank: the last address announced ("" for a rank never announced).
  std::vector<std::string> Last() const;
  // The address of `server` if the last announcement named it alive, else "" (also for a rank out of range).
  std::string IfAlive(int server) const;
  int num_servers() const;
  uint64_t version() const { return version_.load(std::memory_order_acquire); }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> last_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> alive_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> version_{0};
};

}  // namespace kestrel

#endif  // KESTREL_COMMON_SERVER_ADDRESSES_H_
