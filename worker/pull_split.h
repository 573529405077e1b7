// PullSplit: the unique keys of one batch split by whether another holds them too. With one worker whose servers
// hear no one else (kestrel_worker --local, TrainerOptions::split_pulls), a batch's push changes the rows of its own
// keys only: the next batch's keys that the current one lacks can be pulled while the current one computes, and
// only the shared ones wait for its push; of that push, only the rows of the shared keys must be in before the next
// batch's pull, the others may follow while the next batch computes. Either way, the same rows as a whole push
// then a whole pull.
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
  // The reverse: row part.positions[i] of `rows` into row i of `part_rows`.
  static void Gather(const Part& part, const float* rows, int dim, float* part_rows);

 private:
  Part early_, late_;
  std::vector<uint64_t> early_keys_, late_keys_;  // scratch
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_PULL_SPLIT_H_
