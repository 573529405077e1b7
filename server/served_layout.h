// ServedLayout: the range groups a server serves now, the layout (rescale generation) they are of, and the
// scheduler's job view applied to them (docs/elasticity.md).
#ifndef KESTREL_SERVER_SERVED_LAYOUT_H_
#define KESTREL_SERVER_SERVED_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/peer_identity.h"
#include "server/hosted_shards.h"

namespace kestrel {

class PeerLinks;

// The groups are swapped whole at a rescale's switch; a reader takes a shared_ptr snapshot (hosted()), so a
// call in flight during a switch finishes on the old groups. A server the new layout leaves out has left().
// The job view and the listeners set here are handed to every group set adopted later.
//
// Thread-safe. Shares ownership of the groups served; does not own `peers`.
class ServedLayout {
 public:
  // Serves `hosted` as layout 0. `peers` (may be null without replication) is resized to every adopted
  // layout's server count.
  ServedLayout(std::shared_ptr<HostedShards> hosted, PeerLinks* peers);

  ServedLayout(const ServedLayout&) = delete;
  ServedLayout& operator=(const ServedLayout&) = delete;

  // The range groups served now.
  std::shared_ptr<HostedShards> hosted() const;
  // The rescales this server has switched to (0: the layout it started with).
  uint64_t generation() const;
  // The last rescale left this server out: it serves nothing.
  bool left() const;

  // The scheduler's job view, for the groups served now and after every switch (HostedShards::SetJobView /
  // SetGenerationListener). `layout_generation`: the layout the view is of (a HeartbeatResponse's); a view of an
  // older layout than the one served is ignored (it was in flight across a switch, and names the ranks as they
  // were), as is one naming more worker ids than a job may have workers. `worker_ids`: by worker rank, the id
  // each worker's certificate names (ClusterView.worker_ids; empty: every worker's id is its rank), which
  // workers' requests are checked against.
  void SetJobView(uint64_t job_generation, const std::vector<uint64_t>& worker_generations,
                  uint64_t layout_generation, const std::vector<int>& worker_ids);
  void SetGenerationListener(std::function<void()> listener);
  // Runs after every Adopt with the new groups.
  void SetSwitchListener(std::function<void(HostedShards&)> listener);
  // Serves `groups`, the layout of rescale `layout_generation`, from now on: they get the job view and the
  // generation listener, the peers are resized, then the switch listener runs (e.g. to attach the disk tier and
  // the failure listener). `worker_ids`: as for SetJobView. Also before serving anything, for a server
  // registering with a job rescaled since it started (server/server_session.h).
  void Adopt(std::shared_ptr<HostedShards> groups, uint64_t layout_generation, const std::vector<int>& worker_ids);
  // Rescale `layout_generation` keeps the groups served (BSP's worker count changed in place).
  void AdvanceKeepingGroups(uint64_t layout_generation, std::vector<int> worker_ids);
  // Rescale `layout_generation` left this server out: it serves nothing from now on.
  void Leave(uint64_t layout_generation);

  // PERMISSION_DENIED unless a worker caller's certificate names the id of the worker rank its request claims
  // (common/peer_identity.h CheckClaimedRank, through the layout's worker ids). Lock-free: every worker request
  // with a certificate reads it.
  [[nodiscard]] absl::Status CheckWorkerCaller(const std::optional<PeerIdentity>& caller, int worker_rank, const char* what) const;

  // InvalidArgument for more worker ids than a job may have workers (a layout from the network).
  [[nodiscard]] static absl::Status CheckWorkerIds(size_t count);

 private:
  void SetWorkerIdsLocked(std::vector<int> ids) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  PeerLinks* const peers_;
  mutable absl::Mutex mu_;
  std::shared_ptr<HostedShards> hosted_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool left_ ABSL_GUARDED_BY(mu_) = false;
  bool job_view_set_ ABSL_GUARDED_BY(mu_) = false;   // SetJobView ran
  uint64_t job_generation_ ABSL_GUARDED_BY(mu_) = 0;  // the last job view (SetJobView)
  std::vector<uint64_t> worker_generations_ ABSL_GUARDED_BY(mu_);
  // By worker rank, each worker's id (null: id == rank). Written under mu_ (atomic_store), read without it
  // (atomic_load) on the hot path.
  std::shared_ptr<const std::vector<int>> worker_ids_;
  std::function<void()> generation_listener_ ABSL_GUARDED_BY(mu_);
  std::function<void(HostedShards&)> switch_listener_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_SERVED_LAYOUT_H_
