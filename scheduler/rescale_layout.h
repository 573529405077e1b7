// RescaleLayout: the job's layout across rescales (docs/elasticity.md): its partition and layout generation, the
// pending rescale and its joining members, how ranks map from the old layout to the new one, and the members
// rescales removed.
//
// BeginScale (Membership) names new server and worker counts, and optionally ranks to remove (Check, then Begin):
// ids outside the job may then register as joining members, which take the new ranks in the order of their ids
// (Place, RankJoining). Commit makes the new layout the job's (MapRanks): the ranks kept keep their order, joining
// members follow, removed members are remembered (their heartbeats are answered OutOfRange: they exit, they did not
// fail) and the layout generation moves. Cancel removes the joining members instead.
//
// It keeps the joining and removed members; the job's own ranks stay Membership's tables, which Check, Target and
// Commit are given. Owned by Membership and guarded by its mutex; not thread-safe itself.
#ifndef KESTREL_SCHEDULER_RESCALE_LAYOUT_H_
#define KESTREL_SCHEDULER_RESCALE_LAYOUT_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "scheduler/member.h"

namespace kestrel {

// The job's shape: its counts and key partition (common/partition.h Partition::ToString()), as of a rescale.
struct JobLayout {
  int num_servers = 1;
  int num_workers = 1;
  std::string partition;
  uint64_t generation = 0;  // rescales so far
  std::vector<int> server_ids;  // by rank: the id (certificate rank) of each server
  std::vector<int> worker_ids;  // by rank: the id of each worker
  std::vector<uint64_t> worker_generations;  // by rank: WorkerGenerations(), of the same moment
};

// Server and worker counts a rescale moves to.
struct ScaleTarget {
  int servers = 1;
  int workers = 1;
  // Ranks of the job to remove (elastic jobs: members that did not come back; each must be dead), increasing.
  // The other ranks keep their order and are renumbered densely; a smaller count than what remains drops the
  // highest of them too. Default: none.
  std::vector<int> remove_servers;
  std::vector<int> remove_workers;
};

// How the ranks of one role map across a rescale: for each rank of the new layout, the rank it had in the old
// one, or -1 for a joining member. The ranks kept are those below `old_count` not in `removed` (increasing, so
// they keep their order), the first `target` of them; joining members follow. E.g. old_count 3, removed {1},
// target 2: {0, 2}; target 3: {0, 2, -1}.
std::vector<int> MapRanks(int old_count, int target, const std::vector<int>& removed);

class RescaleLayout {
 public:
  // The job's layout as of `generation` rescales, with `partition` (Partition::ToString()); none pending.
  RescaleLayout(std::string partition, uint64_t generation);

  const std::string& partition() const { return partition_; }
  // Rescales committed so far.
  uint64_t generation() const { return generation_; }
  const std::optional<ScaleTarget>& pending() const { return scale_; }

  // The checks of Membership::BeginScale that concern the layout, for the job's ranks `servers` and `workers`:
  // InvalidArgument for counts out of range, ranks to remove that do not increase or lie outside the job, a
  // removal that also adds ranks, or a target that changes nothing; FailedPrecondition for a rank to remove that
  // is alive, or a rescale already pending.
  [[nodiscard]] absl::Status Check(const ScaleTarget& target, const std::vector<Member>& servers,
                     const std::vector<Member>& workers) const;
  // Whether `target` (Check passed) adds ranks to a job of `servers` and `workers` ranks (joining members).
  static bool Grows(const ScaleTarget& target, int servers, int workers);
  // `target` (Check passed) becomes the pending rescale of a job of `servers` and `workers` ranks: one free
  // joining place per rank it adds.
  void Begin(ScaleTarget target, int servers, int workers);
  // Every joining place of the pending rescale holds a live member (false when none is pending).
  bool Ready() const;
  // The pending rescale becomes the layout of the job's ranks `servers` and `workers` (renumbered in place, as
  // MapRanks says; a member never registered keeps rank -1), with `partition`; the members left out are
  // remembered as removed, and the layout generation moves. Returns the workers' MapRanks. A rescale must be
  // pending.
  std::vector<int> Commit(std::vector<Member>& servers, std::vector<Member>& workers, const std::string& partition);
  // Drops the pending rescale: its joining members are removed.
  void Cancel();

  // By rank of the pending rescale's layout of `role` (the job's when none is pending), its members: the job's
  // ranks kept (of `ranks`, the job's ranks of `role`), then the joining places (MapRanks).
  std::vector<const Member*> Target(Role role, const std::vector<Member>& ranks) const;

  // The joining members of `role`: registered ones first, by id (their ranks follow the job's in that order), then
  // free places (rank -1). Empty when no rescale is pending.
  std::vector<Member>& joining(Role role) { return role == Role::kServer ? joining_servers_ : joining_workers_; }
  const std::vector<Member>& joining(Role role) const {
    return role == Role::kServer ? joining_servers_ : joining_workers_;
  }
  // Some joining place of `role` is free.
  bool HasFreePlace(Role role) const;
  // The lowest id of `role` held neither by the job's `ranks` nor by a joining member.
  int LowestFreeId(Role role, const std::vector<Member>& ranks) const;
  // The pending rescale removes rank `rank` of `role` (it may not come back meanwhile).
  bool Removing(Role role, int rank) const;
  // The registered joining member with id `id`, or null.
  Member* FindJoining(Role role, int id);
  // The joining place id `id` registers at: the one it registered at before, else a free one (taken in the order
  // of ids, so the registered ones stay ordered by id), else null.
  Member* Place(Role role, int id);
  // After `claimed` (from Place) registered: every registered joining member of `role` takes its rank, after the
  // job's `job_count` ranks in the order of the places.
  void RankJoining(Role role, int job_count, const Member* claimed);

  // Members rescales removed (newest last; bounded): their heartbeats are answered OutOfRange.
  const std::deque<Member>& removed() const { return removed_; }
  // Id `id` of `role` was removed by an elastic rescale (a dead member that did not come back): registering again
  // is refused.
  bool RemovedId(Role role, int id) const { return removed_ids_.count({role, id}) > 0; }

 private:
  // Moves `m` to the removed members (kept, bounded, so its heartbeats are answered OutOfRange).
  void Remove(Member m);
  // Commit for one role: `ranks` become the first `count` of MapRanks(ranks, count, removed), then `joining`.
  std::vector<int> Relayout(std::vector<Member>& ranks, std::vector<Member>& joining, int count,
                            const std::vector<int>& removed);

  std::string partition_;
  uint64_t generation_ = 0;
  std::optional<ScaleTarget> scale_;
  std::vector<Member> joining_servers_;
  std::vector<Member> joining_workers_;
  std::deque<Member> removed_;  // newest last, at most kMaxRemembered
  // By role. At most kMaxRemembered (later ones are answered Unavailable, as ids outside the job are).
  std::set<std::pair<Role, int>> removed_ids_;
};

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_RESCALE_LAYOUT_H_
