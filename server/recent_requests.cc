#include "server/recent_requests.h"

namespace kestrel {

RecentRequests::Seen RecentRequests::Begin(int worker, uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto found = windows_.find(worker);
  if (found == windows_.end()) {
    if (windows_.size() >= max_workers_) return Seen::kNoRoom;
    found = windows_.emplace(worker, Window()).first;
  }
  Window& w = found->second;
  auto [it, fresh] = w.applied.emplace(id, false);
  if (!fresh) return it->second ? Seen::kApplied : Seen::kInFlight;
  w.order.push_back(id);
  if (w.order.size() > per_worker_) {
    w.applied.erase(w.order.front());
    w.order.pop_front();
  }
  return Seen::kNew;
}

void RecentRequests::Applied(int worker, uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto w = windows_.find(worker);
  if (w == windows_.end()) return;
  auto it = w->second.applied.find(id);
  if (it != w->second.applied.end()) it->second = true;
}

void RecentRequests::SetMaxWorkers(size_t max_workers) {
  absl::MutexLock lock(&mu_);
  max_workers_ = max_workers;
}

size_t RecentRequests::max_workers() const {
  absl::MutexLock lock(&mu_);
  return max_workers_;
}

}  // namespace kestrel
