#include "scheduler/membership.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <tuple>
#include <utility>

#include <openssl/crypto.h>

#include "absl/strings/str_format.h"
#include "common/limits.h"
#include "common/status.h"

namespace kestrel {

absl::Time MonotonicNow() {
  return absl::UnixEpoch() + absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kForming:
      return "forming";
    case JobState::kRunning:
      return "running";
    case JobState::kRecovering:
      return "recovering";
    case JobState::kFinished:
      return "finished";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<Membership>> Membership::Create(const MembershipOptions& options,
                                                               std::string partition) {
  if (options.num_servers < 1 || options.num_workers < 1 || options.num_servers > kMaxServers ||
      options.num_workers > kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrFormat("need 1..%d servers and 1..%d workers, got %d and %d", kMaxServers,
                                                      kMaxWorkers, options.num_servers, options.num_workers));
  }
  if (options.heartbeat_interval < absl::Milliseconds(10) || options.heartbeat_timeout < options.heartbeat_interval) {
    return absl::InvalidArgumentError("need heartbeat_interval >= 10ms and heartbeat_timeout >= heartbeat_interval");
  }
  for (auto [ids, count, bound, role] :
       {std::make_tuple(&options.server_ids, options.num_servers, kMaxServers, "server"),
        std::make_tuple(&options.worker_ids, options.num_workers, kMaxWorkers, "worker")}) {
    if (ids->empty()) continue;
    std::set<int> distinct(ids->begin(), ids->end());
    if (static_cast<int>(ids->size()) != count || distinct.size() != ids->size() || *distinct.begin() < 0 ||
        *distinct.rbegin() >= bound) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the %s ids must be %d distinct ids in [0, %d), one per rank", role, count, bound));
    }
  }
  return std::unique_ptr<Membership>(new Membership(options, std::move(partition)));
}

Membership::Membership(const MembershipOptions& options, std::string partition)
    : options_(options),
      liveness_(options.heartbeat_timeout, options.stall_threshold, options.deaf_grace),
      routing_(options.num_servers),
      rescale_(std::move(partition), options.layout_generation) {
  absl::MutexLock lock(&mu_);
  servers_.resize(options.num_servers);
  workers_.resize(options.num_workers);
  done_.assign(options.num_workers, false);
  for (auto [ranks, ids, role] : {std::make_tuple(&servers_, &options.server_ids, Role::kServer),
                                  std::make_tuple(&workers_, &options.worker_ids, Role::kWorker)}) {
    for (size_t r = 0; r < ranks->size(); ++r) {
      (*ranks)[r].role = role;
      (*ranks)[r].id = r < ids->size() ? (*ids)[r] : static_cast<int>(r);
    }
  }
}

bool Membership::AllAliveLocked() const {
  for (const Member& m : servers_) {
    if (!m.alive && (m.rank == -1 || !routing_.out_of_service(m.rank))) return false;
  }
  for (const Member& m : workers_) {
    if (!m.alive) return false;
  }
  return true;
}

