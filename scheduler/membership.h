// Membership: who belongs to the job, who is alive, and the job generation. The scheduler's core (no gRPC).
//
// The facade over the job's members: it owns the one mutex, the member tables (by rank), the job generation and
// state, and three parts it holds under that mutex, one concept each: when silence is death (LivenessJudge,
// scheduler/liveness_judge.h), which servers serve (ServerRouting, scheduler/server_routing.h), and the layout
// across rescales (RescaleLayout, scheduler/rescale_layout.h).
//
// Servers and workers register with a role and a requested rank (or none) and receive a rank and an
// incarnation: 16 random bytes naming that registration, a secret between the member and the scheduler that
// every later call (Heartbeat, CheckWorker) must present. They then heartbeat. A member silent for longer than
// heartbeat_timeout is declared dead by ExpireSilent(); its replacement may register with the same rank.
//
// The job generation starts at 1 and increases whenever membership changes after a failure: when a member is
// declared dead, and when a replacement joins. Each registration records the generation it produced; a
// worker's requests carry it and must match it exactly: they are refused (FailedPrecondition) once that rank
// has registered again or was declared dead, so a revived zombie cannot act, while other members' failures do
// not disturb it.
//
// Job states: kForming until every rank has registered once, then kRunning; kRecovering while a rank is dead
// or its replacement has not yet rejoined, kRunning again once all are alive; kFinished once every worker
// reported its last iteration (MarkWorkerDone), after which members leaving is not a failure.
// A rollback (BeginRollback .. EndRollback, driven by scheduler/recovery.h) keeps the job
// kRecovering until every server has restored the checkpoint, whoever is alive.
//
// Routing (replicated jobs, docs/replication.md). A dead server whose ranges all have a copy elsewhere is
// failed over instead (FailOver): it goes out of service, the routing generation moves, and the job runs on
// without it (kRunning once every other member is alive; its replacement may register but serves nothing). A
// rollback puts every server back in service. (ServerRouting keeps who is out of service.)
//
// Ranks and ids. A member's rank is its place in the job's layout: ranks are dense (0 .. n-1) because the
// partition's owners, BSP's rank order and the workers' data shares are indexed by them. A member's id is the
// rank its certificate names (spiffe://kestrel/<job>/<role>/<id>, common/peer_identity.h): the rank it asks for
// when it registers (--rank, --rank), fixed for the life of the process. A job starts with rank == id;
// a rescale that removes a rank from the middle (an elastic job dropping a member that did not come back)
// renumbers the ranks above it, so their ids no longer equal their ranks. The layout records each rank's id;
// Register, Heartbeat and Rejoin name the member by id, WaitToStart, Advance and the servers' requests by rank
// (checked against the certificate through the layout's ids).
//
// Rescales (docs/elasticity.md). BeginScale names new server and worker counts, and optionally ranks to remove:
// ids outside the job may then register as joining members (they heartbeat, but the job neither waits for them
// nor fails over them; they take the new ranks in the order of their ids). CommitScale makes the new layout the
// job's (MapRanks): the ranks kept keep their order, joining members follow, removed members' heartbeats are
// answered OutOfRange (they exit, they did not fail), and the layout generation moves. CancelScale removes the
// joining members instead. The job's layout (its counts, partition and ids) lives here, the one place every
// other part of the scheduler reads it from. Elastic jobs: DeadFor() names the members dead for longer than a
// timeout, which the job controller removes with such a rescale; an id removed that way that registers again is
// answered OutOfRange (it exits 0). (RescaleLayout keeps the pending rescale, its joining members and those
// removed.)
//
// Thread-safe. Time is passed in (absl::Time now), so tests control it.
#ifndef KESTREL_SCHEDULER_MEMBERSHIP_H_
#define KESTREL_SCHEDULER_MEMBERSHIP_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/liveness_judge.h"
#include "scheduler/member.h"
#include "scheduler/rescale_layout.h"
#include "scheduler/server_routing.h"

