// A planted ground truth for Criteo-format data: what kestrel_datagen writes, the main job's default data set.
//
// Each of the 26 categorical fields draws its value's popularity rank from a Zipf(s) law over a vocabulary
// whose size varies by field (log-uniform in [min_vocab, max_vocab]); ranks map to stable 32-bit tokens.
// Integer features are log-normal counts. A missing value occurs with missing_rate. The click probability is
//   sigmoid(bias + sum_f w_f(value_f) + sum_j u_j(bucket_j) + sum_{(a,b) in pairs} <v_a(value_a), v_b(value_b)>)
// with per-value weights w, per-bucket integer weights u and latent vectors v (the planted pairwise
// interactions), all Normal draws keyed by (seed, field, value): a logistic model with FM-style interactions.
// The label is a Bernoulli draw of that probability. Every draw is keyed by (seed, split, row), so any row
// can be regenerated alone and the output is byte-for-byte reproducible.
//
// The test split's Bayes-optimal logloss and AUC (scoring with the true probability) bound what any model can
// reach. Thread-safe (immutable after construction).
#ifndef KESTREL_WORKER_DATA_DATAGEN_H_
#define KESTREL_WORKER_DATA_DATAGEN_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "worker/data/criteo_reader.h"

namespace kestrel {

struct DatagenOptions {
  uint64_t seed = 1;                  // Default: 1.
  int64_t train_rows = 200000;        // Default: 200000.
  int64_t test_rows = 50000;          // Default: 50000.
  double zipf_exponent = 1.1;         // Default: 1.1.
  int min_vocab = 8;                  // Default: 8.
  int max_vocab = 50000;              // Default: 50000.
  double missing_rate = 0.05;         // Default: 0.05.
  double bias = -1.3;                 // Default: -1.3 (about a quarter of the labels positive).
  double value_weight_stddev = 0.3;   // Default: 0.3.
  double integer_weight_stddev = 0.3; // Default: 0.3.
  int interaction_pairs = 8;          // Default: 8 planted field pairs.
  int latent_dim = 4;                 // Default: 4.
  double interaction_stddev = 0.5;    // Default: 0.5.
};

// A small, nearly linear set (80k train, 10k test rows, vocabularies up to 100, weak interactions) on which
// every model comes within about 0.015 of the Bayes-optimal AUC in a few epochs: the training tests' data.
DatagenOptions SmallDatagenOptions();

struct DatagenTruth {
  int64_t test_rows = 0;
  double positive_rate = 0;  // of the test split
  double bayes_logloss = 0;  // scoring the test split with the true probability
  double bayes_auc = 0;
};

class PlantedModel {
 public:
  explicit PlantedModel(const DatagenOptions& options);

  // Draws example `row` of `split` (0 = train, 1 = test) into `out` and returns its true click probability.
  double Draw(int split, int64_t row, CriteoExample* out) const;
  // The true click probability of any example.
  double Probability(const CriteoExample& example) const;
  // The example as one Criteo TSV line (no newline).
  static std::string FormatLine(const CriteoExample& example);

 private:
  // The popularity rank of a token in field f, or -1 for unknown tokens.
  int64_t RankOf(int field, uint64_t token) const;
  uint64_t TokenOf(int field, int64_t rank) const;
  double ProbabilityOfRanks(const std::array<int64_t, kCriteoCategoricalFields>& ranks,
                            const CriteoExample& e) const;

  DatagenOptions options_;
  std::vector<std::vector<double>> zipf_cdf_;   // per field, cumulative probabilities of ranks 1..V
  std::vector<std::pair<int, int>> pairs_;      // planted interactions
  std::vector<absl::flat_hash_map<uint64_t, int64_t>> rank_of_;  // per field: token -> rank
};

// Writes <out_dir>/train.tsv, test.tsv and truth.txt ("bayes_logloss: ...", "bayes_auc: ...", ...).
absl::StatusOr<DatagenTruth> GenerateCriteoData(const DatagenOptions& options, const std::string& out_dir);

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_DATAGEN_H_