absl::StatusOr<Registration> Membership::Register(Role role, absl::string_view address, int requested_id,
                                                  absl::Time now) {
  if (role == Role::kServer && address.empty()) {
    return absl::InvalidArgumentError("a server must register with the address it serves on");
  }
  if (address.size() > kMaxAddressBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("a %s's address must be at most %d bytes, got %d",
                                                      RoleName(role), kMaxAddressBytes, address.size()));
  }
  const int max_id = role == Role::kServer ? kMaxServers : kMaxWorkers;
  if (requested_id < -1 || requested_id >= max_id) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s id %d is not in [0, %d)", RoleName(role), requested_id, max_id));
  }
  absl::MutexLock lock(&mu_);
  HeardLocked(now);
  std::vector<Member>& ranks = RanksLocked(role);
  const int count = static_cast<int>(ranks.size());
  int rank = -1;
  int id = requested_id;
  if (id == -1) {
    for (int r = 0; r < count && rank == -1; ++r) {
      if (ranks[r].rank == -1) rank = r;  // never registered
    }
    for (int r = 0; r < count && rank == -1; ++r) {
      if (!ranks[r].alive) rank = r;  // dead: replace it
    }
    if (rank != -1) {
      id = ranks[rank].id;
    } else if (rescale_.HasFreePlace(role)) {  // a free place in a pending rescale
      id = rescale_.LowestFreeId(role, ranks);
    } else {
      return absl::ResourceExhaustedError(
          absl::StrFormat("all %d %s ranks are held by live members",
                          count + static_cast<int>(rescale_.joining(role).size()), RoleName(role)));
    }
  } else {
    rank = RankOfIdLocked(role, id);
  }
  if (rank != -1 && rescale_.Removing(role, rank)) {  // a rank the pending rescale removes may not come back meanwhile
    return absl::UnavailableError(absl::StrFormat(
        "%s %d is being removed from the job (it stayed dead): retry; it will be told whether it may rejoin",
        RoleName(role), id));
  }
  if (rank == -1) return JoinLocked(role, address, id, count, now);  // an id outside the job
  Member& m = ranks[rank];
  if (m.alive) {
    return absl::AlreadyExistsError(absl::StrFormat("%s %d (rank %d) is held by a live member at %s", RoleName(role),
                                                    id, rank, m.address));
  }
  const bool replacement = m.rank != -1;
  ClaimLocked(m, role, m.id, address, now);
  m.rank = rank;
  if (replacement) ++generation_;  // membership changed after a failure
  m.registered_generation = generation_;
  if (AllAliveLocked() && state_ != JobState::kFinished) {
    state_ = rolling_back_ ? JobState::kRecovering : JobState::kRunning;
  }
  return Registration{rank, m.incarnation, generation_, state_, /*joining=*/false, m.id};
}

absl::StatusOr<Registration> Membership::JoinLocked(Role role, absl::string_view address, int id, int count,
                                                    absl::Time now) {
  Member* place = rescale_.Place(role, id);
  if (place == nullptr) {
    if (rescale_.RemovedId(role, id)) {
      return absl::OutOfRangeError(absl::StrFormat(
          "%s %d was removed from the job (it did not come back in time): it may rejoin only in a rescale that "
          "grows the job",
          RoleName(role), id));
    }
    // A new member started before the rescale that names it (e.g. a StatefulSet scaled up first): retry.
    return absl::UnavailableError(absl::StrFormat(
        "%s %d is not one of the job's %d: it may join once a rescale names it (kestrel scale); retry",
        RoleName(role), id, count));
  }
  Member& m = *place;
  if (m.alive) {
    return absl::AlreadyExistsError(
        absl::StrFormat("%s %d is held by a live member at %s", RoleName(role), id, m.address));
  }
  ClaimLocked(m, role, id, address, now);
  m.registered_generation = generation_;
  rescale_.RankJoining(role, count, &m);
  return Registration{m.rank, m.incarnation, generation_, state_, /*joining=*/true, id};
}

void Membership::ClaimLocked(Member& m, Role role, int id, absl::string_view address, absl::Time now) {
  m.role = role;
  m.id = id;
  m.address = std::string(address);
  m.incarnation = NewIncarnationLocked();
  m.last_heartbeat = now;
  m.alive = true;
  m.dead_since = absl::InfiniteFuture();
}

int Membership::RankOfIdLocked(Role role, int id) {
  const std::vector<Member>& ranks = RanksLocked(role);
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (ranks[r].id == id) return r;
  }
  return -1;
}

std::string Membership::NewIncarnationLocked() {
  // Unguessable, so nobody can heartbeat or advance for another member's registration (a dead server kept
  // "alive" would never be rolled back): 128 bits from the kernel's generator (std::random_device reads
  // /dev/urandom, 32 bits a call).
  std::string incarnation(kIncarnationBytes, '\0');
  for (size_t i = 0; i < kIncarnationBytes; i += 4) {
    const uint32_t bits = random_();
    std::memcpy(&incarnation[i], &bits, 4);
  }
  return incarnation;
}

