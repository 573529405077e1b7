// A fixed pool of worker threads running queued tasks in FIFO order.
//
// Thread-safe. The destructor finishes every queued task, then joins the threads.
#ifndef KESTREL_COMMON_THREAD_POOL_H_
#define KESTREL_COMMON_THREAD_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kestrel {

class ThreadPool {
 public:
  // Starts `threads` (>= 1) threads. `max_queued`: most tasks waiting for a thread (TrySchedule refuses more).
  // Default: unbounded (for pools fed by the process itself; a pool fed by the network sets a bound).
  explicit ThreadPool(int threads, size_t max_queued = SIZE_MAX);
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }
  void Schedule(std::function<void()> task);
  // Schedule unless max_queued tasks are already waiting; then false, and `task` is dropped unrun.
  bool TrySchedule(std::function<void()> task);

 private:
  void Work();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  const size_t max_queued_;
  std::vector<std::thread> threads_;
};

}  // namespace kestrel

#endif  // KESTREL_COMMON_THREAD_POOL_H_
