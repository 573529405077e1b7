#include "common/server_addresses.h"

#include <algorithm>

namespace kestrel {

ServerAddresses::ServerAddresses(int num_servers) { Resize(num_servers); }

void ServerAddresses::Resize(int num_servers) {
  absl::MutexLock lock(&mu_);
  const size_t n = static_cast<size_t>(std::max(num_servers, 0));
  last_.resize(n);
  alive_.resize(n, false);
}

void ServerAddresses::Update(const std::vector<std::string>& announced) {
  absl::MutexLock lock(&mu_);
  bool changed = false;
  for (size_t i = 0; i < std::min(announced.size(), last_.size()); ++i) {
    alive_[i] = !announced[i].empty();
    if (announced[i].empty() || announced[i] == last_[i]) continue;
    last_[i] = announced[i];
    changed = true;
  }
  if (changed) version_.fetch_add(1, std::memory_order_acq_rel);
}

std::vector<std::string> ServerAddresses::Last() const {
  absl::MutexLock lock(&mu_);
  return last_;
}

std::string ServerAddresses::IfAlive(int server) const {
  absl::MutexLock lock(&mu_);
  if (server < 0 || server >= static_cast<int>(last_.size()) || !alive_[server]) return "";
  return last_[server];
}

int ServerAddresses::num_servers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(last_.size());
}

}  // namespace kestrel
