#include "common/evaluation.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/hash.h"

namespace kestrel {

double LogLoss(absl::Span<const float> probabilities, absl::Span<const float> labels) {
  if (probabilities.empty()) return 0;
  double sum = 0;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    const double p = std::clamp(static_cast<double>(probabilities[i]), 1e-7, 1 - 1e-7);
    sum -= labels[i] > 0.5f ? std::log(p) : std::log(1 - p);
  }
  return sum / probabilities.size();
}

double ExactAuc(absl::Span<const float> scores, absl::Span<const float> labels) {
  const size_t n = scores.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Sum of the (average, for ties) ranks of the positives.
  double positive_rank_sum = 0;
  double positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double average_rank = (i + 1 + j) / 2.0;  // ranks i+1 .. j
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        positive_rank_sum += average_rank;
        positives += 1;
      }
    }
    i = j;
  }
  const double negatives = n - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (positive_rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

uint64_t PredictionFingerprint(absl::Span<const float> predictions) {
  uint64_t h = 0;
  for (float p : predictions) {
    uint32_t bits;
    std::memcpy(&bits, &p, sizeof(bits));
    h = HashCombine(h, bits);
  }
  return h;
}

}  // namespace kestrel
