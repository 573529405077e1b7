// Batch: a mini-batch of examples in the layout every model and backend uses, as the data formats fill it.
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
#ifndef KESTREL_WORKER_DATA_BATCH_H_
#define KESTREL_WORKER_DATA_BATCH_H_

#include <cstdint>
#include <vector>

#include "proto/schema.pb.h"

namespace kestrel {

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
  void CloseBag(Pooling pooling = POOLING_SUM) {
    // Inline, the common case: a compact batch and a bag of one entry (nothing to scale).
    if (bag_offsets.empty() && keys.size() == static_cast<size_t>(closed_bags) + 1) {
      ++closed_bags;
      return;
    }
    CloseOtherBag(pooling);
  }
  // Ends the example (its dense inputs already appended); `weight` 1 keeps `weights` empty while all are 1.
  void CloseExample(float label, float weight = 1.0f);

  // Appends the examples of `other` (of the same shape; its examples all closed), exactly as if they had been
  // built into this batch after its own: the layout stays compact while both are.
  void Append(const Batch& other);

  int64_t closed_bags = 0;  // bags closed so far (CloseBag)

 private:
  // CloseBag but for its inline case.
  void CloseOtherBag(Pooling pooling);
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_BATCH_H_
