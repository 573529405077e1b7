#include "server/tier_health.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace kestrel {

absl::Status TierHealth::Check() const {
  if (!failed_.load(std::memory_order_acquire)) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return absl::FailedPreconditionError(error_);
}

absl::Status TierHealth::Failed(absl::Status status) {
  if (status.ok()) return status;
  std::function<void(const absl::Status&)> listener;
  std::string error;
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.load(std::memory_order_relaxed)) {
      error_ = absl::StrFormat(
          "shard %d: its disk tier failed (%s): it may hold part of a push or lack rows moved out of memory, and "
          "refuses requests until it is restored from a checkpoint",
          owner_, status.ToString());
      failed_.store(true, std::memory_order_release);
    }
    listener = listener_;
    error = error_;
  }
  if (listener) listener(status);
  return absl::FailedPreconditionError(error);
}

void TierHealth::SetListener(std::function<void(const absl::Status&)> listener) {
  absl::MutexLock lock(&mu_);
  listener_ = std::move(listener);
}

void TierHealth::Reset() {
  absl::MutexLock lock(&mu_);
  failed_.store(false, std::memory_order_release);
  error_.clear();
}

}  // namespace kestrel
