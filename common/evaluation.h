// Evaluation metrics of binary classifiers: logloss and exact ROC AUC. Pure functions; thread-safe.
#ifndef KESTREL_COMMON_EVALUATION_H_
#define KESTREL_COMMON_EVALUATION_H_

#include <cstdint>

#include "absl/types/span.h"

namespace kestrel {

// Mean of -[y log p + (1 - y) log(1 - p)], with p clamped to [1e-7, 1 - 1e-7]. labels are 0 or 1.
double LogLoss(absl::Span<const float> probabilities, absl::Span<const float> labels);

// Exact ROC AUC: the probability that a random positive scores above a random negative, ties counting half
// (the Mann-Whitney statistic, by sorting: O(n log n)). 0.5 when one class is absent.
double ExactAuc(absl::Span<const float> scores, absl::Span<const float> labels);

// Hash of every prediction's float bits, in order: equal fingerprints mean bitwise-identical predictions.
uint64_t PredictionFingerprint(absl::Span<const float> predictions);

}  // namespace kestrel

#endif  // KESTREL_COMMON_EVALUATION_H_
