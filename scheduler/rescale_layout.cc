#include "scheduler/rescale_layout.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_format.h"
#include "common/limits.h"

namespace kestrel {

namespace {

// Removed members remembered (so their heartbeats are answered OutOfRange, not FailedPrecondition).
constexpr size_t kMaxRemembered = 1 << 16;

// Joining places of a rescale to `target` ranks of a role with `count` ranks, `removed` of them removed.
int JoiningPlaces(int target, size_t count, size_t removed) {
  return std::max<int>(0, target - static_cast<int>(count - removed));
}

}  // namespace

std::vector<int> MapRanks(int old_count, int target, const std::vector<int>& removed) {
  std::vector<int> out;
  for (int r = 0; r < old_count && static_cast<int>(out.size()) < target; ++r) {
    if (std::find(removed.begin(), removed.end(), r) == removed.end()) out.push_back(r);
  }
  out.resize(std::max<int>(target, 0), -1);
  return out;
}

RescaleLayout::RescaleLayout(std::string partition, uint64_t generation)
    : partition_(std::move(partition)), generation_(generation) {}

absl::Status RescaleLayout::Check(const ScaleTarget& target, const std::vector<Member>& servers,
                                  const std::vector<Member>& workers) const {
  if (target.servers < 1 || target.servers > kMaxServers || target.workers < 1 || target.workers > kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrFormat("need 1..%d servers and 1..%d workers, got %d and %d",
                                                      kMaxServers, kMaxWorkers, target.servers, target.workers));
  }
  const bool removes = !target.remove_servers.empty() || !target.remove_workers.empty();
  for (auto [list, ranks, role] : {std::make_tuple(&target.remove_servers, &servers, Role::kServer),
                                   std::make_tuple(&target.remove_workers, &workers, Role::kWorker)}) {
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
  if (!removes && target.servers == static_cast<int>(servers.size()) &&
      target.workers == static_cast<int>(workers.size())) {
    return absl::InvalidArgumentError(absl::StrFormat("the job already has %d servers and %d workers",
                                                      target.servers, target.workers));
  }
  if (scale_.has_value()) {
    return absl::FailedPreconditionError(absl::StrFormat("a rescale to %d servers and %d workers is in progress",
                                                         scale_->servers, scale_->workers));
  }
  return absl::OkStatus();
}

bool RescaleLayout::Grows(const ScaleTarget& target, int servers, int workers) {
  return JoiningPlaces(target.servers, servers, target.remove_servers.size()) > 0 ||
         JoiningPlaces(target.workers, workers, target.remove_workers.size()) > 0;
}

void RescaleLayout::Begin(ScaleTarget target, int servers, int workers) {
  joining_servers_.assign(JoiningPlaces(target.servers, servers, target.remove_servers.size()), Member());
  joining_workers_.assign(JoiningPlaces(target.workers, workers, target.remove_workers.size()), Member());
  scale_ = std::move(target);
}

bool RescaleLayout::Ready() const {
  if (!scale_.has_value()) return false;
  for (const auto* ranks : {&joining_servers_, &joining_workers_}) {
    for (const Member& m : *ranks) {
      if (!m.alive) return false;
    }
  }
  return true;
}

std::vector<int> RescaleLayout::Relayout(std::vector<Member>& ranks, std::vector<Member>& joining, int count,
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
    Remove(ranks[old]);
  }
  ranks = std::move(next);
  joining.clear();
  return old_of_new;
}

std::vector<int> RescaleLayout::Commit(std::vector<Member>& servers, std::vector<Member>& workers,
                                       const std::string& partition) {
  Relayout(servers, joining_servers_, scale_->servers, scale_->remove_servers);
  std::vector<int> worker_map = Relayout(workers, joining_workers_, scale_->workers, scale_->remove_workers);
  partition_ = partition;
  ++generation_;
  scale_.reset();
  return worker_map;
}

void RescaleLayout::Cancel() {
  for (auto* joining : {&joining_servers_, &joining_workers_}) {
    for (Member& m : *joining) Remove(m);
    joining->clear();
  }
  scale_.reset();
}

std::vector<const Member*> RescaleLayout::Target(Role role, const std::vector<Member>& ranks) const {
  const std::vector<Member>& places = joining(role);
  const int count = static_cast<int>(ranks.size());
  std::vector<int> old_of_new = MapRanks(count, count, {});
  if (scale_.has_value()) {
    old_of_new = role == Role::kServer ? MapRanks(count, scale_->servers, scale_->remove_servers)
                                       : MapRanks(count, scale_->workers, scale_->remove_workers);
  }
  std::vector<const Member*> out;
  size_t j = 0;
  for (const int old : old_of_new) out.push_back(old >= 0 ? &ranks[old] : &places[j++]);
  return out;
}

bool RescaleLayout::HasFreePlace(Role role) const {
  const std::vector<Member>& places = joining(role);
  return !places.empty() && places.back().rank == -1;
}

int RescaleLayout::LowestFreeId(Role role, const std::vector<Member>& ranks) const {
  std::set<int> taken;
  for (const Member& m : ranks) taken.insert(m.id);
  for (const Member& m : joining(role)) taken.insert(m.id);
  int id = 0;
  while (taken.count(id) > 0) ++id;
  return id;
}

bool RescaleLayout::Removing(Role role, int rank) const {
  if (!scale_.has_value()) return false;
  const std::vector<int>& removing = role == Role::kServer ? scale_->remove_servers : scale_->remove_workers;
  return std::find(removing.begin(), removing.end(), rank) != removing.end();
}

Member* RescaleLayout::FindJoining(Role role, int id) {
  for (Member& m : joining(role)) {
    if (m.rank != -1 && m.id == id) return &m;
  }
  return nullptr;
}

Member* RescaleLayout::Place(Role role, int id) {
  if (Member* before = FindJoining(role, id); before != nullptr) return before;
  if (!HasFreePlace(role)) return nullptr;
  // A free place: the registered joining members stay ordered by id (the new ranks follow that order).
  std::vector<Member>& places = joining(role);
  size_t place = 0;
  while (places[place].rank != -1 && places[place].id < id) ++place;
  places.insert(places.begin() + place, Member());
  places.pop_back();
  return &places[place];
}

void RescaleLayout::RankJoining(Role role, int job_count, const Member* claimed) {
  std::vector<Member>& places = joining(role);
  for (int j = 0; j < static_cast<int>(places.size()); ++j) {
    if (places[j].rank != -1 || &places[j] == claimed) places[j].rank = job_count + j;
  }
}

void RescaleLayout::Remove(Member m) {
  if (m.rank == -1) return;
  m.alive = false;
  removed_.push_back(std::move(m));
  if (removed_.size() > kMaxRemembered) removed_.pop_front();
}

}  // namespace kestrel
