// JobFence: which senders one shard takes requests from: the job's id, and the generation fence that keeps out
// worker incarnations the job no longer has.
//
// A worker's requests carry the generation the scheduler answered its registration (or rejoin) with. Two things
// fence generations:
//   - the scheduler's view (SetView, from each heartbeat answer): once the shard has heard from the scheduler, a
//     worker's request must carry exactly the generation the scheduler holds for its rank. An older one comes
//     from a superseded incarnation (a revived zombie), a newer one from a registration this shard has not heard
//     of yet (the listener is told, so the server asks the scheduler at once);
//   - a restore's floor (RaiseFloor): requests of generations below it belong to the timeline rolled back.
// Tools (worker rank -1) are checked for the job id only.
#ifndef KESTREL_SERVER_JOB_FENCE_H_
#define KESTREL_SERVER_JOB_FENCE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kestrel {

// Owned by its Shard. Thread-safe: Check, on every request, reads the view through an atomic shared pointer and
// the floor through an atomic; the job generation heard and the listener are guarded by a mutex, which the
// listener runs under (it must not block, nor call back into the fence).
class JobFence {
 public:
  // `job_id`: the job requests must name. `owner`: the server whose range group the shard is, named in errors.
  JobFence(std::string job_id, int owner) : job_id_(std::move(job_id)), owner_(owner) {}

  JobFence(const JobFence&) = delete;
  JobFence& operator=(const JobFence&) = delete;

  // A request of `worker_rank` (-1: a tool) carrying `generation`: InvalidArgument for a rank not below
  // kMaxWorkers; FailedPrecondition naming neither job id when `job_id` is not the shard's. For workers, then:
  // Aborted below the floor; and once a view was set, Unavailable (retry; the listener is told) for a rank beyond
  // the view's workers or a generation newer than the rank's, FailedPrecondition for an older one.
  [[nodiscard]] absl::Status Check(absl::string_view job_id, int32_t worker_rank, uint64_t generation) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // What the scheduler's latest heartbeat answer said: the job generation and, by worker rank, the generation
  // each rank's requests carry. Until the first call, worker generations are not checked (a server without a
  // scheduler).
  void SetView(uint64_t job_generation, std::vector<uint64_t> worker_generations) ABSL_LOCKS_EXCLUDED(mu_);
  // `listener` (may be null, the default) runs, on the calling thread under the fence's mutex, whenever a request
  // or a restore carries a generation the fence has not heard of.
  void SetListener(std::function<void()> listener) ABSL_LOCKS_EXCLUDED(mu_);
  // A restore that would raise the floor to `min_worker_generation` must not be ahead of the job: waits up to
  // `wait` for a view of a job generation that high (telling the listener first), then InvalidArgument. Without
  // a listener (no scheduler) only 0 is valid.
  [[nodiscard]] absl::Status CheckRestoreGeneration(uint64_t min_worker_generation, absl::Duration wait) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // From now on, worker requests of a generation below `min_worker_generation` are refused; the floor never
  // goes down.
  void RaiseFloor(uint64_t min_worker_generation);
  uint64_t floor() const { return floor_.load(std::memory_order_acquire); }

 private:
  struct View {
    uint64_t job_generation = 0;
    std::vector<uint64_t> worker_generations;  // by worker rank
  };

  void TellListener() const ABSL_LOCKS_EXCLUDED(mu_);

  const std::string job_id_;
  const int owner_;
  std::atomic<uint64_t> floor_{0};  // raised by RaiseFloor
  std::shared_ptr<const View> view_;  // std::atomic_load/store; null: no word from a scheduler yet
  mutable absl::Mutex mu_;  // lets CheckRestoreGeneration wait for a newer view
  uint64_t job_generation_ ABSL_GUARDED_BY(mu_) = 0;  // the highest SetView gave
  std::function<void()> listener_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_JOB_FENCE_H_
