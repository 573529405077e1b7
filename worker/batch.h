// Batch: a mini-batch in the layout every model and backend uses, and PreparedBatch: the same with its keys
// sorted and deduped once (common/key_batch.h) and the segments of the deterministic gradient scatter.
//
// Every example has `fields` features (bags). A bag holds entries: each a key (the row it looks up) and a
// value (what the row is multiplied by). A field's vector for an example is the sum over its bag of
// value * row (proto/schema.proto Pooling: MEAN and SQRT_N are folded into the values when the bag is
// closed). A single-valued feature is a bag of one entry (value 1 for categorical and bucketized features, the
// libsvm value); an empty bag contributes nothing.
// Layout: entries are stored example-major, then field, then in bag order. `bag_offsets` has size * fields + 1
// entries, bag b = n * fields + f holding entries [bag_offsets[b], bag_offsets[b + 1]); when it is empty every
// bag holds exactly one entry (entry b), the compact layout of single-valued data (Criteo). Criteo examples
// have 39 fields (13 bucketized integers, then 26 categoricals; worker/data/feature_map.h makes the keys) and
// optionally 13 dense inputs (log1p of the integers). Thread-compatible.
#ifndef KESTREL_WORKER_BATCH_H_
#define KESTREL_WORKER_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/key_batch.h"
#include "common/partition.h"
#include "proto/schema.pb.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/libsvm_reader.h"

namespace kestrel {

inline constexpr int kCriteoFields = kCriteoIntegerFields + kCriteoCategoricalFields;

struct Batch {
  int64_t size = 0;   // examples
  int fields = 0;     // bags per example
  int dense_dim = 0;  // dense inputs per example
  std::vector<uint64_t> keys;          // one per entry
  std::vector<float> values;           // one per entry
  std::vector<uint32_t> bag_offsets;   // size * fields + 1, or empty: one entry per bag (see above)
  std::vector<float> dense;            // size * dense_dim
  std::vector<float> labels;           // size
  std::vector<float> weights;          // size, or empty: every example weighs 1

  // Empties the batch (keeping its capacity) for examples of this shape.
  void Reset(int fields, int dense_dim);

  // Entries in all, and bags in all (size * fields).
  size_t num_entries() const { return keys.size(); }
  int64_t num_bags() const { return size * fields; }
  // Whether every bag holds one entry (bag_offsets is empty).
  bool single_valued() const { return bag_offsets.empty(); }
  // Bag b's entries: [bag_begin(b), bag_end(b)).
  uint32_t bag_begin(int64_t b) const { return single_valued() ? static_cast<uint32_t>(b) : bag_offsets[b]; }
  uint32_t bag_end(int64_t b) const { return single_valued() ? static_cast<uint32_t>(b + 1) : bag_offsets[b + 1]; }

  // Building an example: AddEntry() its entries field by field, CloseBag() after each of its `fields` bags
  // (also an empty one), then CloseExample(). The compact layout is kept while every bag holds one entry.
  void AddEntry(uint64_t key, float value) {
    keys.push_back(key);
    values.push_back(value);
  }
  // Ends the current bag, scaling its values for `pooling` (SUM: unchanged; MEAN: 1/n; SQRT_N: 1/sqrt(n)).
  void CloseBag(Pooling pooling = POOLING_SUM);
  // Ends the example (its dense inputs already appended); `weight` 1 keeps `weights` empty while all are 1.
  void CloseExample(float label, float weight = 1.0f);

  int64_t closed_bags = 0;  // bags closed so far (CloseBag)
};

// Appends a Criteo example: 39 slots, plus 13 dense inputs when batch->dense_dim is 13.
void AppendCriteo(const CriteoExample& example, Batch* batch);
// Appends a libsvm example into batch->fields slots (zero-valued padding after its features).
// InvalidArgument when it has more features than slots.
absl::Status AppendLibsvm(const LibsvmExample& example, Batch* batch);

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

#endif  // KESTREL_WORKER_BATCH_H_
