// PullSplit: the unique keys of the next batch split by whether the current batch holds them too. With one worker
// whose servers hear no one else (kestrel_worker --local), the current batch's push changes the rows of the shared
// keys only, so the others can be pulled while the current batch computes (TrainerOptions::split_pulls) and only
// the shared ones, after the push, wait on it: the same rows as one pull after the push.
//
// Thread-compatible.
#ifndef KESTREL_WORKER_PULL_SPLIT_H_
#define KESTREL_WORKER_PULL_SPLIT_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/key_batch.h"
#include "common/partition.h"

namespace kestrel {

class PullSplit {
 public:
  // One side of the split: its keys as a KeyBatch of their own (strictly increasing per server, so unique_keys()
  // is the keys in next's order), and where each sits in next.unique_keys().
  struct Part {
    KeyBatch keys;
    std::vector<uint32_t> positions;
  };

  // Splits next.unique_keys() into early (not in current) and late (in current). Both batches were built for
  // `partition`.
  void Build(const KeyBatch& current, const KeyBatch& next, const Partition& partition);

  const Part& early() const { return early_; }
  const Part& late() const { return late_; }

  // Row i of `part_rows` (dim floats per key of `part`, in its order) into row part.positions[i] of `rows`.
  static void Place(const Part& part, const float* part_rows, int dim, float* rows);

 private:
  Part early_, late_;
  std::vector<uint64_t> early_keys_, late_keys_;  // scratch
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_PULL_SPLIT_H_
