#include "worker/scheduler_gate.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/fault_injection.h"
#include "common/logging.h"
#include "common/retry.h"
#include "common/status.h"

namespace kestrel {
namespace {

class SchedulerGate final : public ClockGate {
 public:
  SchedulerGate(SchedulerClient* client, int rank, uint64_t generation, std::string incarnation, uint64_t rollbacks,
                uint64_t layout_generation, absl::Duration poll, bool leased, std::optional<int> read_lag,
                absl::Duration patience)
      : patience_(patience),
        leased_(leased),
        read_lag_(read_lag),
        client_(client),
        rank_(rank),
        generation_(generation),
        incarnation_(std::move(incarnation)),
        rollbacks_(rollbacks),
        layout_generation_(layout_generation),
        poll_(poll) {}

  absl::Status WaitToStart(int64_t clock) override {
    if (leased_ && clock <= permitted_through_.load(std::memory_order_acquire)) return absl::OkStatus();
    int64_t through = clock;
    absl::StatusOr<int64_t> min_clock = Patiently("WaitToStart", [&] {
      return client_->WaitToStart(rank_, clock, generation_, incarnation_, layout_generation_, &through);
    });
    if (!min_clock.ok()) return min_clock.status();
    Heard(*min_clock);
    if (leased_) permitted_through_.store(through, std::memory_order_release);
    return absl::OkStatus();
  }
  bool Leased() const override { return leased_; }
  bool PermittedNow(int64_t clock) const override {
    return leased_ && clock <= permitted_through_.load(std::memory_order_acquire);
  }
  absl::Status StopAt(int64_t clock, const WorkerState& state) override {
    // The lease ends here: the report reaches the scheduler, and the permission is asked of it.
    int64_t permitted = permitted_through_.load(std::memory_order_acquire);
    while (permitted >= clock &&
           !permitted_through_.compare_exchange_weak(permitted, clock - 1, std::memory_order_acq_rel)) {
    }
    return ClockGate::StopAt(clock, state);
  }
  std::optional<int64_t> WaitClock(int64_t clock) const override {
    if (!read_lag_.has_value()) return std::nullopt;
    return std::max<int64_t>(0, clock - *read_lag_);
  }
  absl::Status Advance(int64_t finished, bool done, const WorkerState& state) override {
    // Leased: progress is reported at the lease's end (the next WaitToStart asks for a new one), and at the last.
    if (leased_ && !done && finished <= permitted_through_.load(std::memory_order_acquire)) {
      return absl::OkStatus();
    }
    // At a lease's end the report also asks for the next lease (one call per lease).
    CrashPoint("worker.report.before");  // crash tests: dies with its pushes in, unreported
    int64_t through = -1;
    absl::StatusOr<int64_t> min_clock = Patiently("Advance", [&] {
      return client_->Advance(rank_, finished, generation_, incarnation_, done, &state, layout_generation_,
                              leased_ && !done ? &through : nullptr);
    });
    if (!min_clock.ok()) return min_clock.status();
    Heard(*min_clock);
    if (through >= finished) permitted_through_.store(through, std::memory_order_release);
    return absl::OkStatus();
  }
  int64_t KnownMinClock() const override { return known_min_clock_.load(std::memory_order_acquire); }
  absl::Status WaitAllFinished(int64_t iterations) override {
    while (true) {
      absl::StatusOr<DescribeResponse> d = Patiently("Describe", [&] { return client_->Describe(); });
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
  // Runs `call` until the scheduler answers it (anything but a transient error) or patience_ runs out.
  template <typename Call>
  auto Patiently(const char* what, Call call) -> decltype(call()) {
    const absl::Time give_up = absl::Now() + patience_;
    absl::Duration backoff = absl::Milliseconds(50);
    auto result = call();
    if (result.ok() || !IsTransient(result.status())) return result;
    KLOG(Warning) << "the scheduler cannot be reached (" << what << ": " << result.status()
                  << "); asking again for up to " << absl::FormatDuration(patience_);
    while (!result.ok() && IsTransient(result.status()) && absl::Now() + backoff < give_up) {
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Seconds(1));
      result = call();
    }
    if (result.ok()) KLOG(Info) << "the scheduler answers again (" << what << ")";
    return result;
  }

  const absl::Duration patience_;
  const bool leased_;
  const std::optional<int> read_lag_;
  std::atomic<int64_t> permitted_through_{-1};  // leased: the last iteration the scheduler permitted
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
                                            absl::Duration poll, bool leased, std::optional<int> read_lag,
                                            absl::Duration patience) {
  return std::make_unique<SchedulerGate>(client, rank, generation, std::move(incarnation), rollbacks,
                                         layout_generation, poll, leased, read_lag, patience);
}

}  // namespace kestrel
