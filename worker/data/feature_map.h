// Feature mapping: the one place that turns a Criteo-style example into parameter-server keys.
//
//   categorical field f (0..25), value v (the 32-bit hex token)  -> Partition::FieldFeatureKey(f, v)
//   integer field j (0..12), value x (may be negative)           -> Partition::FieldFeatureKey(kIntegerFieldBase
//                                                                     + j, IntegerBucket(x))
//   a missing value (empty column)                               -> FieldFeatureKey(field, kMissingValue)
//   libsvm feature index i                                       -> Partition::FeatureKey(i) (LibsvmKey)
// Integers are log-bucketized (IntegerBucket) so that counts spanning many orders of magnitude share weights
// by scale; models may also feed log1p(max(x, 0)) as a dense input (DenseInput).
#ifndef KESTREL_WORKER_DATA_FEATURE_MAP_H_
#define KESTREL_WORKER_DATA_FEATURE_MAP_H_

#include <cmath>
#include <cstdint>

#include "common/partition.h"

namespace kestrel {

inline constexpr int kCriteoIntegerFields = 13;
inline constexpr int kCriteoCategoricalFields = 26;
// Field ids of integer features start here, so they never share keys with categorical fields.
inline constexpr uint32_t kIntegerFieldBase = 1000;
// The value a missing column maps to (no real 32-bit token is 2^32).
inline constexpr uint64_t kMissingValue = uint64_t{1} << 32;

// Bucket of an integer feature: 0 for x <= 0, else 1 + floor(log2(x)) (1, 2-3, 4-7, ...).
inline uint64_t IntegerBucket(int64_t x) {
  if (x <= 0) return 0;
  uint64_t bucket = 1;
  while (x > 1) {
    x >>= 1;
    ++bucket;
  }
  return bucket;
}

inline uint64_t CategoricalKey(int field, uint64_t value) {
  return Partition::FieldFeatureKey(static_cast<uint32_t>(field), value);
}

inline uint64_t IntegerKey(int field, bool missing, int64_t value) {
  return Partition::FieldFeatureKey(kIntegerFieldBase + static_cast<uint32_t>(field),
                                    missing ? kMissingValue : IntegerBucket(value));
}

// The key of libsvm feature `index`.
inline uint64_t LibsvmKey(uint64_t index) { return Partition::FeatureKey(index); }

// The dense input of an integer feature: log1p of its non-negative part, 0 when missing.
inline float DenseInput(bool missing, int64_t value) {
  return missing || value <= 0 ? 0.0f : static_cast<float>(std::log1p(static_cast<double>(value)));
}

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_FEATURE_MAP_H_