Member* Membership::FindLocked(Role role, int id, absl::string_view incarnation, bool* removed) {
  *removed = false;
  Member* found = nullptr;
  if (const int rank = RankOfIdLocked(role, id); rank != -1) found = &RanksLocked(role)[rank];
  if (found == nullptr) found = rescale_.FindJoining(role, id);
  if (found != nullptr && CheckIncarnation(*found, incarnation).ok()) return found;
  for (const Member& m : rescale_.removed()) {
    if (m.role == role && m.id == id && CheckIncarnation(m, incarnation).ok()) {
      *removed = true;
      return nullptr;
    }
  }
  return found;
}

absl::Status Membership::CheckIncarnation(const Member& m, absl::string_view incarnation) {
  if (incarnation.size() != kIncarnationBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the incarnation must be the %d bytes Register answered, got %d bytes", kIncarnationBytes, incarnation.size()));
  }
  // Neither incarnation is echoed, and the comparison takes the same time wherever they differ.
  if (m.incarnation.size() != kIncarnationBytes ||
      CRYPTO_memcmp(m.incarnation.data(), incarnation.data(), kIncarnationBytes) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s %d: not its current incarnation (superseded by a newer registration, or never issued): this "
        "process must stop",
        RoleName(m.role), m.id));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Membership::Heartbeat(Role role, int id, absl::string_view incarnation, absl::Time now,
                                               uint64_t routing_generation, int* rank) {
  absl::MutexLock lock(&mu_);
  HeardLocked(now);
  bool removed = false;
  Member* found = FindLocked(role, id, incarnation, &removed);
  if (removed) {
    return absl::OutOfRangeError(absl::StrFormat("%s %d left the job in a rescale: it exits", RoleName(role), id));
  }
  if (found == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("%s %d is not a member of the job", RoleName(role), id));
  }
  Member& m = *found;
  KESTREL_RETURN_IF_ERROR(CheckIncarnation(m, incarnation));
  if (!m.alive) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s %d was declared dead: register again", RoleName(role), id));
  }
  m.last_heartbeat = now;
  m.routing_generation = routing_generation;
  if (rank != nullptr) *rank = m.rank;
  return generation_;
}

std::vector<Member> Membership::ExpireSilent(absl::Time now) {
  std::vector<Member> expired;
  absl::MutexLock lock(&mu_);
  // The scheduler did not run for a stall's length: that time counts for nobody's silence.
  if (const absl::Duration stall = liveness_.Check(now); stall > absl::ZeroDuration()) {
    ForEachMemberLocked([&](Member& m) { m.last_heartbeat = LivenessJudge::AfterStall(m.last_heartbeat, stall, now); });
  }
  for (auto* ranks : {&servers_, &workers_}) {
    for (Member& m : *ranks) {
      if (m.alive && liveness_.Silent(m.last_heartbeat, now)) {
        m.alive = false;
        m.dead_since = now;
        expired.push_back(m);
        // Remembered until a rollback or failover: a replacement registering first must not hide the lost rows.
        if (m.role == Role::kServer && state_ != JobState::kForming) routing_.Died(m.rank);
      }
    }
  }
  const bool job_member_expired = !expired.empty();
  for (Role role : {Role::kServer, Role::kWorker}) {  // joining members: not of the job yet, nothing fails
    for (Member& m : rescale_.joining(role)) {
      if (m.alive && liveness_.Silent(m.last_heartbeat, now)) {
        m.alive = false;
        expired.push_back(m);
      }
    }
  }
  if (job_member_expired && state_ != JobState::kFinished) {  // leaving a finished job is not a failure
    ++generation_;
    if (state_ == JobState::kRunning && !AllAliveLocked()) state_ = JobState::kRecovering;
  }
  return expired;
}