namespace kestrel {

enum class JobState { kForming, kRunning, kRecovering, kFinished };

const char* JobStateName(JobState state);

// The clock the scheduler passes Membership's `now` from: monotonic (a wall-clock step, e.g. NTP, must not
// declare everyone dead), as an absl::Time that only means something compared with another of its values.
absl::Time MonotonicNow();

struct MembershipOptions {
  // Ranks of each role the job needs, >= 1. Defaults: 1 server, 1 worker.
  int num_servers = 1;
  int num_workers = 1;
  // Members send a heartbeat every heartbeat_interval; one silent for longer than heartbeat_timeout is
  // declared dead. With the scheduler checking every interval / 4, a member is declared dead within
  // timeout + interval / 4 of its last heartbeat. Defaults: 1 s and 1.5 s, so within 2 intervals.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration heartbeat_timeout = absl::Milliseconds(1500);
  // Stalls of the scheduler itself (a VM pause, SIGSTOP, a starved process): when two ExpireSilent() calls are
  // further apart than this, the scheduler did not run in between, and members are judged by the time it was
  // running: the gap's excess over this threshold counts for nobody's silence (one silent before the stall keeps
  // that silence), so nobody is declared dead for heartbeats the scheduler could not hear. kestrel_scheduler
  // checks every heartbeat_interval / 4 and sets heartbeat_interval / 2. Default: InfiniteDuration (no stall is
  // assumed; callers that pass their own times, like tests, see plain timeouts).
  absl::Duration stall_threshold = absl::InfiniteDuration();
  // Partitions of the scheduler itself (its host cut off from the network): with a finite deaf_grace, a member
  // silent past heartbeat_timeout is declared dead only once the scheduler has heard someone (a heartbeat or a
  // registration, from any member) after that member's deadline: silence the scheduler cannot compare with anyone
  // else's voice may be its own deafness. After it heard no one for longer than heartbeat_timeout, the first
  // message it hears gives every member deaf_grace from then to be heard (links come back, channels reconnect).
  // kestrel_scheduler sets it (--deaf_grace). Default: InfiniteDuration (the rule is off: plain timeouts, for
  // callers that pass their own times, like tests).
  absl::Duration deaf_grace = absl::InfiniteDuration();
  // Rescales the job had before this scheduler started (a resume from a checkpoint of a rescaled job).
  // Default: 0.
  uint64_t layout_generation = 0;
  // By rank, the id (certificate rank) of each rank, as of that rescale (CheckpointManifest.server_ids /
  // worker_ids). Default: empty = every rank's id is the rank.
  std::vector<int> server_ids;
  std::vector<int> worker_ids;
};

// The longest address a member may register with (a DNS name is at most 253 bytes; a Unix socket path 108).
inline constexpr size_t kMaxAddressBytes = 512;

struct Registration {
  int rank = -1;
  std::string incarnation;
  uint64_t generation = 0;
  JobState state = JobState::kForming;
  bool joining = false;  // a rank of a pending rescale (BeginScale), not yet of the job
  int id = -1;           // the member's id (the requested one, or the one taken for -1)
};

// The members to remove from an elastic job (Membership::DeadFor).
struct DeadMembers {
  std::vector<int> servers;  // ranks, increasing
  std::vector<int> workers;
  bool empty() const { return servers.empty() && workers.empty(); }
};

class Membership {
 public:
  // `partition`: the job's key partition (Partition::ToString()).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Membership>> Create(const MembershipOptions& options,
                                                            std::string partition = "");

  // Registers the member whose id (certificate rank) is `requested_id` and answers its rank. requested_id -1
  // takes the lowest rank never registered, else the lowest dead one. AlreadyExists when the id is held by a
  // live member; ResourceExhausted when every rank is; InvalidArgument for an id out of range, a server
  // without an address, or an address longer than kMaxAddressBytes (a worker's may be empty). During a pending
  // rescale, ids outside the job register as joining members (up to its counts); otherwise they are answered
  // Unavailable (they retry until a rescale names them), or OutOfRange when an elastic rescale removed that id (it
  // exits).
  [[nodiscard]] absl::StatusOr<Registration> Register(Role role, absl::string_view address, int requested_id, absl::Time now);

  // Records a heartbeat of the member with id `id` and returns the current generation (and, in *rank, the
  // member's rank now: a rescale may have renumbered it). InvalidArgument when `incarnation` is not
  // kIncarnationBytes long; FailedPrecondition when it is not this id's current incarnation (superseded by a
  // newer registration, never issued) or the member was declared dead (it must register again).
  // `routing_generation`: the routing the member acts on (servers of replicated jobs). OutOfRange: a rescale
  // removed this member (it exits; not a failure).
  [[nodiscard]] absl::StatusOr<uint64_t> Heartbeat(Role role, int id, absl::string_view incarnation, absl::Time now,
                                     uint64_t routing_generation = 0, int* rank = nullptr);

