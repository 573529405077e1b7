#include "server/recent_requests.h"

namespace kestrel {

bool RecentRequests::Insert(int worker, uint64_t id) {
  absl::MutexLock lock(&mu_);
  Window& w = windows_[worker];
  if (!w.ids.insert(id).second) return false;
  w.order.push_back(id);
  if (w.order.size() > per_worker_) {
    w.ids.erase(w.order.front());
    w.order.pop_front();
  }
  return true;
}

}  // namespace kestrel
