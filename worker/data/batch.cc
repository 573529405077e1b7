#include "worker/data/batch.h"

#include <cmath>

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

void Batch::CloseOtherBag(Pooling pooling) {
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

void Batch::Append(const Batch& other) {
  const uint32_t base = static_cast<uint32_t>(keys.size());
  if (!single_valued() || !other.single_valued()) {
    if (single_valued()) {  // as CloseBag leaves the compact layout: bag b holds entry b
      bag_offsets.resize(static_cast<size_t>(closed_bags) + 1);
      for (int64_t b = 0; b <= closed_bags; ++b) bag_offsets[b] = static_cast<uint32_t>(b);
    }
    for (int64_t b = 1; b <= other.closed_bags; ++b) {
      bag_offsets.push_back(base + (other.single_valued() ? static_cast<uint32_t>(b) : other.bag_offsets[b]));
    }
  }
  keys.insert(keys.end(), other.keys.begin(), other.keys.end());
  values.insert(values.end(), other.values.begin(), other.values.end());
  dense.insert(dense.end(), other.dense.begin(), other.dense.end());
  labels.insert(labels.end(), other.labels.begin(), other.labels.end());
  if (!weights.empty() || !other.weights.empty()) {
    weights.resize(static_cast<size_t>(size), 1.0f);
    if (other.weights.empty()) {
      weights.resize(static_cast<size_t>(size + other.size), 1.0f);
    } else {
      weights.insert(weights.end(), other.weights.begin(), other.weights.end());
    }
  }
  size += other.size;
  closed_bags += other.closed_bags;
}

}  // namespace kestrel