  // Declares dead every live member silent for longer than heartbeat_timeout, and returns them. A gap since the
  // previous call longer than stall_threshold is a stall of the scheduler: its excess over the threshold counts
  // for nobody's silence (stalled()).
  std::vector<Member> ExpireSilent(absl::Time now);
  // The scheduler's stalls ExpireSilent did not count as anyone's silence, in all.
  absl::Duration stalled() const {
    absl::MutexLock lock(&mu_);
    return liveness_.stalled();
  }
  // Periods in which the scheduler heard no member for longer than heartbeat_timeout (deaf_grace), in all.
  int64_t deaf_periods() const {
    absl::MutexLock lock(&mu_);
    return liveness_.deaf_periods();
  }
  // Elastic jobs: the job's members declared dead at least `timeout` before `now` and not registered again
  // since (none while the job forms or after it finished).
  DeadMembers DeadFor(absl::Duration timeout, absl::Time now) const;

  // Worker `rank` has finished its last iteration; returns the job state (kFinished once all have).
  [[nodiscard]] absl::StatusOr<JobState> MarkWorkerDone(int rank);
  // Worker `rank` needs the servers no more and exits: no longer a live member, and not a death.
  // FailedPrecondition unless the job is kFinished.
  [[nodiscard]] absl::Status MarkWorkerLeft(int rank);
  // Some worker rank is alive (registered, and neither declared dead nor left).
  bool AnyWorkerAlive() const;
  // Rank `rank` of `role` is a live member of the job.
  bool Alive(Role role, int rank) const;

  // FailedPrecondition when worker `rank` is not alive (declared dead: register again), `incarnation` is not
  // its current one or `generation` is not exactly the one its requests must carry (an older one: a superseded
  // incarnation). Deaths of other members do not matter.
  [[nodiscard]] absl::Status CheckWorker(int rank, absl::string_view incarnation, uint64_t generation) const;
  // By worker rank: the generation each rank's requests must carry (0: never registered).
  std::vector<uint64_t> WorkerGenerations() const;

  // The job rolls back to a checkpoint: a new generation that every worker rank is moved to (so requests of
  // the old timeline are refused), no worker is done any more, and the job stays kRecovering until
  // EndRollback(). Returns the new generation.
  uint64_t BeginRollback();
  // `finished`: the checkpoint restored is the one cut when every worker was done, so the job is kFinished
  // again (every worker done); else kRunning once every member is alive.
  void EndRollback(bool finished = false);
  bool rolling_back() const;
  // Some server rank has registered and is not alive, or one was declared dead (after the job formed) since the
  // last BeginRollback: a replacement that registered meanwhile holds none of the lost rows.
  // Servers out of service do not count: they were failed over.
  bool AnyServerDead() const;
  bool AllServersAlive() const;

  // Puts every dead server (or one declared dead whose replacement registered since) out of service (a new
  // routing generation) and returns them, if `covered` says the resulting out-of-service set (by server rank)
  // leaves every range a copy; the job is kRunning again once every other member is alive. Nothing changes (and none is returned) when no server is dead or `covered`
  // refuses. `covered` runs under the membership's lock: it must not call back.
  std::vector<int> FailOver(absl::FunctionRef<bool(const std::vector<bool>& out_of_service)> covered);
  RoutingState routing() const;
  // By rank of `role`: the address each live member registered with ("" for a rank not alive).
  std::vector<std::string> LiveAddresses(Role role) const;
  // By server rank: where each live server serves ("" for a rank not alive).
  std::vector<std::string> LiveServerAddresses() const { return LiveAddresses(Role::kServer); }
  // Re-replication: server `rank` (alive, out of service) holds synced copies of its groups now; it serves again
  // in a new routing generation, which is returned. FailedPrecondition when it is not alive and out of service.
  [[nodiscard]] absl::StatusOr<uint64_t> PutBackInService(int rank);
  // Every live server's heartbeat said it acts on routing generation >= `generation`.
  bool ServersAtRouting(uint64_t generation) const;

