// RecentRequests: remembers the last request ids of each worker, so a retried push (same id) is applied once
// and is not acknowledged before the original is applied.
//
// Request ids are unique per client process (random start, then a counter), so a restarted worker's new
// requests never collide with its predecessor's. Thread-safe.
#ifndef KESTREL_SERVER_RECENT_REQUESTS_H_
#define KESTREL_SERVER_RECENT_REQUESTS_H_

#include <cstdint>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace kestrel {

class RecentRequests {
 public:
  enum class Seen { kNew, kInFlight, kApplied };

  // Remembers the last `per_worker` ids of each worker (default 8192).
  explicit RecentRequests(size_t per_worker = 8192) : per_worker_(per_worker) {}

  // Records (worker, id) as in flight when it is new; otherwise says whether the first one is still being
  // applied (answer the repeat UNAVAILABLE: retry) or was applied (acknowledge it without applying again).
  Seen Begin(int worker, uint64_t id);
  // The push (worker, id) is applied.
  void Applied(int worker, uint64_t id);

 private:
  struct Window {
    absl::flat_hash_map<uint64_t, bool> applied;  // id -> applied (false: in flight)
    std::deque<uint64_t> order;
  };
  const size_t per_worker_;
  absl::Mutex mu_;
  absl::flat_hash_map<int, Window> windows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_RECENT_REQUESTS_H_
