#include "scheduler/membership.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <tuple>

#include <openssl/crypto.h>

#include "absl/strings/str_format.h"
#include "common/limits.h"
#include "common/status.h"

namespace kestrel {

absl::Time MonotonicNow() {
  return absl::UnixEpoch() + absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

const char* RoleName(Role role) { return role == Role::kServer ? "server" : "worker"; }

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

namespace {

// Removed members remembered (so their heartbeats are answered OutOfRange, not FailedPrecondition).
constexpr size_t kMaxRemembered = 1 << 16;

}  // namespace

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

Membership::Membership(const MembershipOptions& options, std::string partition) : options_(options) {
  absl::MutexLock lock(&mu_);
  partition_ = std::move(partition);
  layout_generation_ = options.layout_generation;
  servers_.resize(options.num_servers);
  out_of_service_.assign(options.num_servers, false);
  lost_.assign(options.num_servers, false);
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
    if (!m.alive && (m.rank == -1 || !out_of_service_[m.rank])) return false;
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
  std::vector<Member>& joining = JoiningLocked(role);
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
    } else if (!joining.empty() && joining.back().rank == -1) {  // a free place in a pending rescale
      std::set<int> taken;
      for (const Member& m : ranks) taken.insert(m.id);
      for (const Member& m : joining) taken.insert(m.id);
      for (id = 0; taken.count(id) > 0;) ++id;
    } else {
      return absl::ResourceExhaustedError(
          absl::StrFormat("all %d %s ranks are held by live members", count + static_cast<int>(joining.size()),
                          RoleName(role)));
    }
  } else {
    rank = RankOfIdLocked(role, id);
  }
  if (rank != -1 && scale_.has_value()) {  // a rank the pending rescale removes may not come back meanwhile
    const std::vector<int>& removing = role == Role::kServer ? scale_->remove_servers : scale_->remove_workers;
    if (std::find(removing.begin(), removing.end(), rank) != removing.end()) {
      return absl::UnavailableError(absl::StrFormat(
          "%s %d is being removed from the job (it stayed dead): retry; it will be told whether it may rejoin",
          RoleName(role), id));
    }
  }
  if (rank == -1) {  // an id outside the job
    int place = -1;
    for (int j = 0; j < static_cast<int>(joining.size()) && place == -1; ++j) {
      if (joining[j].rank != -1 && joining[j].id == id) place = j;  // registered before
    }
    if (place == -1 && !joining.empty() && joining.back().rank == -1) {
      // A free place: the registered joining members stay ordered by id (the new ranks follow that order).
      place = 0;
      while (joining[place].rank != -1 && joining[place].id < id) ++place;
      joining.insert(joining.begin() + place, Member());
      joining.pop_back();
    }
    if (place == -1) {
      if (removed_ids_.count({role, id}) > 0) {
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
    Member& m = joining[place];
    if (m.alive) {
      return absl::AlreadyExistsError(
          absl::StrFormat("%s %d is held by a live member at %s", RoleName(role), id, m.address));
    }
    ClaimLocked(m, role, id, address, now);
    m.registered_generation = generation_;
    for (int j = 0; j < static_cast<int>(joining.size()); ++j) {
      if (joining[j].rank != -1 || j == place) joining[j].rank = count + j;
    }
    return Registration{m.rank, m.incarnation, generation_, state_, /*joining=*/true, id};
  }
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
  for (Member& m : JoiningLocked(role)) {
    if (found == nullptr && m.rank != -1 && m.id == id) found = &m;
  }
  if (found != nullptr && CheckIncarnation(*found, incarnation).ok()) return found;
  for (const Member& m : removed_) {
    if (m.role == role && m.id == id && CheckIncarnation(m, incarnation).ok()) {
      *removed = true;
      return nullptr;
    }
  }
  return found;
}

void Membership::RemoveLocked(Member m) {
  if (m.rank == -1) return;
  m.alive = false;
  removed_.push_back(std::move(m));
  if (removed_.size() > kMaxRemembered) removed_.pop_front();
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
  if (last_check_ != absl::InfinitePast() && now - last_check_ > options_.stall_threshold) {
    // The scheduler did not run for the gap past the threshold: that time counts for nobody's silence. (Only
    // the excess: a scheduler that is merely slow still declares the silent dead, a little later.)
    const absl::Duration stall = now - last_check_ - options_.stall_threshold;
    for (auto* ranks : {&servers_, &workers_, &joining_servers_, &joining_workers_}) {
      // A member inside its deaf grace (last_heartbeat ahead of now) keeps the grace, lengthened by the stall.
      for (Member& m : *ranks) {
        m.last_heartbeat = m.last_heartbeat > now ? m.last_heartbeat + stall : std::min(now, m.last_heartbeat + stall);
      }
    }
    stalled_ += stall;
  }
  last_check_ = std::max(last_check_, now);
  for (auto* ranks : {&servers_, &workers_}) {
    for (Member& m : *ranks) {
      if (m.alive && SilentLocked(m, now)) {
        m.alive = false;
        m.dead_since = now;
        expired.push_back(m);
        // Remembered until a rollback or failover: a replacement registering first must not hide the lost rows.
        // A server out of service serves nothing (a failed-over one's replacement): its death loses nothing.
        if (m.role == Role::kServer && state_ != JobState::kForming && !out_of_service_[m.rank]) lost_[m.rank] = true;
      }
    }
  }
  const bool job_member_expired = !expired.empty();
  for (auto* ranks : {&joining_servers_, &joining_workers_}) {  // not of the job yet: nothing fails
    for (Member& m : *ranks) {
      if (m.alive && SilentLocked(m, now)) {
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

bool Membership::SilentLocked(const Member& m, absl::Time now) const {
  // deaf_grace: a silence counts once someone was heard after its deadline (the scheduler itself can hear).
  return now - m.last_heartbeat > options_.heartbeat_timeout &&
         (options_.deaf_grace == absl::InfiniteDuration() ||
          last_heard_ - m.last_heartbeat > options_.heartbeat_timeout);
}

void Membership::HeardLocked(absl::Time now) {
  if (options_.deaf_grace != absl::InfiniteDuration() && last_heard_ != absl::InfinitePast() &&
      now - last_heard_ > options_.heartbeat_timeout) {
    // Nobody was heard for longer than a timeout: the scheduler was cut off (or everyone stopped at once). From
    // this first voice on, every member has deaf_grace to be heard again before its silence counts.
    ++deaf_periods_;
    for (auto* ranks : {&servers_, &workers_, &joining_servers_, &joining_workers_}) {
      for (Member& m : *ranks) {
        m.last_heartbeat = std::max(m.last_heartbeat, now + options_.deaf_grace - options_.heartbeat_timeout);
      }
    }
  }
  last_heard_ = std::max(last_heard_, now);
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
  lost_.assign(lost_.size(), false);
  if (state_ == JobState::kRunning || state_ == JobState::kFinished) state_ = JobState::kRecovering;
  return generation_;
}

void Membership::EndRollback(bool finished) {
  absl::MutexLock lock(&mu_);
  rolling_back_ = false;
  // Every server restored the checkpoint: each copy of each range is in service again.
  if (std::find(out_of_service_.begin(), out_of_service_.end(), true) != out_of_service_.end()) {
    out_of_service_.assign(out_of_service_.size(), false);
    ++routing_generation_;
  }
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
  if (std::find(lost_.begin(), lost_.end(), true) != lost_.end()) return true;
  for (const Member& m : servers_) {
    if (m.rank != -1 && !m.alive && !out_of_service_[m.rank]) return true;
  }
  return false;
}

std::vector<int> Membership::FailOver(absl::FunctionRef<bool(const std::vector<bool>& out_of_service)> covered) {
  absl::MutexLock lock(&mu_);
  std::vector<int> failed;
  std::vector<bool> after = out_of_service_;
  for (int r = 0; r < static_cast<int>(servers_.size()); ++r) {
    const Member& m = servers_[r];
    if ((lost_[r] || (m.rank != -1 && !m.alive)) && !out_of_service_[r]) {
      after[r] = true;
      failed.push_back(r);
    }
  }
  if (failed.empty() || !covered(after)) return {};
  out_of_service_ = std::move(after);
  lost_.assign(lost_.size(), false);
  ++routing_generation_;
  failovers_ += failed.size();
  if (state_ == JobState::kRecovering && !rolling_back_ && AllAliveLocked()) state_ = JobState::kRunning;
  return failed;
}

absl::StatusOr<uint64_t> Membership::PutBackInService(int rank) {
  absl::MutexLock lock(&mu_);
  if (rank < 0 || rank >= static_cast<int>(servers_.size()) || !servers_[rank].alive || !out_of_service_[rank]) {
    return absl::FailedPreconditionError(
        absl::StrFormat("server rank %d is not a live server out of service: nothing to put back", rank));
  }
  out_of_service_[rank] = false;
  ++rereplications_;
  return ++routing_generation_;
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
  RoutingState out;
  out.generation = routing_generation_;
  out.failovers = failovers_;
  out.rereplications = rereplications_;
  for (size_t s = 0; s < out_of_service_.size(); ++s) {
    if (out_of_service_[s]) out.out_of_service.push_back(static_cast<int>(s));
  }
  return out;
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

std::vector<int> MapRanks(int old_count, int target, const std::vector<int>& removed) {
  std::vector<int> out;
  for (int r = 0; r < old_count && static_cast<int>(out.size()) < target; ++r) {
    if (std::find(removed.begin(), removed.end(), r) == removed.end()) out.push_back(r);
  }
  out.resize(std::max<int>(target, 0), -1);
  return out;
}

absl::Status Membership::BeginScale(ScaleTarget target) {
  absl::MutexLock lock(&mu_);
  if (target.servers < 1 || target.servers > kMaxServers || target.workers < 1 || target.workers > kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrFormat("need 1..%d servers and 1..%d workers, got %d and %d",
                                                      kMaxServers, kMaxWorkers, target.servers, target.workers));
  }
  const bool removes = !target.remove_servers.empty() || !target.remove_workers.empty();
  for (auto [list, ranks, role] : {std::make_tuple(&target.remove_servers, &servers_, Role::kServer),
                                   std::make_tuple(&target.remove_workers, &workers_, Role::kWorker)}) {
    for (size_t i = 0; i < list->size(); ++i) {
      const int r = (*list)[i];
      if (r < 0 || r >= static_cast<int>(ranks->size()) || (i > 0 && r <= (*list)[i - 1])) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "the %s ranks to remove must increase and lie in [0, %d)", RoleName(role), ranks->size()));
      }
      if ((*ranks)[r].alive) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s rank %d is alive: only members that died are removed by rank (shrink the count instead)",
            RoleName(role), r));
      }
    }
    const int kept = static_cast<int>(ranks->size() - list->size());
    const int count = role == Role::kServer ? target.servers : target.workers;
    if (!list->empty() && count > kept) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a rescale that removes %s ranks cannot add others (%d remain, %d asked for)", RoleName(role), kept, count));
    }
  }
  if (!removes && target.servers == static_cast<int>(servers_.size()) &&
      target.workers == static_cast<int>(workers_.size())) {
    return absl::InvalidArgumentError(absl::StrFormat("the job already has %d servers and %d workers",
                                                      target.servers, target.workers));
  }
  if (scale_.has_value()) {
    return absl::FailedPreconditionError(absl::StrFormat("a rescale to %d servers and %d workers is in progress",
                                                         scale_->servers, scale_->workers));
  }
  const bool grows = target.servers > static_cast<int>(servers_.size() - target.remove_servers.size()) ||
                     target.workers > static_cast<int>(workers_.size() - target.remove_workers.size());
  // Removing dead members is how an elastic job recovers: it may begin while the job recovers or rolls back.
  const bool may_begin = state_ == JobState::kRunning && !rolling_back_;
  if (!may_begin && !(removes && !grows && (state_ == JobState::kRecovering || rolling_back_))) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the job is %s, not running: it cannot be rescaled now", JobStateName(state_)));
  }
  for (size_t s = 0; s < out_of_service_.size() && !rolling_back_; ++s) {  // a rollback restores every server
    if (out_of_service_[s] && std::find(target.remove_servers.begin(), target.remove_servers.end(),
                                        static_cast<int>(s)) == target.remove_servers.end()) {
      return absl::FailedPreconditionError(
          "a server is out of service (failed over, not yet re-replicated): rescale once the job is whole again");
    }
  }
  scale_ = target;
  joining_servers_.assign(
      std::max<int>(0, target.servers - static_cast<int>(servers_.size() - target.remove_servers.size())), Member());
  joining_workers_.assign(
      std::max<int>(0, target.workers - static_cast<int>(workers_.size() - target.remove_workers.size())), Member());
  return absl::OkStatus();
}

