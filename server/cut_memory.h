// CutMemory: the bytes one shard's tables hold in retained row copies for a pending copy-on-write checkpoint cut
// (server/table.h, Table::BeginCut), against a bound.
//
// While a cut is being written, a push that changes a row of the cut not yet written first copies the row as it
// was at the cut (its values, optimizer state and meta); the writer frees a stripe's copies once it has written the
// stripe. When the copies reach the bound, pushes wait (AwaitRoom, before they take any lock) until the writer
// frees some: back-pressure, never a failure and never a row from after the cut in the checkpoint. A push already
// past AwaitRoom may take the copies past the bound by at most its own rows.
//
// Thread-safe.
#ifndef KESTREL_SERVER_CUT_MEMORY_H_
#define KESTREL_SERVER_CUT_MEMORY_H_

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kestrel {

class CutMemory {
 public:
  // Default bound: 512 MiB (kestrel_server --checkpoint_retained_mb).
  static constexpr uint64_t kDefaultBound = uint64_t{512} << 20;

  explicit CutMemory(uint64_t bound = kDefaultBound) : bound_(bound) {}

  CutMemory(const CutMemory&) = delete;
  CutMemory& operator=(const CutMemory&) = delete;

  // 0: no bound.
  void set_bound(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t bound() const { return bound_.load(std::memory_order_relaxed); }

  void Add(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void Release(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Returns at once while the copies are under the bound; otherwise waits until they are.
  void AwaitRoom() ABSL_LOCKS_EXCLUDED(mu_) {
    const uint64_t bound = bound_.load(std::memory_order_relaxed);
    if (bound == 0 || bytes_.load(std::memory_order_relaxed) < bound) return;
    AwaitRoomSlow();
  }

  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  // The most bytes held since the last ResetPeak, and how long pushes waited for room (summed over pushes).
  uint64_t peak() const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Duration waited() const ABSL_LOCKS_EXCLUDED(mu_);
  void ResetPeak() ABSL_LOCKS_EXCLUDED(mu_);
  // Pushes waiting for room now.
  int waiters() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void AwaitRoomSlow() ABSL_LOCKS_EXCLUDED(mu_);

  std::atomic<uint64_t> bound_;
  std::atomic<uint64_t> bytes_{0};
  mutable absl::Mutex mu_;
  absl::CondVar room_;
  uint64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration waited_ ABSL_GUARDED_BY(mu_);
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_CUT_MEMORY_H_
