// TierHealth: whether one shard's disk tier (the rows its bounded tables moved out of memory: ColdTier) has
// failed, the error requests get from then on, and whom to tell.
//
// A disk tier update that fails part-way (a push's, or the writes a checkpoint held back: server/shard_store.h)
// leaves the shard holding part of a push or lacking rows moved out of memory: from the first failure on, the
// shard refuses requests (Check: FailedPrecondition) until a restore replaces its state (Reset).
#ifndef KESTREL_SERVER_TIER_HEALTH_H_
#define KESTREL_SERVER_TIER_HEALTH_H_

#include <atomic>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace kestrel {

// Owned by its Shard. Thread-safe: Check is one atomic load while the tier is healthy (every request makes it);
// the error and the listener are guarded by a mutex.
class TierHealth {
 public:
  // `owner`: the server whose range group the shard is, named in the error.
  explicit TierHealth(int owner) : owner_(owner) {}

  TierHealth(const TierHealth&) = delete;
  TierHealth& operator=(const TierHealth&) = delete;

  // OK, or FailedPrecondition naming the first failure once a failure was recorded (until Reset).
  [[nodiscard]] absl::Status Check() const ABSL_LOCKS_EXCLUDED(mu_);
  // Records `status` when it is an error, runs the listener (outside the lock, on the calling thread) and returns
  // the error callers get from then on (FailedPrecondition naming the first failure); OK stays OK.
  [[nodiscard]] absl::Status Failed(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // `listener` (may be null, the default) runs for every failure Failed records.
  void SetListener(std::function<void(const absl::Status&)> listener) ABSL_LOCKS_EXCLUDED(mu_);
  // A restore replaced the shard's state: healthy again (the listener stays).
  void Reset() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int owner_;
  mutable absl::Mutex mu_;
  std::atomic<bool> failed_{false};  // written under mu_; read without it by Check
  std::string error_ ABSL_GUARDED_BY(mu_);
  std::function<void(const absl::Status&)> listener_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_TIER_HEALTH_H_
