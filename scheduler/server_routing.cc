#include "scheduler/server_routing.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace kestrel {

ServerRouting::ServerRouting(int num_servers) : out_of_service_(num_servers, false), lost_(num_servers, false) {}

bool ServerRouting::AnyOutOfServiceBut(const std::vector<int>& ranks) const {
  for (size_t s = 0; s < out_of_service_.size(); ++s) {
    if (out_of_service_[s] && std::find(ranks.begin(), ranks.end(), static_cast<int>(s)) == ranks.end()) return true;
  }
  return false;
}

bool ServerRouting::AnyLost() const { return std::find(lost_.begin(), lost_.end(), true) != lost_.end(); }

void ServerRouting::Died(int rank) {
  // A server out of service serves nothing (a failed-over one's replacement): its death loses nothing.
  if (!out_of_service_[rank]) lost_[rank] = true;
}

void ServerRouting::ForgetLost() { lost_.assign(lost_.size(), false); }

void ServerRouting::AllBackInService() {
  generation_ = state().AllInServiceGeneration();
  out_of_service_.assign(out_of_service_.size(), false);
}

std::vector<int> ServerRouting::FailOver(const std::vector<bool>& dead,
                                         absl::FunctionRef<bool(const std::vector<bool>& out_of_service)> covered) {
  std::vector<int> failed;
  std::vector<bool> after = out_of_service_;
  for (int r = 0; r < static_cast<int>(out_of_service_.size()); ++r) {
    if ((lost_[r] || dead[r]) && !out_of_service_[r]) {
      after[r] = true;
      failed.push_back(r);
    }
  }
  if (failed.empty() || !covered(after)) return {};
  out_of_service_ = std::move(after);
  lost_.assign(lost_.size(), false);
  ++generation_;
  failovers_ += failed.size();
  return failed;
}

absl::StatusOr<uint64_t> ServerRouting::PutBackInService(int rank, bool alive) {
  if (rank < 0 || rank >= static_cast<int>(out_of_service_.size()) || !alive || !out_of_service_[rank]) {
    return absl::FailedPreconditionError(
        absl::StrFormat("server rank %d is not a live server out of service: nothing to put back", rank));
  }
  out_of_service_[rank] = false;
  ++rereplications_;
  return ++generation_;
}

uint64_t ServerRouting::Relayout(int num_servers) {
  out_of_service_.assign(num_servers, false);
  lost_.assign(num_servers, false);
  return ++generation_;
}

RoutingState ServerRouting::state() const {
  RoutingState out;
  out.generation = generation_;
  out.failovers = failovers_;
  out.rereplications = rereplications_;
  for (size_t s = 0; s < out_of_service_.size(); ++s) {
    if (out_of_service_[s]) out.out_of_service.push_back(static_cast<int>(s));
  }
  return out;
}

}  // namespace kestrel