  // Rescales. BeginScale: FailedPrecondition unless the job is running with no rescale pending and no server
  // out of service; InvalidArgument for counts out of range or a target that changes nothing. A target that
  // removes ranks (every one dead, none joining) may also begin while the job recovers, rolls back, or has the
  // removed servers out of service.
  [[nodiscard]] absl::Status BeginScale(ScaleTarget target);
  std::optional<ScaleTarget> pending_scale() const;
  // Every joining rank of the pending rescale is alive (false when none is pending).
  bool ScaleReady() const;
  // By rank, where each server of the pending rescale's layout serves ("" for one not alive): the job's servers
  // below both counts, joining ones above.
  std::vector<std::string> TargetServerAddresses() const;
  // The pending rescale becomes the job's layout, with `partition` (ranks mapped as MapRanks says); a new
  // routing generation, which is returned. Workers whose rank changed move to a new generation (their requests
  // of the old layout are refused; they rejoin). FailedPrecondition when none is pending.
  [[nodiscard]] absl::StatusOr<uint64_t> CommitScale(const std::string& partition);
  // Drops the pending rescale: joining members are removed.
  void CancelScale();
  // By rank, the ids of `role` in the pending rescale's layout (the job's when none is pending; -1 for a joining
  // rank not registered yet).
  std::vector<int> TargetIds(Role role) const;
  JobLayout layout() const;

  uint64_t generation() const;
  JobState state() const;
  const MembershipOptions& options() const { return options_; }
  // Every rank registered so far, servers first, by rank.
  std::vector<Member> Members() const;

 private:
  Membership(const MembershipOptions& options, std::string partition);
  std::vector<Member>& RanksLocked(Role role) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return role == Role::kServer ? servers_ : workers_;
  }
  const std::vector<Member>& RanksLocked(Role role) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return role == Role::kServer ? servers_ : workers_;
  }
  // Register for an id outside the job (`count`: the job's ranks of `role`): a joining member of the pending
  // rescale, or refused (Unavailable; OutOfRange for an id an elastic rescale removed).
  [[nodiscard]] absl::StatusOr<Registration> JoinLocked(Role role, absl::string_view address, int id, int count, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The member with id `id` for a heartbeat: of the job, joining, or null; *removed when a rescale removed the
  // registration `incarnation` names.
  Member* FindLocked(Role role, int id, absl::string_view incarnation, bool* removed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A registration takes `m`: a new incarnation, alive from `now` (its rank and generation are the caller's).
  void ClaimLocked(Member& m, Role role, int id, absl::string_view address, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job rank whose id is `id`, or -1.
  int RankOfIdLocked(Role role, int id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string NewIncarnationLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AllAliveLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Every member (the job's and the joining ones), to move its last heartbeat (LivenessJudge).
  void ForEachMemberLocked(absl::FunctionRef<void(Member&)> visit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A Heartbeat or Register call arrived at `now` (deaf_grace): ends a deaf period, giving every member the grace.
  void HeardLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FailedPrecondition unless `incarnation` is `m`'s (compared in constant time).
  [[nodiscard]] static absl::Status CheckIncarnation(const Member& m, absl::string_view incarnation);

  const MembershipOptions options_;
  mutable absl::Mutex mu_;
  std::vector<Member> servers_ ABSL_GUARDED_BY(mu_);  // index = rank; rank -1 = never registered (id is set)
  std::vector<Member> workers_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 1;
  LivenessJudge liveness_ ABSL_GUARDED_BY(mu_);  // when silence is death (stalls, deafness)
  std::vector<bool> done_ ABSL_GUARDED_BY(mu_);  // per worker rank
  std::random_device random_ ABSL_GUARDED_BY(mu_);  // incarnations (see Register)
  JobState state_ ABSL_GUARDED_BY(mu_) = JobState::kForming;
  bool rolling_back_ ABSL_GUARDED_BY(mu_) = false;
  ServerRouting routing_ ABSL_GUARDED_BY(mu_);  // failed-over and lost servers, the routing generation
  RescaleLayout rescale_ ABSL_GUARDED_BY(mu_);  // partition, pending rescale, joining and removed members
};

}  // namespace kestrel

#endif  // KESTREL_SCHEDULER_MEMBERSHIP_H_