std::optional<ScaleTarget> Membership::pending_scale() const {
  absl::MutexLock lock(&mu_);
  return scale_;
}

bool Membership::ScaleReady() const {
  absl::MutexLock lock(&mu_);
  if (!scale_.has_value()) return false;
  for (const auto* ranks : {&joining_servers_, &joining_workers_}) {
    for (const Member& m : *ranks) {
      if (!m.alive) return false;
    }
  }
  return true;
}

std::vector<const Member*> Membership::TargetLocked(Role role) const {
  const std::vector<Member>& ranks = role == Role::kServer ? servers_ : workers_;
  const std::vector<Member>& joining = role == Role::kServer ? joining_servers_ : joining_workers_;
  const int count = static_cast<int>(ranks.size());
  std::vector<int> old_of_new = MapRanks(count, count, {});
  if (scale_.has_value()) {
    old_of_new = role == Role::kServer ? MapRanks(count, scale_->servers, scale_->remove_servers)
                                       : MapRanks(count, scale_->workers, scale_->remove_workers);
  }
  std::vector<const Member*> out;
  size_t j = 0;
  for (const int old : old_of_new) out.push_back(old >= 0 ? &ranks[old] : &joining[j++]);
  return out;
}

std::vector<std::string> Membership::TargetServerAddresses() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const Member* m : TargetLocked(Role::kServer)) out.push_back(m->alive ? m->address : "");
  return out;
}

