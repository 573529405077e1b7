#include "server/served_layout.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/limits.h"
#include "server/peer_links.h"

namespace kestrel {

ServedLayout::ServedLayout(std::shared_ptr<HostedShards> hosted, PeerLinks* peers)
    : peers_(peers), hosted_(std::move(hosted)) {}

std::shared_ptr<HostedShards> ServedLayout::hosted() const {
  absl::MutexLock lock(&mu_);
  return hosted_;
}

uint64_t ServedLayout::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

bool ServedLayout::left() const {
  absl::MutexLock lock(&mu_);
  return left_;
}

void ServedLayout::SetJobView(uint64_t job_generation, const std::vector<uint64_t>& worker_generations,
                              uint64_t layout_generation, const std::vector<int>& worker_ids) {
  std::shared_ptr<HostedShards> hosted;
  {
    absl::MutexLock lock(&mu_);
    if (layout_generation < generation_ || !CheckWorkerIds(worker_ids.size()).ok()) return;
    SetWorkerIdsLocked(worker_ids);
    job_view_set_ = true;
    job_generation_ = job_generation;
    worker_generations_ = worker_generations;
    hosted = hosted_;
  }
  hosted->SetJobView(job_generation, worker_generations);
}

void ServedLayout::SetGenerationListener(std::function<void()> listener) {
  std::shared_ptr<HostedShards> hosted;
  {
    absl::MutexLock lock(&mu_);
    generation_listener_ = listener;
    hosted = hosted_;
  }
  hosted->SetGenerationListener(std::move(listener));
}

void ServedLayout::SetSwitchListener(std::function<void(HostedShards&)> listener) {
  absl::MutexLock lock(&mu_);
  switch_listener_ = std::move(listener);
}

void ServedLayout::Adopt(std::shared_ptr<HostedShards> groups, uint64_t layout_generation,
                         const std::vector<int>& worker_ids) {
  std::function<void(HostedShards&)> listener;
  {
    absl::MutexLock lock(&mu_);
    SetWorkerIdsLocked(worker_ids);
    if (job_view_set_) groups->SetJobView(job_generation_, worker_generations_);
    if (generation_listener_) groups->SetGenerationListener(generation_listener_);
    hosted_ = groups;
    generation_ = layout_generation;
    listener = switch_listener_;
  }
  if (peers_ != nullptr) peers_->Resize(groups->partition().num_servers());
  if (listener) listener(*groups);
}

void ServedLayout::AdvanceKeepingGroups(uint64_t layout_generation, std::vector<int> worker_ids) {
  absl::MutexLock lock(&mu_);
  generation_ = layout_generation;
  SetWorkerIdsLocked(std::move(worker_ids));
}

void ServedLayout::Leave(uint64_t layout_generation) {
  absl::MutexLock lock(&mu_);
  left_ = true;
  generation_ = layout_generation;
}

absl::Status ServedLayout::CheckWorkerCaller(const std::optional<PeerIdentity>& caller, int worker_rank,
                                             const char* what) const {
  if (!caller.has_value() || caller->role != PeerRole::kWorker) return CheckClaimedRank(caller, worker_rank, what);
  int id = worker_rank;
  const std::shared_ptr<const std::vector<int>> ids = std::atomic_load(&worker_ids_);
  if (ids != nullptr && worker_rank >= 0 && static_cast<size_t>(worker_rank) < ids->size()) id = (*ids)[worker_rank];
  return CheckClaimedRank(caller, id, what);
}

void ServedLayout::SetWorkerIdsLocked(std::vector<int> ids) {
  std::atomic_store(&worker_ids_, ids.empty() ? nullptr : std::make_shared<const std::vector<int>>(std::move(ids)));
}

absl::Status ServedLayout::CheckWorkerIds(size_t count) {
  if (count <= static_cast<size_t>(kMaxWorkers)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("the layout names %d worker ids, more than the %d workers a job may have", count, kMaxWorkers));
}

}  // namespace kestrel
