// PreparedBatch: a Batch (worker/data/batch.h) with its keys sorted and deduped once (common/key_batch.h) and the
// segments of the deterministic gradient scatter. Thread-compatible.
#ifndef KESTREL_WORKER_PREPARED_BATCH_H_
#define KESTREL_WORKER_PREPARED_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/key_batch.h"
#include "common/partition.h"
#include "worker/data/batch.h"

namespace kestrel {

// A Batch with its keys deduped and sorted by server (once per step: the trainer hands `keys` to PsClient::Pull
// and Push, so it must be built with the client's partition), and the gather/scatter indices:
//   keys.inverse()[p]: the unique row of entry p;
//   segment u's entries: positions[offsets[u] .. offsets[u + 1]), ascending;
//   entry_bags[p]: the bag of entry p (empty when the batch is single_valued(): entry p is bag p).
// With several embedding tables (Prepare's `field_tables`), table t's rows are those of its unique keys:
//   tables[t].keys: those keys (a KeyBatch to pull and push them with), and tables[t].rows[i]: the place in
//   keys.unique_keys() of its i-th unique key. With one table, `tables` is empty (table 0 = every key).
struct PreparedBatch {
  struct TableKeys {
    KeyBatch keys;
    std::vector<uint32_t> rows;
  };
  Batch batch;
  KeyBatch keys;
  std::vector<uint32_t> offsets;     // num_unique + 1
  std::vector<uint32_t> positions;   // num_entries
  std::vector<uint32_t> entry_bags;  // num_entries, or empty (single-valued)
  std::vector<TableKeys> tables;     // one per embedding table when there are several
  std::vector<uint32_t> cursor;      // scratch of Prepare(), reused
  std::vector<uint64_t> scratch;     // scratch of Prepare(), reused

  // Builds keys, offsets, positions and entry_bags from batch (a counting sort of the inverse index:
  // O(entries)). `field_tables` (optional): the embedding table of each field, in [0, num_tables); with
  // num_tables > 1 it also builds `tables`.
  void Prepare(const Partition& partition, absl::Span<const int> field_tables = {}, int num_tables = 1);
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_PREPARED_BATCH_H_