absl::StatusOr<uint64_t> Membership::CommitScale(const std::string& partition) {
  absl::MutexLock lock(&mu_);
  if (!scale_.has_value()) return absl::FailedPreconditionError("no rescale is pending");
  auto relayout = [&](std::vector<Member>& ranks, std::vector<Member>& joining, int count,
                      const std::vector<int>& removed) {
    const std::vector<int> old_of_new = MapRanks(static_cast<int>(ranks.size()), count, removed);
    std::vector<bool> kept(ranks.size(), false);
    std::vector<Member> next;
    size_t j = 0;
    for (int r = 0; r < count; ++r) {
      const int old = old_of_new[r];
      Member m = old >= 0 ? ranks[old] : joining[j++];
      if (old >= 0) kept[old] = true;
      if (m.rank != -1) m.rank = r;
      next.push_back(std::move(m));
    }
    for (size_t old = 0; old < ranks.size(); ++old) {
      if (kept[old]) continue;
      if (std::find(removed.begin(), removed.end(), static_cast<int>(old)) != removed.end() &&
          removed_ids_.size() < kMaxRemembered) {
        removed_ids_.insert({ranks[old].role, ranks[old].id});
      }
      RemoveLocked(ranks[old]);
    }
    ranks = std::move(next);
    joining.clear();
    return old_of_new;
  };
  relayout(servers_, joining_servers_, scale_->servers, scale_->remove_servers);
  const std::vector<int> worker_map = relayout(workers_, joining_workers_, scale_->workers, scale_->remove_workers);
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
  out_of_service_.assign(servers_.size(), false);
  lost_.assign(servers_.size(), false);
  partition_ = partition;
  ++layout_generation_;
  scale_.reset();
  if (state_ == JobState::kRunning && !AllAliveLocked()) state_ = JobState::kRecovering;
  if (state_ == JobState::kRecovering && !rolling_back_ && AllAliveLocked()) state_ = JobState::kRunning;
  return ++routing_generation_;
}

void Membership::CancelScale() {
  absl::MutexLock lock(&mu_);
  for (auto* joining : {&joining_servers_, &joining_workers_}) {
    for (Member& m : *joining) RemoveLocked(m);
    joining->clear();
  }
  scale_.reset();
}

std::vector<int> Membership::TargetIds(Role role) const {
  absl::MutexLock lock(&mu_);
  std::vector<int> out;
  for (const Member* m : TargetLocked(role)) out.push_back(m->id);
  return out;
}

JobLayout Membership::layout() const {
  absl::MutexLock lock(&mu_);
  JobLayout out;
  out.num_servers = static_cast<int>(servers_.size());
  out.num_workers = static_cast<int>(workers_.size());
  out.partition = partition_;
  out.generation = layout_generation_;
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
  for (const auto* ranks : {&servers_, &workers_, &joining_servers_, &joining_workers_}) {
    for (const Member& m : *ranks) {
      if (m.rank != -1) out.push_back(m);
    }
  }
  return out;
}

}  // namespace kestrel
