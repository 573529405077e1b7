// A fixed pool of worker threads running queued tasks in FIFO order.
//
// Thread-safe. The destructor finishes every queued task, then joins the threads.
#ifndef KESTREL_COMMON_THREAD_POOL_H_
#define KESTREL_COMMON_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kestrel {

class ThreadPool {
 public:
  // Starts `threads` (>= 1) threads.
  explicit ThreadPool(int threads);
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }
  void Schedule(std::function<void()> task);

 private:
  void Work();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kestrel

#endif  // KESTREL_COMMON_THREAD_POOL_H_
