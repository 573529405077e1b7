// Synthetic Criteo-shaped PreparedBatches for tests and kernel benchmarks: 39 fields with skewed ids (a few hot
// keys repeat across many examples, as in real categorical data), 13 dense inputs, ~25% positives; single-valued
// (SyntheticCriteoBatch) or with multi-valued, pooled fields and example weights (SyntheticMultiValuedBatch).
#ifndef KESTREL_WORKER_SYNTHETIC_BATCH_H_
#define KESTREL_WORKER_SYNTHETIC_BATCH_H_

#include <cmath>
#include <random>

#include "worker/data/preset_examples.h"
#include "worker/prepared_batch.h"

namespace kestrel {

// Ids of field f are floor(id_range^u) for u uniform in [0, 1): log-uniform in [1, id_range).
inline PreparedBatch SyntheticCriteoBatch(int examples, double id_range, uint32_t seed = 5) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  PreparedBatch p;
  p.batch.Reset(kCriteoFields, kCriteoIntegerFields);
  for (int n = 0; n < examples; ++n) {
    for (int f = 0; f < kCriteoFields; ++f) {
      p.batch.keys.push_back(Partition::FieldFeatureKey(f, static_cast<uint64_t>(std::pow(id_range, u(rng)))));
      p.batch.values.push_back(1.0f);
    }
    for (int d = 0; d < kCriteoIntegerFields; ++d) p.batch.dense.push_back(static_cast<float>(3 * u(rng)));
    p.batch.labels.push_back(u(rng) < 0.25 ? 1.0f : 0.0f);
    ++p.batch.size;
  }
  p.Prepare(*Partition::Uniform(2));
  return p;
}

// The same shape with jagged bags: the 13 integer fields hold one entry each; categorical field f holds 0 to
// max_length entries (ids as above), pooled SUM, MEAN or SQRT_N by f % 3, every third entry real-valued in
// [0, 2). Example weights are uniform in [0, 2).
inline PreparedBatch SyntheticMultiValuedBatch(int examples, double id_range, int max_length = 5,
                                               uint32_t seed = 5) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int> length(0, max_length);
  constexpr Pooling kPoolings[] = {POOLING_SUM, POOLING_MEAN, POOLING_SQRT_N};
  PreparedBatch p;
  p.batch.Reset(kCriteoFields, kCriteoIntegerFields);
  for (int n = 0; n < examples; ++n) {
    for (int f = 0; f < kCriteoFields; ++f) {
      const int entries = f < kCriteoIntegerFields ? 1 : length(rng);
      for (int e = 0; e < entries; ++e) {
        const float value = e % 3 == 2 ? static_cast<float>(2 * u(rng)) : 1.0f;
        p.batch.AddEntry(Partition::FieldFeatureKey(f, static_cast<uint64_t>(std::pow(id_range, u(rng)))), value);
      }
      p.batch.CloseBag(kPoolings[f % 3]);
    }
    for (int d = 0; d < kCriteoIntegerFields; ++d) p.batch.dense.push_back(static_cast<float>(3 * u(rng)));
    const float label = u(rng) < 0.25 ? 1.0f : 0.0f;
    p.batch.CloseExample(label, static_cast<float>(2 * u(rng)));
  }
  p.Prepare(*Partition::Uniform(2));
  return p;
}

}  // namespace kestrel

#endif  // KESTREL_WORKER_SYNTHETIC_BATCH_H_
