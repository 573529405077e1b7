// BspAggregator: the synchronous-SGD combination of one table's pushes on one server.
//
// In BSP mode a server must apply exactly  theta <- theta - alpha * (1/N) * sum_i g_i  for each clock: it
// buffers the pushes of clock c from all N workers and, once all have arrived, sums them in rank order (so the
// floating-point result never depends on arrival order), scales by 1/N, and hands back one batch to apply
// (the optimizer then runs once per touched row). A worker's push for a clock may arrive in several parts
// (the client splits large requests); every worker sends at least one part per clock, empty if it has no keys
// on this server, and pushes each table once per clock. A part that arrives again with the same contents (a
// retry, a restarted worker) is ignored; different contents are refused (InvalidArgument), as are parts for a
// clock already applied that are not such repeats, and parts of a clock while an earlier one still misses
// some worker's push (FailedPrecondition, naming the workers). Only the clock being collected is buffered:
// parts of another clock, or of one past the next after the last applied, are refused (FailedPrecondition),
// so no sender can make a server hold many clocks. A repeat of a clock that is being applied is
// answered Unavailable (retry), so nothing is acknowledged before it is in the table.
//
// Tables whose pushes are values, not gradients (OptimizerConfig::ASSIGN), combine with Combine::kSum: the sum
// is not scaled, so a key written by one worker while the others push nothing for it (empty parts, or parts
// without that key) gets that worker's value bit for bit.
//
// Elastic jobs (docs/elasticity.md): when workers die mid-clock and are removed, Fence() refuses their parts from
// that clock on and says whether the clock was applied with them already; CompleteWithout() then combines the
// clock from the other workers' parts, averaged over those workers (summed with Combine::kSum).
//
// Thread-safe. Owns copies of buffered gradients.
#ifndef KESTREL_SERVER_BSP_AGGREGATOR_H_
#define KESTREL_SERVER_BSP_AGGREGATOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace kestrel {

class BspAggregator {
 public:
  // One part of one worker's push for one clock.
  struct Part {
    int worker = 0;     // rank in [0, num_workers)
    int64_t clock = 0;  // the iteration the gradients belong to
    int index = 0;      // which part, in [0, count)
    int count = 1;      // how many parts this worker sends for this clock
    absl::Span<const uint64_t> keys;  // unique
    absl::Span<const float> grads;    // keys.size() * dim
  };

  // The combined update of one clock: sorted unique keys and their averaged gradients.
  struct Batch {
    int64_t clock = 0;
    std::vector<uint64_t> keys;
    std::vector<float> grads;
  };

  // How the parts of a clock combine into what is applied.
  enum class Combine {
    kMean,  // the sum over the contributing workers divided by their count (gradients: synchronous SGD)
    kSum,   // the sum alone (pushed values, OptimizerConfig::ASSIGN)
  };

  // Default: Combine::kMean.
  BspAggregator(int num_workers, int dim, Combine combine = Combine::kMean)
      : num_workers_(num_workers), dim_(dim), combine_(combine) {}

  // Buffers `part`. Returns the clock's combined batch when this part completes it (every worker's every
  // part has arrived), nullopt otherwise (or for a repeat). The caller applies the batch, then calls
  // Applied(clock). InvalidArgument for a malformed part (worker or index out of range, a part count that
  // changed, keys/grads mismatch, different contents for a part already received).
  [[nodiscard]] absl::StatusOr<std::optional<Batch>> Add(const Part& part);
  // The batch of `clock` is in the table.
  void Applied(int64_t clock);

  // What a clock was when workers were fenced off it.
  enum class Fenced {
    kNotApplied,        // still collected (or not started): it can be completed without them
    kApplied,           // applied (or being applied) with their parts: too late to leave them out
    kCompletedWithout,  // completed without them by an earlier CompleteWithout
  };
  // The workers `workers` (ranks in [0, num_workers)) were removed while clock `clock` was collected: their parts
  // of `clock` and later are refused from now on (FailedPrecondition), and the answer says what `clock` is.
  // InvalidArgument for a rank out of range or a fence that would leave no worker.
  [[nodiscard]] absl::StatusOr<Fenced> Fence(const std::vector<int>& workers, int64_t clock);
  // Combines fenced `clock` from the parts of the workers not fenced (kMean: scaled by 1 / their count), and hands
  // it back to apply (then Applied(clock)); nullopt when `clock` was applied already or nobody pushed it.
  // FailedPrecondition when `clock` is not the fenced one or a worker not fenced has not pushed all of it.
  [[nodiscard]] absl::StatusOr<std::optional<Batch>> CompleteWithout(int64_t clock);

  // The highest clock already combined, or -1.
  int64_t applied_through() const;
  // Whether every part of worker `worker`'s push of `clock` is buffered here (false for a rank out of range, or
  // a clock not being collected).
  bool HasPushed(int worker, int64_t clock) const;
  // Clocks with buffered parts waiting for others.
  size_t pending_clocks() const;

 private:
  struct PartData {
    std::vector<uint64_t> keys;
    std::vector<float> grads;
    size_t hash = 0;  // of keys and grads, to tell a repeat from different contents
  };
  struct WorkerParts {
    int count = 0;  // 0: nothing received yet
    std::map<int, PartData> parts;  // by part index
  };
  struct PendingClock {
    std::vector<WorkerParts> workers;
    int complete_workers = 0;
  };

  // Sums the parts in rank order and, for Combine::kMean, scales by 1 / `contributors`.
  Batch CombineLocked(int64_t clock, PendingClock& pending, int contributors) const;
  // Records the parts of `clock` (repeats are recognized) and hands it out to apply.
  void MarkApplyingLocked(int64_t clock, PendingClock& pending) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int num_workers_;
  const int dim_;
  const Combine combine_;
  mutable absl::Mutex mu_;
  std::map<int64_t, PendingClock> pending_ ABSL_GUARDED_BY(mu_);
  int64_t applied_through_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t applying_ ABSL_GUARDED_BY(mu_) = -1;  // handed out by Add, Applied() not yet called
  // Content hashes of the parts of the last applied clocks, by (worker, index), to recognize repeats.
  std::map<int64_t, std::map<std::pair<int, int>, size_t>> applied_parts_ ABSL_GUARDED_BY(mu_);
  // Fence(): the workers whose parts of fenced_from_ and later are refused.
  std::vector<bool> fenced_ ABSL_GUARDED_BY(mu_);
  int64_t fenced_from_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t completed_without_ ABSL_GUARDED_BY(mu_) = -1;  // the clock CompleteWithout combined (-1: none)
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_BSP_AGGREGATOR_H_
