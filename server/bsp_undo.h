// BspUndo: in BSP, by table, the rows the last applied clock changed as they were before it, so that a worker's
// pull for a clock already applied is answered with the rows its predecessor saw.
//
// Only a replacement of a worker that died after pushing clock c pulls for c once c was applied: answered with
// the rows as they were before c, it recomputes exactly the gradients its predecessor pushed, and the shard
// recognizes its repeated pushes as repeats (server/bsp_aggregator.h). One record per table, replaced by each
// clock applied to it; a restore or a change of BSP's worker count clears them (Clear).
#ifndef KESTREL_SERVER_BSP_UNDO_H_
#define KESTREL_SERVER_BSP_UNDO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "server/bsp_aggregator.h"
#include "server/table.h"
#include "server/tier_health.h"

namespace kestrel {

// Owned by its Shard. Thread-safe: applying a clock holds the records' mutex exclusively across the table's
// update, a worker's pull holds it shared across its table read, so a pull sees a clock applied whole or not at all.
class BspUndo {
 public:
  BspUndo() = default;
  BspUndo(const BspUndo&) = delete;
  BspUndo& operator=(const BspUndo&) = delete;

  // Applies the combined `batch` of a BSP clock to `table`, first keeping the values its rows hold (replacing the
  // table's record). The table's error is recorded in `health` before any pull can see the table; returns what
  // health answers (OK when the update succeeded).
  [[nodiscard]] absl::Status Apply(Table& table, const BspAggregator::Batch& batch, TierHealth& health) ABSL_LOCKS_EXCLUDED(mu_);
  // A worker's pull of `keys` (the table's, sorted; dense block keys in any order) for `clock` into `out`
  // (keys.size() * dim floats): Table::Pull, then, when `clock` is the last clock applied to the table, the rows
  // it changed as they were before it.
  [[nodiscard]] absl::Status Pull(const Table& table, absl::Span<const uint64_t> keys, int64_t clock, float* out) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets every record (a restore, or a new BSP worker count: a re-pull is of the old timeline or layout).
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Undo {
    int64_t clock = -1;
    std::vector<uint64_t> keys;  // sorted, unique
    std::vector<float> values;   // keys.size() * dim, before the clock
  };

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Undo> undo_ ABSL_GUARDED_BY(mu_);  // by table name
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_BSP_UNDO_H_
