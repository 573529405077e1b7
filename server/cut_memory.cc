#include "server/cut_memory.h"

#include <algorithm>

namespace kestrel {

void CutMemory::set_bound(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  bound_.store(bytes, std::memory_order_relaxed);
  room_.SignalAll();
}

void CutMemory::Add(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  const uint64_t now = bytes_.load(std::memory_order_relaxed) + bytes;
  bytes_.store(now, std::memory_order_relaxed);
  peak_ = std::max(peak_, now);
}

void CutMemory::Release(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  const uint64_t held = bytes_.load(std::memory_order_relaxed);
  bytes_.store(held - std::min(held, bytes), std::memory_order_relaxed);
  room_.SignalAll();
}

void CutMemory::AwaitRoomSlow() {
  absl::MutexLock lock(&mu_);
  const absl::Time start = absl::Now();
  ++waiters_;
  while (true) {
    const uint64_t bound = bound_.load(std::memory_order_relaxed);
    if (bound == 0 || bytes_.load(std::memory_order_relaxed) < bound) break;
    room_.Wait(&mu_);
  }
  --waiters_;
  waited_ += absl::Now() - start;
}

uint64_t CutMemory::peak() const {
  absl::MutexLock lock(&mu_);
  return peak_;
}

absl::Duration CutMemory::waited() const {
  absl::MutexLock lock(&mu_);
  return waited_;
}

int CutMemory::waiters() const {
  absl::MutexLock lock(&mu_);
  return waiters_;
}

void CutMemory::ResetPeak() {
  absl::MutexLock lock(&mu_);
  peak_ = bytes_.load(std::memory_order_relaxed);
  waited_ = absl::ZeroDuration();
}

}  // namespace kestrel
