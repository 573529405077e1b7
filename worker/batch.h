// Batch: a mini-batch in the layout every model and backend uses, and PreparedBatch: the same with its keys
// sorted and deduped once (common/key_batch.h) and the segments of the deterministic gradient scatter.
//
// Every example has `fields` feature slots: slot f holds the key of (field f, its value) and the feature's
// value (1 for categorical and bucketized integer features, the libsvm value, 0 for padding). Criteo examples
// have 39 slots (13 bucketized integers, then 26 categoricals; worker/data/feature_map.h makes the keys) and
// optionally 13 dense inputs (log1p of the integers). Thread-compatible.
#ifndef KESTREL_WORKER_BATCH_H_
#define KESTREL_WORKER_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/key_batch.h"
#include "common/partition.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/libsvm_reader.h"

namespace kestrel {

inline constexpr int kCriteoFields = kCriteoIntegerFields + kCriteoCategoricalFields;

struct Batch {
  int64_t size = 0;   // examples
  int fields = 0;     // slots per example
  int dense_dim = 0;  // dense inputs per example
  std::vector<uint64_t> keys;  // size * fields
  std::vector<float> values;   // size * fields
  std::vector<float> dense;    // size * dense_dim
  std::vector<float> labels;   // size

  // Empties the batch (keeping its capacity) for examples of this shape.
  void Reset(int fields, int dense_dim);
};

// Appends a Criteo example: 39 slots, plus 13 dense inputs when batch->dense_dim is 13.
void AppendCriteo(const CriteoExample& example, Batch* batch);
// Appends a libsvm example into batch->fields slots (zero-valued padding after its features).
// InvalidArgument when it has more features than slots.
absl::Status AppendLibsvm(const LibsvmExample& example, Batch* batch);

// A Batch with its keys deduped and sorted by server (once per step: the trainer hands `keys` to PsClient::Pull
// and Push, so it must be built with the client's partition), and the gather/scatter indices:
//   keys.inverse()[p]: the unique row of position p = n * fields + f;
//   segment u's positions: positions[offsets[u] .. offsets[u + 1]), ascending.
struct PreparedBatch {
  Batch batch;
  KeyBatch keys;
  std::vector<uint32_t> offsets;    // num_unique + 1
  std::vector<uint32_t> positions;  // size * fields
  std::vector<uint32_t> cursor;     // scratch of Prepare(), reused

  // Builds keys, offsets and positions from batch (a counting sort of the inverse index: O(positions)).
  void Prepare(const Partition& partition);
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_BATCH_H_
