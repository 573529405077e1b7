// RecentRequests: remembers the last request ids of each worker, so a retried push (same id) is applied once
// and is not acknowledged before the original is applied.
//
// Request ids are unique per client process (random start, then a counter), so a restarted worker's new
// requests never collide with its predecessor's. Memory is bounded: at most `max_workers` windows of
// `per_worker` ids (the senders are the network's; a window is never dropped to make room for another, since
// that worker's retries would then be applied twice). Thread-safe.
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
  enum class Seen { kNew, kInFlight, kApplied, kNoRoom };
  static constexpr size_t kDefaultWindow = 8192;
  static constexpr size_t kDefaultMaxWorkers = 256;

  // Remembers the last `per_worker` ids of each of up to `max_workers` workers.
  explicit RecentRequests(size_t per_worker = kDefaultWindow, size_t max_workers = kDefaultMaxWorkers)
      : per_worker_(per_worker), max_workers_(max_workers) {}

  // Records (worker, id) as in flight when it is new; otherwise says whether the first one is still being
  // applied (answer the repeat UNAVAILABLE: retry) or was applied (acknowledge it without applying again).
  // kNoRoom: `worker` is new and max_workers others already have a window (refuse the push).
  Seen Begin(int worker, uint64_t id);
  // The push (worker, id) is applied.
  void Applied(int worker, uint64_t id);

  // The job's worker count, once known (windows already held are kept).
  void SetMaxWorkers(size_t max_workers);
  size_t max_workers() const;

 private:
  struct Window {
    absl::flat_hash_map<uint64_t, bool> applied;  // id -> applied (false: in flight)
    std::deque<uint64_t> order;
  };
  const size_t per_worker_;
  mutable absl::Mutex mu_;
  size_t max_workers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, Window> windows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_RECENT_REQUESTS_H_
