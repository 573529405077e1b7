// Completion: waits for a known number of asynchronous calls (a PsTransport's `done` callbacks) to finish.
#ifndef KESTREL_WORKER_COMPLETION_H_
#define KESTREL_WORKER_COMPLETION_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kestrel {

// Counts outstanding calls; Wait() returns when all have called Done(). Thread-safe: Done() may run on any
// thread, before or while another waits. Must outlive every Done() call.
class Completion {
 public:
  explicit Completion(int pending) : pending_(pending) {}
  void Done() {
    absl::MutexLock lock(&mu_);
    --pending_;
  }
  void Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* pending) { return *pending == 0; }, &pending_));
  }

 private:
  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_COMPLETION_H_