void Membership::ForEachMemberLocked(absl::FunctionRef<void(Member&)> visit) {
  for (auto* ranks : {&servers_, &workers_, &rescale_.joining(Role::kServer), &rescale_.joining(Role::kWorker)}) {
    for (Member& m : *ranks) visit(m);
  }
}

void Membership::HeardLocked(absl::Time now) {
  // Nobody was heard for longer than a timeout: from this first voice on, every member has deaf_grace.
  if (const std::optional<absl::Time> grace = liveness_.Heard(now); grace.has_value()) {
    ForEachMemberLocked([&](Member& m) { m.last_heartbeat = LivenessJudge::AfterDeafness(m.last_heartbeat, *grace); });
  }
}

DeadMembers Membership::DeadFor(absl::Duration timeout, absl::Time now) const {
  absl::MutexLock lock(&mu_);
  DeadMembers out;
  if (state_ == JobState::kForming || state_ == JobState::kFinished) return out;
  for (auto [ranks, list] : {std::make_pair(&servers_, &out.servers), std::make_pair(&workers_, &out.workers)}) {
    for (const Member& m : *ranks) {
      if (m.rank != -1 && !m.alive && m.dead_since <= now - timeout) list->push_back(m.rank);
    }
  }
  return out;
}

absl::StatusOr<JobState> Membership::MarkWorkerDone(int rank) {
  absl::MutexLock lock(&mu_);
  if (rank < 0 || rank >= static_cast<int>(done_.size())) {
    return absl::InvalidArgumentError(absl::StrFormat("worker rank %d is not in [0, %d)", rank, done_.size()));
  }
  done_[rank] = true;
  if (std::all_of(done_.begin(), done_.end(), [](bool d) { return d; })) state_ = JobState::kFinished;
  return state_;
}

absl::Status Membership::MarkWorkerLeft(int rank) {
  absl::MutexLock lock(&mu_);
  if (rank < 0 || rank >= static_cast<int>(workers_.size())) {
    return absl::InvalidArgumentError(absl::StrFormat("worker rank %d is not in [0, %d)", rank, workers_.size()));
  }
  if (state_ != JobState::kFinished) {
    return absl::FailedPreconditionError(
        absl::StrFormat("worker rank %d cannot leave: the job is %s, not finished", rank, JobStateName(state_)));
  }
  workers_[rank].alive = false;
  return absl::OkStatus();
}

bool Membership::Alive(Role role, int rank) const {
  absl::MutexLock lock(&mu_);
  const std::vector<Member>& ranks = role == Role::kServer ? servers_ : workers_;
  return rank >= 0 && rank < static_cast<int>(ranks.size()) && ranks[rank].alive;
}

bool Membership::AnyWorkerAlive() const {
  absl::MutexLock lock(&mu_);
  return std::any_of(workers_.begin(), workers_.end(), [](const Member& m) { return m.alive; });
}

absl::Status Membership::CheckWorker(int rank, absl::string_view incarnation, uint64_t generation) const {
  absl::MutexLock lock(&mu_);
  if (rank < 0 || rank >= static_cast<int>(workers_.size())) {
    return absl::InvalidArgumentError(absl::StrFormat("worker rank %d is not in [0, %d)", rank, workers_.size()));
  }
  const Member& m = workers_[rank];
  if (!m.alive) {
    return absl::FailedPreconditionError(
        absl::StrFormat("worker rank %d is not a live member (declared dead or never registered): register", rank));
  }
  KESTREL_RETURN_IF_ERROR(CheckIncarnation(m, incarnation));
  if (generation < m.registered_generation) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "request of generation %d from worker rank %d, whose requests carry generation %d since it registered "
        "again or the job rolled back: this process was superseded",
        generation, rank, m.registered_generation));
  }
  if (generation != m.registered_generation) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "request of generation %d from worker rank %d, ahead of the generation %d its requests carry: stamp the "
        "generation Register or Rejoin answered",
        generation, rank, m.registered_generation));
  }
  return absl::OkStatus();
}

