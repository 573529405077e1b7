#include "worker/data/datagen_draws.h"

#include <algorithm>
#include <cmath>

#include "common/hash.h"
#include "common/evaluation.h"

namespace kestrel {

uint64_t DrawStream(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b) {
  return HashCombine(HashCombine(HashCombine(Mix64(seed), stream), a), b);
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

std::vector<double> ZipfCdf(int64_t n, double exponent) {
  std::vector<double> cdf(std::max<int64_t>(n, 1));
  double sum = 0;
  for (int64_t r = 0; r < n; ++r) cdf[r] = (sum += std::pow(r + 1.0, -exponent));
  for (double& c : cdf) c /= sum;
  return cdf;
}

int64_t ZipfRank(const std::vector<double>& cdf, double u) {
  return std::min<int64_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin(),
                           static_cast<int64_t>(cdf.size()) - 1);
}

DatagenTruth BayesTruth(absl::Span<const float> probabilities, absl::Span<const float> labels) {
  DatagenTruth truth;
  truth.test_rows = static_cast<int64_t>(labels.size());
  double positives = 0;
  for (float y : labels) positives += y;
  truth.positive_rate = positives / labels.size();
  truth.bayes_logloss = LogLoss(probabilities, labels);
  truth.bayes_auc = ExactAuc(probabilities, labels);
  return truth;
}

}  // namespace kestrel
