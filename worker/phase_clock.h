// PhaseClock: where a worker's training time goes (PhaseTimes), summed by the threads that spend it.
#ifndef KESTREL_WORKER_PHASE_CLOCK_H_
#define KESTREL_WORKER_PHASE_CLOCK_H_

#include <array>
#include <atomic>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kestrel {

// Where a worker's training time went: seconds summed over its iterations. `read` (reading and parsing lines,
// on the reader thread) and `batch` (key batching: dedup, sort, segments, on the preparer thread) overlap the
// rest; `pull`, `compute` (forward + backward), `push` and `wait` are the training loop's (pulls prefetched in
// ASP/SSP overlap too). `wait`: blocked on the clock gate (the consistency mode's barrier, the final all-finished
// barrier) or on the reader.
struct PhaseTimes {
  double read = 0;
  double batch = 0;
  double pull = 0;
  double compute = 0;
  double push = 0;
  double wait = 0;
};

// PhaseTimes accumulated by the reader, preparer, training and prefetching threads. Thread-safe.
class PhaseClock {
 public:
  enum Phase { kRead, kBatch, kPull, kCompute, kPush, kWait, kPhases };

  // Adds the time from its construction to its destruction to one phase. The clock must outlive it.
  class Scope {
   public:
    Scope(PhaseClock* clock, Phase phase) : clock_(clock), phase_(phase), start_(absl::Now()) {}
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() { clock_->Add(phase_, absl::Now() - start_); }

   private:
    PhaseClock* const clock_;
    const Phase phase_;
    const absl::Time start_;
  };

  void Add(Phase phase, absl::Duration d) {
    nanos_[phase].fetch_add(absl::ToInt64Nanoseconds(d), std::memory_order_relaxed);
  }
  PhaseTimes Get() const {
    auto seconds = [this](Phase p) { return nanos_[p].load(std::memory_order_relaxed) * 1e-9; };
    PhaseTimes t;
    t.read = seconds(kRead);
    t.batch = seconds(kBatch);
    t.pull = seconds(kPull);
    t.compute = seconds(kCompute);
    t.push = seconds(kPush);
    t.wait = seconds(kWait);
    return t;
  }
  void Reset() {
    for (auto& n : nanos_) n.store(0, std::memory_order_relaxed);
  }

 private:
  std::array<std::atomic<int64_t>, kPhases> nanos_{};
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_PHASE_CLOCK_H_
