// A planted ground truth for Criteo-format data: what kestrel_datagen writes, the main job's default data set.
//
// Each of the 26 categorical fields draws its value's popularity rank r from a Zipf(s) law over a vocabulary
// whose size V varies by field (log-uniform in [min_vocab, max_vocab]). The rank maps to the field's absolute
// id a = r + shift, and the id to a stable 32-bit token. Integer features are log-normal counts. A missing
// value occurs with missing_rate. The click probability is
//   sigmoid(bias + sum_f w_f(value_f) + sum_j u_j(bucket_j) + sum_{(a,b) in pairs} <v_a(value_a), v_b(value_b)>)
// with per-value weights w, per-bucket integer weights u and latent vectors v (the planted pairwise
// interactions), all Normal draws keyed by (seed, field, id): a logistic model with FM-style interactions.
// The label is a Bernoulli draw of that probability. Every draw is keyed by (seed, split, row), so any row
// can be regenerated alone and the output is byte-for-byte reproducible.
//
// Two options turn the fixed vocabulary into a production-like large, growing one (both off by default, which
// gives exactly the fixed-vocabulary data):
// - vocab_drift: popularity moves through the ids as the stream goes on. Training row i uses
//   shift = floor(i * vocab_drift), so ids [shift, shift + V) are live: new popular ids keep arriving and old
//   ones fade. Test rows use the shift after the last training row, floor(train_rows * vocab_drift). Tokens
//   and weights belong to the id, not the rank, so an id keeps its meaning while its popularity changes.
// - new_id_rate: a non-missing value is, with this probability, a brand-new id seen in that row only (the
//   flood of ids seen once): its token is a 32-bit hash of (seed, split, row, field), never a planted id's
//   token, and it carries no weight (like any token the planted model does not know).
//
// The test split's Bayes-optimal logloss and AUC (scoring with the true probability) bound what any model can
// reach. Thread-safe (immutable after construction). Memory: a token -> id map of
// V + floor(train_rows * vocab_drift) entries per field (10 to 20 bytes each).
#ifndef KESTREL_WORKER_DATA_DATAGEN_H_
#define KESTREL_WORKER_DATA_DATAGEN_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/datagen_draws.h"

namespace kestrel {

// The most ids a field may have (bounds the token -> id map: 26 fields of 4M ids take about 1-2 GB).
inline constexpr int64_t kMaxDatagenIdsPerField = int64_t{1} << 22;

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
  // Probability in [0, 1) that a non-missing categorical value is a brand-new id seen in that row only.
  double new_id_rate = 0;             // Default: 0 (every value comes from the planted vocabulary).
  // Ids (>= 0) by which each field's popularity ranks shift per training row (see the comment at the top);
  // max_vocab + floor(train_rows * vocab_drift) may be at most kMaxDatagenIdsPerField.
  double vocab_drift = 0;             // Default: 0 (a fixed vocabulary).
};

// A small, nearly linear set (80k train, 10k test rows, vocabularies up to 100, weak interactions) on which
// every model comes within about 0.015 of the Bayes-optimal AUC in a few epochs: the training tests' data.
DatagenOptions SmallDatagenOptions();

// A large, growing vocabulary, for bounded embedding tables (frequency admission, TTL eviction): 1M train and
// 100k test rows, vocabularies up to 200k with a flatter Zipf law (1.05), 5% brand-new ids seen once, and a
// drift of 0.05 ids per row (50k new ids per field over the training split); interactions 0.3.
DatagenOptions LargeVocabDatagenOptions();

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
  // The absolute id of a token in field f, or -1 for tokens the planted model does not know.
  int64_t IdOf(int field, uint64_t token) const;
  uint64_t TokenOf(int field, int64_t id) const;
  // The token of the brand-new id of (split, row, field): a hash, moved off any planted id's token.
  uint64_t NewIdToken(int split, int64_t row, int field) const;
  // The id shift of a row (see vocab_drift).
  int64_t Shift(int split, int64_t row) const;
  // The click probability given each field's id (-1: missing or unknown) and the integer features of `e`.
  double ProbabilityOfIds(const std::array<int64_t, kCriteoCategoricalFields>& ids, const CriteoExample& e) const;

  DatagenOptions options_;
  std::vector<std::vector<double>> zipf_cdf_;   // per field, cumulative probabilities of ranks 1..V
  std::vector<std::pair<int, int>> pairs_;      // planted interactions
  // Per field: token -> id, over ids 0 .. V - 1 + floor(train_rows * vocab_drift). 32 bits each: tokens are
  // 32-bit and GenerateCriteoData keeps ids far below 2^31.
  std::vector<absl::flat_hash_map<uint32_t, uint32_t>> id_of_;
};

// Writes <out_dir>/train.tsv, test.tsv and truth.txt ("bayes_logloss: ...", "bayes_auc: ...", ...).
// InvalidArgument, naming the option, for options out of range.
[[nodiscard]] absl::StatusOr<DatagenTruth> GenerateCriteoData(const DatagenOptions& options, const std::string& out_dir);

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_DATAGEN_H_
