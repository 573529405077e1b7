// RecentRequests: remembers the last request ids of each worker, so a retried push (same id) is applied once.
//
// Request ids are unique per client process (common practice: random high bits, counter low bits), so a
// restarted worker's new requests never collide with its predecessor's. Thread-safe.
#ifndef KESTREL_SERVER_RECENT_REQUESTS_H_
#define KESTREL_SERVER_RECENT_REQUESTS_H_

#include <cstdint>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace kestrel {

class RecentRequests {
 public:
  // Remembers the last `per_worker` ids of each worker (default 8192).
  explicit RecentRequests(size_t per_worker = 8192) : per_worker_(per_worker) {}

  // Records (worker, id); false when it was already recorded (a duplicate).
  bool Insert(int worker, uint64_t id);

 private:
  struct Window {
    absl::flat_hash_set<uint64_t> ids;
    std::deque<uint64_t> order;
  };
  const size_t per_worker_;
  absl::Mutex mu_;
  absl::flat_hash_map<int, Window> windows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_RECENT_REQUESTS_H_
