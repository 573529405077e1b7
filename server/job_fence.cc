#include "server/job_fence.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/limits.h"

namespace kestrel {

absl::Status JobFence::Check(absl::string_view job_id, int32_t worker_rank, uint64_t generation) const {
  if (worker_rank >= kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrFormat("worker rank %d is not below %d", worker_rank, kMaxWorkers));
  }
  if (job_id != job_id_) {
    // Neither job id is echoed: a caller probing for the job's name learns nothing.
    return absl::FailedPreconditionError(
        absl::StrFormat("the request's job id is not the one shard %d serves (check --job_id)", owner_));
  }
  if (worker_rank < 0) return absl::OkStatus();
  const uint64_t rolled_back_before = floor_.load(std::memory_order_acquire);
  if (generation < rolled_back_before) {
    return absl::AbortedError(absl::StrFormat(
        "request of generation %d from worker rank %d reached shard %d after the job rolled back to a checkpoint "
        "at generation %d: resume from the checkpoint",
        generation, worker_rank, owner_, rolled_back_before));
  }
  const std::shared_ptr<const View> view = std::atomic_load(&view_);
  if (view == nullptr) return absl::OkStatus();  // no scheduler (yet): unchecked
  if (static_cast<size_t>(worker_rank) >= view->worker_generations.size()) {
    // A worker a rescale added, before this shard heard of it (kMaxWorkers bounds the rank): ask, and retry.
    TellListener();
    return absl::UnavailableError(absl::StrFormat(
        "worker rank %d is not one of the job's %d workers this shard knows of (a rescale may have added it): retry",
        worker_rank, view->worker_generations.size()));
  }
  const uint64_t expected = view->worker_generations[worker_rank];
  if (generation < expected) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "request of generation %d from worker rank %d reached shard %d, but that rank's requests carry generation "
        "%d since it registered again: the sender was superseded",
        generation, worker_rank, owner_, expected));
  }
  if (generation > expected) {
    TellListener();
    return absl::UnavailableError(absl::StrFormat(
        "request of generation %d from worker rank %d reached shard %d, which knows generation %d for that rank: "
        "it has not heard of the newer one from the scheduler yet; retry",
        generation, worker_rank, owner_, expected));
  }
  return absl::OkStatus();
}

void JobFence::SetView(uint64_t job_generation, std::vector<uint64_t> worker_generations) {
  auto view = std::make_shared<View>();
  view->job_generation = job_generation;
  view->worker_generations = std::move(worker_generations);
  std::atomic_store(&view_, std::shared_ptr<const View>(std::move(view)));
  absl::MutexLock lock(&mu_);
  job_generation_ = std::max(job_generation_, job_generation);
}

void JobFence::SetListener(std::function<void()> listener) {
  absl::MutexLock lock(&mu_);
  listener_ = std::move(listener);
}

void JobFence::TellListener() const {
  absl::MutexLock lock(&mu_);
  if (listener_) listener_();
}

absl::Status JobFence::CheckRestoreGeneration(uint64_t min_worker_generation, absl::Duration wait) const {
  if (min_worker_generation == 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (job_generation_ < min_worker_generation && listener_) {  // without a scheduler, nothing to wait for
    listener_();
    struct Reached {
      const JobFence* fence;
      uint64_t generation;
    } reached{this, min_worker_generation};
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](Reached* r) ABSL_NO_THREAD_SAFETY_ANALYSIS {  // held: Await's contract
                               return r->fence->job_generation_ >= r->generation;
                             },
                             &reached),
                         wait);
  }
  if (job_generation_ < min_worker_generation) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "min_worker_generation %d is ahead of the job's generation %d (as shard %d heard it from the scheduler%s)",
        min_worker_generation, job_generation_, owner_,
        listener_ ? "" : "; it runs without one, so only 0 is valid"));
  }
  return absl::OkStatus();
}

void JobFence::RaiseFloor(uint64_t min_worker_generation) {
  uint64_t floor = floor_.load();
  while (floor < min_worker_generation && !floor_.compare_exchange_weak(floor, min_worker_generation)) {
  }
}

}  // namespace kestrel
