#include "worker/data/datagen.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/counter_random.h"
#include "worker/data/datagen_draws.h"

namespace kestrel {
namespace {

// Stream ids of the different draws (so they are independent). Append only: the values key every draw.
enum Stream : uint64_t {
  kRank = 1,
  kMissing,
  kInteger,
  kLabel,
  kValueWeight,
  kIntegerWeight,
  kLatent,
  kToken,
  kNewId,     // whether a value is a brand-new id
  kNewToken,  // the token of a brand-new id
};

constexpr uint64_t kTokenMask = 0xffffffffULL;  // tokens are 32-bit

}  // namespace

PlantedModel::PlantedModel(const DatagenOptions& options) : options_(options) {
  for (int f = 0; f < kCriteoCategoricalFields; ++f) {
    // Vocabulary sizes log-uniform in [min_vocab, max_vocab], fixed by the seed.
    const double u = CounterUniform01(DrawStream(options.seed, kToken, f, 999), 0);
    const int vocab = static_cast<int>(std::exp(std::log(options.min_vocab) +
                                                u * (std::log(options.max_vocab) - std::log(options.min_vocab))));
    zipf_cdf_.push_back(ZipfCdf(vocab, options.zipf_exponent));
    // Every id any row can draw: ranks 0 .. V - 1 shifted by at most the test split's shift (the largest).
    const int64_t ids = vocab + Shift(1, 0);
    auto& id_of = id_of_.emplace_back();
    id_of.reserve(ids);
    for (int64_t a = 0; a < ids; ++a) {
      id_of.emplace(static_cast<uint32_t>(TokenOf(f, a)), static_cast<uint32_t>(a));  // a collision keeps the first id
    }
  }
  for (int k = 0; k < options.interaction_pairs; ++k) {
    const int a = (k * 7) % kCriteoCategoricalFields;
    const int b = (a + 1 + (k * 5) % (kCriteoCategoricalFields - 1)) % kCriteoCategoricalFields;
    pairs_.emplace_back(a, b);
  }
}

uint64_t PlantedModel::TokenOf(int field, int64_t id) const {
  // Distinct ids of a field get distinct tokens with overwhelming probability (32-bit hash).
  return Mix64(DrawStream(options_.seed, kToken, field, static_cast<uint64_t>(id))) & kTokenMask;
}

int64_t PlantedModel::IdOf(int field, uint64_t token) const {
  if (token > kTokenMask) return -1;
  auto it = id_of_[field].find(static_cast<uint32_t>(token));
  return it == id_of_[field].end() ? -1 : static_cast<int64_t>(it->second);  // not -1 as unsigned
}

uint64_t PlantedModel::NewIdToken(int split, int64_t row, int field) const {
  const uint64_t h =
      HashCombine(DrawStream(options_.seed, kNewToken, static_cast<uint64_t>(split), static_cast<uint64_t>(row)),
                  static_cast<uint64_t>(field));
  uint64_t token = Mix64(h) & kTokenMask;
  // Rehash the rare token (about ids / 2^32 of them) that is a planted id's, so a new id never has a weight.
  for (uint64_t attempt = 1; IdOf(field, token) >= 0; ++attempt) token = Mix64(HashCombine(h, attempt)) & kTokenMask;
  return token;
}

int64_t PlantedModel::Shift(int split, int64_t row) const {
  const int64_t i = split == 0 ? row : options_.train_rows;
  return static_cast<int64_t>(std::floor(static_cast<double>(i) * options_.vocab_drift));
}

DatagenOptions SmallDatagenOptions() {
  DatagenOptions d;
  d.train_rows = 80000;
  d.test_rows = 10000;
  d.max_vocab = 100;
  d.interaction_stddev = 0.1;
  return d;
}

DatagenOptions LargeVocabDatagenOptions() {
  DatagenOptions d;
  d.train_rows = 1000000;
  d.test_rows = 100000;
  d.max_vocab = 200000;
  d.zipf_exponent = 1.05;
  d.new_id_rate = 0.05;
  d.vocab_drift = 0.05;
  d.interaction_stddev = 0.3;
  return d;
}

double PlantedModel::Probability(const CriteoExample& e) const {
  std::array<int64_t, kCriteoCategoricalFields> ids;
  for (int f = 0; f < kCriteoCategoricalFields; ++f) {
    ids[f] = e.categories[f] == kMissingValue ? -1 : IdOf(f, e.categories[f]);
  }
  return ProbabilityOfIds(ids, e);
}

double PlantedModel::ProbabilityOfIds(const std::array<int64_t, kCriteoCategoricalFields>& ids,
                                      const CriteoExample& e) const {
  const uint64_t seed = options_.seed;
  double logit = options_.bias;
  for (int f = 0; f < kCriteoCategoricalFields; ++f) {
    if (ids[f] < 0) continue;
    logit += options_.value_weight_stddev * CounterNormal(DrawStream(seed, kValueWeight, f), ids[f]);
  }
  for (int j = 0; j < kCriteoIntegerFields; ++j) {
    if (e.integer_missing[j]) continue;
    logit += options_.integer_weight_stddev *
             CounterNormal(DrawStream(seed, kIntegerWeight, j), IntegerBucket(e.integers[j]));
  }
  // Latent entries of std c, so that <v_a, v_b> over latent_dim entries has std c^2 sqrt(L) = interaction_stddev.
  const double c = std::sqrt(options_.interaction_stddev) / std::pow(options_.latent_dim, 0.25);
  for (const auto& [a, b] : pairs_) {
    if (ids[a] < 0 || ids[b] < 0) continue;
    for (int l = 0; l < options_.latent_dim; ++l) {
      logit += c * CounterNormal(DrawStream(seed, kLatent, a, l), ids[a]) * c *
               CounterNormal(DrawStream(seed, kLatent, b, l), ids[b]);
    }
  }
  return Sigmoid(logit);
}

double PlantedModel::Draw(int split, int64_t row, CriteoExample* e) const {
  const uint64_t base = DrawStream(options_.seed, kRank, static_cast<uint64_t>(split), static_cast<uint64_t>(row));
  const int64_t shift = Shift(split, row);
  std::array<int64_t, kCriteoCategoricalFields> ids;
  for (int f = 0; f < kCriteoCategoricalFields; ++f) {
    ids[f] = -1;
    if (CounterUniform01(HashCombine(base, kMissing), f) < options_.missing_rate) {
      e->categories[f] = kMissingValue;
      continue;
    }
    if (options_.new_id_rate > 0 && CounterUniform01(HashCombine(base, kNewId), f) < options_.new_id_rate) {
      e->categories[f] = NewIdToken(split, row, f);  // unknown to the model: no weight
      continue;
    }
    ids[f] = ZipfRank(zipf_cdf_[f], CounterUniform01(base, f)) + shift;
    e->categories[f] = TokenOf(f, ids[f]);
  }
  for (int j = 0; j < kCriteoIntegerFields; ++j) {
    e->integer_missing[j] = CounterUniform01(HashCombine(base, kMissing), 100 + j) < options_.missing_rate;
    const double log_count = 1.0 + 0.25 * j + 1.5 * CounterNormal(HashCombine(base, kInteger), j);
    e->integers[j] = e->integer_missing[j] ? 0 : static_cast<int64_t>(std::floor(std::exp(log_count))) - 1;
  }
  const double p = ProbabilityOfIds(ids, *e);
  e->label = CounterUniform01(DrawStream(options_.seed, kLabel, static_cast<uint64_t>(split)), row) < p ? 1 : 0;
  return p;
}

std::string PlantedModel::FormatLine(const CriteoExample& e) {
  std::string line = e.label > 0.5f ? "1" : "0";
  for (int j = 0; j < kCriteoIntegerFields; ++j) {
    line += '\t';
    if (!e.integer_missing[j]) absl::StrAppend(&line, e.integers[j]);
  }
  for (int f = 0; f < kCriteoCategoricalFields; ++f) {
    line += '\t';
    if (e.categories[f] != kMissingValue) absl::StrAppend(&line, absl::StrFormat("%08x", e.categories[f]));
  }
  return line;
}

absl::StatusOr<DatagenTruth> GenerateCriteoData(const DatagenOptions& options, const std::string& out_dir) {
  if (options.train_rows < 0 || options.test_rows < 1 || options.min_vocab < 1 ||
      options.max_vocab < options.min_vocab || options.latent_dim < 1) {
    return absl::InvalidArgumentError(
        "datagen needs train_rows >= 0, test_rows >= 1, 1 <= min_vocab <= max_vocab, latent_dim >= 1");
  }
  if (!(std::isfinite(options.zipf_exponent) && options.zipf_exponent >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("datagen needs zipf_exponent >= 0, got ", options.zipf_exponent));
  }
  if (!(options.new_id_rate >= 0 && options.new_id_rate < 1)) {  // also refuses NaN
    return absl::InvalidArgumentError(absl::StrCat("datagen needs new_id_rate in [0, 1), got ", options.new_id_rate));
  }
  if (!(std::isfinite(options.vocab_drift) && options.vocab_drift >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("datagen needs vocab_drift >= 0, got ", options.vocab_drift));
  }
  // In double: train_rows * vocab_drift may not fit an int64.
  const double ids = options.max_vocab + std::floor(static_cast<double>(options.train_rows) * options.vocab_drift);
  if (ids > static_cast<double>(kMaxDatagenIdsPerField)) {
    return absl::InvalidArgumentError(absl::StrCat("datagen needs max_vocab + train_rows * vocab_drift <= ",
                                                   kMaxDatagenIdsPerField, " ids per field, got ", ids));
  }
  const PlantedModel model(options);
  std::vector<float> probabilities, labels;
  for (int split = 0; split < 2; ++split) {
    const std::string path = absl::StrCat(out_dir, split == 0 ? "/train.tsv" : "/test.tsv");
    std::ofstream out(path);
    if (!out.good()) return absl::NotFoundError(absl::StrCat("cannot write ", path));
    const int64_t rows = split == 0 ? options.train_rows : options.test_rows;
    CriteoExample e;
    for (int64_t row = 0; row < rows; ++row) {
      const double p = model.Draw(split, row, &e);
      out << PlantedModel::FormatLine(e) << '\n';
      if (split == 1) {
        probabilities.push_back(static_cast<float>(p));
        labels.push_back(e.label);
      }
    }
    if (!out.good()) return absl::DataLossError(absl::StrCat("writing ", path, " failed"));
  }
  const DatagenTruth truth = BayesTruth(probabilities, labels);
  const std::string path = out_dir + "/truth.txt";
  std::ofstream out(path);
  out << absl::StrFormat(
      "# Bayes-optimal scores of test.tsv (scoring with the planted click probability)\n"
      "seed: %d\ntrain_rows: %d\ntest_rows: %d\npositive_rate: %.6f\nbayes_logloss: %.6f\nbayes_auc: %.6f\n",
      options.seed, options.train_rows, truth.test_rows, truth.positive_rate, truth.bayes_logloss,
      truth.bayes_auc);
  // Only when set, so that the fixed-vocabulary truth file stays as it always was.
  if (options.new_id_rate > 0 || options.vocab_drift > 0) {
    out << absl::StrFormat("new_id_rate: %g\nvocab_drift: %g\n", options.new_id_rate, options.vocab_drift);
  }
  if (!out.good()) return absl::DataLossError(absl::StrCat("writing ", path, " failed"));
  return truth;
}

}  // namespace kestrel
