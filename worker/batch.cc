#include "worker/batch.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace kestrel {

void Batch::Reset(int fields_in, int dense_dim_in) {
  size = 0;
  fields = fields_in;
  dense_dim = dense_dim_in;
  keys.clear();
  values.clear();
  bag_offsets.clear();
  dense.clear();
  labels.clear();
  weights.clear();
  closed_bags = 0;
}

void Batch::CloseBag(Pooling pooling) {
  const uint32_t end = static_cast<uint32_t>(keys.size());
  const uint32_t begin = bag_offsets.empty() ? static_cast<uint32_t>(closed_bags) : bag_offsets.back();
  if (bag_offsets.empty() && end != begin + 1) {  // the first bag that is not one entry: leave the compact layout
    bag_offsets.resize(static_cast<size_t>(closed_bags) + 1);
    for (int64_t b = 0; b <= closed_bags; ++b) bag_offsets[b] = static_cast<uint32_t>(b);
  }
  if (!bag_offsets.empty()) bag_offsets.push_back(end);
  ++closed_bags;
  const uint32_t n = end - begin;
  if (n <= 1 || pooling == POOLING_SUM) return;  // a bag of one: the mean and sqrt-n scales are 1
  const float scale = pooling == POOLING_MEAN ? 1.0f / static_cast<float>(n)
                                              : 1.0f / std::sqrt(static_cast<float>(n));
  for (uint32_t e = begin; e < end; ++e) values[e] *= scale;
}

void Batch::CloseExample(float label, float weight) {
  if (weight != 1.0f || !weights.empty()) {
    weights.resize(static_cast<size_t>(size), 1.0f);  // the examples before the first weight other than 1
    weights.push_back(weight);
  }
  labels.push_back(label);
  ++size;
}

void AppendCriteo(const CriteoExample& example, Batch* batch) {
  for (int j = 0; j < kCriteoIntegerFields; ++j) {
    batch->AddEntry(IntegerKey(j, example.integer_missing[j], example.integers[j]), 1.0f);
    batch->CloseBag();
  }
  for (int f = 0; f < kCriteoCategoricalFields; ++f) {
    batch->AddEntry(CategoricalKey(f, example.categories[f]), 1.0f);
    batch->CloseBag();
  }
  if (batch->dense_dim == kCriteoIntegerFields) {
    for (int j = 0; j < kCriteoIntegerFields; ++j) {
      batch->dense.push_back(DenseInput(example.integer_missing[j], example.integers[j]));
    }
  }
  batch->CloseExample(example.label);
}

absl::Status AppendLibsvm(const LibsvmExample& example, Batch* batch) {
  const size_t n = example.indices.size();
  if (n > static_cast<size_t>(batch->fields)) {
    return absl::InvalidArgumentError(absl::StrCat("an example has ", n, " features, more than the ", batch->fields,
                                                   " slots configured (data.libsvm_slots)"));
  }
  // Field i is the line's i-th feature; the fields after its last are empty bags.
  for (size_t i = 0; i < static_cast<size_t>(batch->fields); ++i) {
    if (i < n) batch->AddEntry(LibsvmKey(example.indices[i]), example.values[i]);
    batch->CloseBag();
  }
  batch->dense.insert(batch->dense.end(), batch->dense_dim, 0.0f);
  batch->CloseExample(example.label);
  return absl::OkStatus();
}

void PreparedBatch::Prepare(const Partition& partition, absl::Span<const int> field_tables, int num_tables) {
  keys.Build(batch.keys, partition);
  entry_bags.clear();
  if (!batch.single_valued()) {
    entry_bags.resize(batch.num_entries());
    for (int64_t b = 0; b < batch.num_bags(); ++b) {
      for (uint32_t e = batch.bag_offsets[b]; e < batch.bag_offsets[b + 1]; ++e) entry_bags[e] = static_cast<uint32_t>(b);
    }
  }
  const size_t unique = keys.num_unique();
  const absl::Span<const uint32_t> inverse = keys.inverse();
  offsets.assign(unique + 1, 0);
  for (uint32_t u : inverse) ++offsets[u + 1];
  for (size_t u = 0; u < unique; ++u) offsets[u + 1] += offsets[u];
  positions.resize(inverse.size());
  // Positions in increasing order within each segment: place them in input order.
  cursor.assign(offsets.begin(), offsets.end() - 1);
  for (size_t p = 0; p < inverse.size(); ++p) positions[cursor[inverse[p]]++] = static_cast<uint32_t>(p);
  tables.resize(num_tables > 1 ? num_tables : 0);
  if (tables.empty()) return;
  // Each unique key's table is its first entry's field's (a key's namespace is its vocabulary's, and a
  // vocabulary's features share one table: Schema checks it). unique_keys() is grouped by server and
  // increasing within each group, so each table's subsequence is too: its KeyBatch keeps that order.
  const absl::Span<const uint64_t> unique_keys = keys.unique_keys();
  for (TableKeys& t : tables) t.rows.clear();
  for (size_t u = 0; u < unique; ++u) {
    const uint32_t entry = positions[offsets[u]];
    const int64_t bag = entry_bags.empty() ? entry : entry_bags[entry];
    tables[field_tables[bag % batch.fields]].rows.push_back(static_cast<uint32_t>(u));
  }
  for (TableKeys& t : tables) {
    scratch.resize(t.rows.size());
    for (size_t i = 0; i < t.rows.size(); ++i) scratch[i] = unique_keys[t.rows[i]];
    t.keys.Build(scratch, partition);
  }
}

}  // namespace kestrel
