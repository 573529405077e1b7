#include "worker/scheduler_gate.h"

#include <atomic>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace kestrel {
namespace {

class SchedulerGate final : public ClockGate {
 public:
  SchedulerGate(SchedulerClient* client, int rank, uint64_t generation, std::string incarnation, uint64_t rollbacks,
                uint64_t layout_generation, absl::Duration poll)
      : client_(client),
        rank_(rank),
        generation_(generation),
        incarnation_(std::move(incarnation)),
        rollbacks_(rollbacks),
        layout_generation_(layout_generation),
        poll_(poll) {}

  absl::Status WaitToStart(int64_t clock) override {
    absl::StatusOr<int64_t> min_clock = client_->WaitToStart(rank_, clock, generation_, incarnation_, layout_generation_);
    if (min_clock.ok()) Heard(*min_clock);
    return min_clock.status();
  }
  absl::Status Advance(int64_t finished, bool done, const WorkerState& state) override {
    absl::StatusOr<int64_t> min_clock =
        client_->Advance(rank_, finished, generation_, incarnation_, done, &state, layout_generation_);
    if (min_clock.ok()) Heard(*min_clock);
    return min_clock.status();
  }
  int64_t KnownMinClock() const override { return known_min_clock_.load(std::memory_order_acquire); }
  absl::Status WaitAllFinished(int64_t iterations) override {
    while (true) {
      absl::StatusOr<DescribeResponse> d = client_->Describe();
      if (!d.ok()) return d.status();
      if (d->rollbacks() > rollbacks_) {
        return absl::AbortedError(absl::StrFormat(
            "the job rolled back to checkpoint %s (clock %d) while worker %d waited for the others to finish",
            d->latest_checkpoint(), d->latest_checkpoint_clock(), rank_));
      }
      if (d->view().layout_generation() > layout_generation_) {
        return absl::AbortedError(absl::StrFormat(
            "the job was rescaled (rescale %d) while worker %d waited for the others to finish: rejoin",
            d->view().layout_generation(), rank_));
      }
      // Finished is not enough: until the final checkpoint is committed a lost server means redoing the last
      // iterations, which needs every worker.
      if (d->min_clock() >= iterations && d->view().job_state() == "finished" && d->final_model_settled()) {
        return absl::OkStatus();
      }
      absl::SleepFor(poll_);
    }
  }

 private:
  SchedulerClient* const client_;
  const int rank_;
  const uint64_t generation_;
  const std::string incarnation_;
  const uint64_t rollbacks_;
  const uint64_t layout_generation_;
  const absl::Duration poll_;
  std::atomic<int64_t> known_min_clock_{-1};  // only rises (the min clock never goes back within a generation)

  void Heard(int64_t min_clock) {
    int64_t known = known_min_clock_.load(std::memory_order_relaxed);
    while (min_clock > known && !known_min_clock_.compare_exchange_weak(known, min_clock, std::memory_order_release)) {
    }
  }
};

}  // namespace

std::unique_ptr<ClockGate> NewSchedulerGate(SchedulerClient* client, int rank, uint64_t generation,
                                            std::string incarnation, uint64_t rollbacks, uint64_t layout_generation,
                                            absl::Duration poll) {
  return std::make_unique<SchedulerGate>(client, rank, generation, std::move(incarnation), rollbacks,
                                         layout_generation, poll);
}

}  // namespace kestrel
