#include "worker/batch.h"

#include "absl/strings/str_cat.h"

namespace kestrel {

void Batch::Reset(int fields_in, int dense_dim_in) {
  size = 0;
  fields = fields_in;
  dense_dim = dense_dim_in;
  keys.clear();
  values.clear();
  dense.clear();
  labels.clear();
}

void AppendCriteo(const CriteoExample& example, Batch* batch) {
  for (int j = 0; j < kCriteoIntegerFields; ++j) {
    batch->keys.push_back(IntegerKey(j, example.integer_missing[j], example.integers[j]));
  }
  for (int f = 0; f < kCriteoCategoricalFields; ++f) batch->keys.push_back(CategoricalKey(f, example.categories[f]));
  batch->values.insert(batch->values.end(), kCriteoFields, 1.0f);
  if (batch->dense_dim == kCriteoIntegerFields) {
    for (int j = 0; j < kCriteoIntegerFields; ++j) {
      batch->dense.push_back(DenseInput(example.integer_missing[j], example.integers[j]));
    }
  }
  batch->labels.push_back(example.label);
  ++batch->size;
}

absl::Status AppendLibsvm(const LibsvmExample& example, Batch* batch) {
  const size_t n = example.indices.size();
  if (n > static_cast<size_t>(batch->fields)) {
    return absl::InvalidArgumentError(absl::StrCat("an example has ", n, " features, more than the ", batch->fields,
                                                   " slots configured (data.libsvm_slots)"));
  }
  for (size_t i = 0; i < n; ++i) {
    batch->keys.push_back(LibsvmKey(example.indices[i]));
    batch->values.push_back(example.values[i]);
  }
  // Padding: the key of feature index 0 with value 0 contributes nothing and receives a zero gradient.
  for (size_t i = n; i < static_cast<size_t>(batch->fields); ++i) {
    batch->keys.push_back(LibsvmKey(0));
    batch->values.push_back(0.0f);
  }
  batch->dense.insert(batch->dense.end(), batch->dense_dim, 0.0f);
  batch->labels.push_back(example.label);
  ++batch->size;
  return absl::OkStatus();
}

void PreparedBatch::Prepare(const Partition& partition) {
  keys.Build(batch.keys, partition);
  const size_t unique = keys.num_unique();
  const absl::Span<const uint32_t> inverse = keys.inverse();
  offsets.assign(unique + 1, 0);
  for (uint32_t u : inverse) ++offsets[u + 1];
  for (size_t u = 0; u < unique; ++u) offsets[u + 1] += offsets[u];
  positions.resize(inverse.size());
  // Positions in increasing order within each segment: place them in input order.
  cursor.assign(offsets.begin(), offsets.end() - 1);
  for (size_t p = 0; p < inverse.size(); ++p) positions[cursor[inverse[p]]++] = static_cast<uint32_t>(p);
}

}  // namespace kestrel