std::vector<uint64_t> Membership::WorkerGenerations() const {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> out;
  for (const Member& m : workers_) out.push_back(m.rank == -1 ? 0 : m.registered_generation);
  return out;
}

uint64_t Membership::BeginRollback() {
  absl::MutexLock lock(&mu_);
  ++generation_;
  for (Member& m : workers_) {
    if (m.rank != -1) m.registered_generation = generation_;
  }
  done_.assign(done_.size(), false);
  rolling_back_ = true;
  routing_.ForgetLost();
  if (state_ == JobState::kRunning || state_ == JobState::kFinished) state_ = JobState::kRecovering;
  return generation_;
}

void Membership::EndRollback(bool finished) {
  absl::MutexLock lock(&mu_);
  rolling_back_ = false;
  routing_.AllBackInService();  // every server restored the checkpoint
  if (finished) {
    done_.assign(done_.size(), true);
    state_ = JobState::kFinished;
  } else if (state_ == JobState::kRecovering && AllAliveLocked()) {
    state_ = JobState::kRunning;
  }
}

bool Membership::rolling_back() const {
  absl::MutexLock lock(&mu_);
  return rolling_back_;
}

bool Membership::AnyServerDead() const {
  absl::MutexLock lock(&mu_);
  if (routing_.AnyLost()) return true;
  for (const Member& m : servers_) {
    if (m.rank != -1 && !m.alive && !routing_.out_of_service(m.rank)) return true;
  }
  return false;
}

std::vector<int> Membership::FailOver(absl::FunctionRef<bool(const std::vector<bool>& out_of_service)> covered) {
  absl::MutexLock lock(&mu_);
  std::vector<bool> dead;
  for (const Member& m : servers_) dead.push_back(m.rank != -1 && !m.alive);
  std::vector<int> failed = routing_.FailOver(dead, covered);
  if (failed.empty()) return failed;
  if (state_ == JobState::kRecovering && !rolling_back_ && AllAliveLocked()) state_ = JobState::kRunning;
  return failed;
}

absl::StatusOr<uint64_t> Membership::PutBackInService(int rank) {
  absl::MutexLock lock(&mu_);
  return routing_.PutBackInService(rank, rank >= 0 && rank < static_cast<int>(servers_.size()) && servers_[rank].alive);
}

bool Membership::ServersAtRouting(uint64_t generation) const {
  absl::MutexLock lock(&mu_);
  for (const Member& m : servers_) {
    if (m.alive && m.routing_generation < generation) return false;
  }
  return true;
}

std::vector<std::string> Membership::LiveAddresses(Role role) const {
  absl::MutexLock lock(&mu_);
  const std::vector<Member>& ranks = role == Role::kServer ? servers_ : workers_;
  std::vector<std::string> out(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].alive) out[r] = ranks[r].address;
  }
  return out;
}

RoutingState Membership::routing() const {
  absl::MutexLock lock(&mu_);
  return routing_.state();
}

bool Membership::AllServersAlive() const {
  absl::MutexLock lock(&mu_);
  for (const Member& m : servers_) {
    if (!m.alive) return false;
  }
  return true;
}

uint64_t Membership::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

JobState Membership::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

