// The pieces kestrel_datagen's planted models are drawn from: independent keyed streams of counter-based
// draws, Zipf popularity ranks, and the Bayes-optimal scores of a test split. Pure functions; thread-safe.
#ifndef KESTREL_WORKER_DATA_DATAGEN_DRAWS_H_
#define KESTREL_WORKER_DATA_DATAGEN_DRAWS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace kestrel {

// The base of draw stream `stream` of (a, b) under `seed`: pass it to CounterUniform01 / CounterNormal
// (common/counter_random.h). Distinct (seed, stream, a, b) give independent streams.
uint64_t DrawStream(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b = 0);

double Sigmoid(double x);

// Cumulative probabilities of ranks 1..n (n >= 1) under a Zipf law with `exponent` >= 0.
std::vector<double> ZipfCdf(int64_t n, double exponent);

// The 0-based rank that the uniform draw u in [0, 1) picks from `cdf` (ZipfCdf).
int64_t ZipfRank(const std::vector<double>& cdf, double u);

struct DatagenTruth {
  int64_t test_rows = 0;
  double positive_rate = 0;  // of the test split
  double bayes_logloss = 0;  // scoring the test split with the true probability
  double bayes_auc = 0;
};

// The scores of the planted click probabilities of a test split against its labels (0 or 1).
DatagenTruth BayesTruth(absl::Span<const float> probabilities, absl::Span<const float> labels);

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_DATAGEN_DRAWS_H_
