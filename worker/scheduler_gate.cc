#include "worker/scheduler_gate.h"

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace kestrel {
namespace {

class SchedulerGate final : public ClockGate {
 public:
  SchedulerGate(SchedulerClient* client, int rank, uint64_t generation, absl::Duration poll)
      : client_(client), rank_(rank), generation_(generation), poll_(poll) {}

  absl::Status WaitToStart(int64_t clock) override {
    return client_->WaitToStart(rank_, clock, generation_).status();
  }
  absl::Status Advance(int64_t finished, bool done) override {
    return client_->Advance(rank_, finished, generation_, done).status();
  }
  absl::Status WaitAllFinished(int64_t iterations) override {
    while (true) {
      absl::StatusOr<DescribeResponse> d = client_->Describe();
      if (!d.ok()) return d.status();
      if (d->min_clock() >= iterations || d->view().job_state() == "finished") return absl::OkStatus();
      if (d->view().job_state() == "recovering") {
        return absl::AbortedError(absl::StrFormat(
            "the job is recovering from a failure (generation %d) while worker %d waits for the others to finish",
            d->view().generation(), rank_));
      }
      absl::SleepFor(poll_);
    }
  }

 private:
  SchedulerClient* const client_;
  const int rank_;
  const uint64_t generation_;
  const absl::Duration poll_;
};

}  // namespace

std::unique_ptr<ClockGate> NewSchedulerGate(SchedulerClient* client, int rank, uint64_t generation,
                                            absl::Duration poll) {
  return std::make_unique<SchedulerGate>(client, rank, generation, poll);
}

}  // namespace kestrel