absl::Status Membership::BeginScale(ScaleTarget target) {
  absl::MutexLock lock(&mu_);
  KESTREL_RETURN_IF_ERROR(rescale_.Check(target, servers_, workers_));
  const bool removes = !target.remove_servers.empty() || !target.remove_workers.empty();
  const bool grows =
      RescaleLayout::Grows(target, static_cast<int>(servers_.size()), static_cast<int>(workers_.size()));
  // Removing dead members is how an elastic job recovers: it may begin while the job recovers or rolls back.
  const bool may_begin = state_ == JobState::kRunning && !rolling_back_;
  if (!may_begin && !(removes && !grows && (state_ == JobState::kRecovering || rolling_back_))) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the job is %s, not running: it cannot be rescaled now", JobStateName(state_)));
  }
  if (!rolling_back_ && routing_.AnyOutOfServiceBut(target.remove_servers)) {  // a rollback restores every server
    return absl::FailedPreconditionError(
        "a server is out of service (failed over, not yet re-replicated): rescale once the job is whole again");
  }
  rescale_.Begin(std::move(target), static_cast<int>(servers_.size()), static_cast<int>(workers_.size()));
  return absl::OkStatus();
}

std::optional<ScaleTarget> Membership::pending_scale() const {
  absl::MutexLock lock(&mu_);
  return rescale_.pending();
}

bool Membership::ScaleReady() const {
  absl::MutexLock lock(&mu_);
  return rescale_.Ready();
}

std::vector<std::string> Membership::TargetServerAddresses() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const Member* m : rescale_.Target(Role::kServer, servers_)) out.push_back(m->alive ? m->address : "");
  return out;
}

absl::StatusOr<uint64_t> Membership::CommitScale(const std::string& partition) {
  absl::MutexLock lock(&mu_);
  if (!rescale_.pending().has_value()) return absl::FailedPreconditionError("no rescale is pending");
  const std::vector<int> worker_map = rescale_.Commit(servers_, workers_, partition);
  // A renumbered worker's requests of the old layout name a rank that is another's now: they must be refused
  // (the servers compare each rank's generation), so it moves to a new generation, which it learns by rejoining.
  bool renumbered = false;
  for (int r = 0; r < static_cast<int>(worker_map.size()); ++r) {
    if (worker_map[r] < 0 || worker_map[r] == r || workers_[r].rank == -1) continue;
    if (!renumbered) ++generation_;
    renumbered = true;
    workers_[r].registered_generation = generation_;
  }
  std::vector<bool> done(workers_.size(), false);
  for (size_t r = 0; r < worker_map.size(); ++r) {
    if (worker_map[r] >= 0) done[r] = done_[worker_map[r]];
  }
  done_ = std::move(done);
  const uint64_t routing = routing_.Relayout(static_cast<int>(servers_.size()));
  if (state_ == JobState::kRunning && !AllAliveLocked()) state_ = JobState::kRecovering;
  if (state_ == JobState::kRecovering && !rolling_back_ && AllAliveLocked()) state_ = JobState::kRunning;
  return routing;
}

void Membership::CancelScale() {
  absl::MutexLock lock(&mu_);
  rescale_.Cancel();
}

std::vector<int> Membership::TargetIds(Role role) const {
  absl::MutexLock lock(&mu_);
  std::vector<int> out;
  for (const Member* m : rescale_.Target(role, RanksLocked(role))) out.push_back(m->id);
  return out;
}

JobLayout Membership::layout() const {
  absl::MutexLock lock(&mu_);
  JobLayout out;
  out.num_servers = static_cast<int>(servers_.size());
  out.num_workers = static_cast<int>(workers_.size());
  out.partition = rescale_.partition();
  out.generation = rescale_.generation();
  for (const Member& m : servers_) out.server_ids.push_back(m.id);
  for (const Member& m : workers_) {
    out.worker_ids.push_back(m.id);
    out.worker_generations.push_back(m.rank == -1 ? 0 : m.registered_generation);
  }
  return out;
}

std::vector<Member> Membership::Members() const {
  absl::MutexLock lock(&mu_);
  std::vector<Member> out;
  for (const auto* ranks : {&servers_, &workers_, &rescale_.joining(Role::kServer), &rescale_.joining(Role::kWorker)}) {
    for (const Member& m : *ranks) {
      if (m.rank != -1) out.push_back(m);
    }
  }
  return out;
}

}  // namespace kestrel
