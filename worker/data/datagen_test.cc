#include "worker/data/datagen.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/data/datagen_testing.h"
#include "common/evaluation.h"

namespace kestrel {
namespace {

DatagenOptions Small() {
  DatagenOptions o;
  o.train_rows = 3000;
  o.test_rows = 4000;
  o.max_vocab = 2000;
  return o;
}

TEST(DatagenTest, ReproducibleByteForByte) {
  const std::string a = Dir("gen_a"), b = Dir("gen_b");
  ASSERT_TRUE(GenerateCriteoData(Small(), a).ok());
  ASSERT_TRUE(GenerateCriteoData(Small(), b).ok());
  for (const char* f : {"/train.tsv", "/test.tsv", "/truth.txt"}) EXPECT_EQ(Slurp(a + f), Slurp(b + f)) << f;
  DatagenOptions other = Small();
  other.seed = 2;
  const std::string c = Dir("gen_c");
  ASSERT_TRUE(GenerateCriteoData(other, c).ok());
  EXPECT_NE(Slurp(a + "/train.tsv"), Slurp(c + "/train.tsv"));
}

TEST(DatagenTest, FilesParseAndTruthIsTheBayesScore) {
  const std::string dir = Dir("gen_truth");
  auto truth = GenerateCriteoData(Small(), dir);
  ASSERT_TRUE(truth.ok()) << truth.status();
  // The data is learnable but noisy: informative, far from perfect.
  EXPECT_GT(truth->bayes_auc, 0.70);
  EXPECT_LT(truth->bayes_auc, 0.98);
  EXPECT_GT(truth->positive_rate, 0.1);
  EXPECT_LT(truth->positive_rate, 0.5);
  const double p = truth->positive_rate;
  EXPECT_LT(truth->bayes_logloss, -(p * std::log(p) + (1 - p) * std::log(1 - p))) << "beats the base rate";

  // Re-scoring the parsed test file with the planted model reproduces the truth file's figures.
  const PlantedModel model(Small());
  auto reader = *OpenCriteoReader({dir + "/test.tsv"}, {});
  std::vector<float> probabilities, labels;
  std::map<uint64_t, int> field0;
  CriteoExample e;
  while (*reader->Next(&e)) {
    probabilities.push_back(static_cast<float>(model.Probability(e)));
    labels.push_back(e.label);
    ++field0[e.categories[0]];
  }
  ASSERT_EQ(probabilities.size(), 4000u);
  EXPECT_NEAR(LogLoss(probabilities, labels), truth->bayes_logloss, 1e-6);
  EXPECT_NEAR(ExactAuc(probabilities, labels), truth->bayes_auc, 1e-9);
  // Zipf-like popularity: the most common value of field 0 is much more common than the median one.
  std::vector<int> counts;
  for (const auto& [token, n] : field0) counts.push_back(n);
  std::sort(counts.rbegin(), counts.rend());
  if (counts.size() > 4) {
    EXPECT_GT(counts[0], 3 * counts[counts.size() / 2]);
  }
  EXPECT_EQ(Slurp(dir + "/truth.txt").find("bayes_auc: ") != std::string::npos, true);
}

// FNV-1a 64 over the split's lines, each followed by '\n': the same as over the bytes of its file.
uint64_t SplitHash(const DatagenOptions& options, int split) {
  const PlantedModel model(options);
  const int64_t rows = split == 0 ? options.train_rows : options.test_rows;
  uint64_t h = 0xcbf29ce484222325ULL;
  CriteoExample e;
  for (int64_t row = 0; row < rows; ++row) {
    model.Draw(split, row, &e);
    for (unsigned char c : PlantedModel::FormatLine(e) + "\n") {
      h ^= c;
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

// Per field: the tokens of rows [begin, end) of `split`, with their counts.
using FieldTokens = std::array<std::unordered_map<uint64_t, int>, kCriteoCategoricalFields>;
FieldTokens CountTokens(const PlantedModel& model, int split, int64_t begin, int64_t end) {
  FieldTokens tokens;
  CriteoExample e;
  for (int64_t row = begin; row < end; ++row) {
    model.Draw(split, row, &e);
    for (int f = 0; f < kCriteoCategoricalFields; ++f) {
      if (e.categories[f] != kMissingValue) ++tokens[f][e.categories[f]];
    }
  }
  return tokens;
}

// With both new options off (their defaults), the data is exactly the fixed-vocabulary data: these hashes and
// lines were taken from the generator before the options existed, and the training tests' data depends on them.
TEST(DatagenTest, DefaultOptionsKeepTheFixedVocabularyData) {
  EXPECT_EQ(DatagenOptions().new_id_rate, 0);
  EXPECT_EQ(DatagenOptions().vocab_drift, 0);
  CriteoExample e;
  PlantedModel(Small()).Draw(0, 0, &e);
  EXPECT_EQ(PlantedModel::FormatLine(e),
            "1\t22\t4\t0\t4\t59\t22\t47\t1\t152\t6\t24\t175\t119\tdb272597\td16ff3ae\t5986b252\t03310c4f\td8607c6d\t"
            "7301dce6\te230317b\t1b51daa9\t5e9c810a\te2da3e73\t42953d44\te3ea7efa\t26d59303\t71b48a99\td0dc7640\t"
            "fa8b9d02\t45a2c810\t82339c91\t0ed5725f\teee150eb\t7ccd64f7\td97d7c06\t09fe1f25\ta2e4b945\tf4888145\t"
            "cf970fd7");
  PlantedModel(Small()).Draw(1, 0, &e);
  EXPECT_EQ(PlantedModel::FormatLine(e),
            "0\t95\t2\t3\t3\t0\t13\t\t8\t12\t16\t16\t33\t194\t43747f20\t0cea30d2\t6f2c48b1\te7ce33d3\tf108cf5f\t"
            "c8f9dc0c\tfcf7d01d\tca4dc2b6\tf86bc239\te2da3e73\t42953d44\t355f2ad8\t3a66c0c5\t5088b4d8\t2a437efb\t"
            "425cc511\t49729636\t82339c91\t0906ef82\teee150eb\t9219ebb3\td44d3415\t2f084469\t\t\t07b8c824");
  EXPECT_EQ(SplitHash(Small(), 0), 0x10a80281df8b4caaULL);
  EXPECT_EQ(SplitHash(Small(), 1), 0x5cbcfa82dd91e75eULL);
  EXPECT_EQ(SplitHash(SmallDatagenOptions(), 0), 0x930526f09a259740ULL);
  EXPECT_EQ(SplitHash(SmallDatagenOptions(), 1), 0x5cea86a6a9440107ULL);
  EXPECT_EQ(SplitHash(DatagenOptions(), 1), 0x236b9dee3ef803a7ULL);
  // truth.txt keeps its fixed-vocabulary form too.
  const std::string dir = Dir("gen_default");
  ASSERT_TRUE(GenerateCriteoData(Small(), dir).ok());
  EXPECT_EQ(Slurp(dir + "/truth.txt"),
            "# Bayes-optimal scores of test.tsv (scoring with the planted click probability)\n"
            "seed: 1\ntrain_rows: 3000\ntest_rows: 4000\npositive_rate: 0.288750\nbayes_logloss: 0.389043\n"
            "bayes_auc: 0.874493\n");
}

TEST(DatagenTest, NewIdsAreSeenOnceAndUnknownToTheModel) {
  DatagenOptions options = Small();
  options.new_id_rate = 0.2;
  options.train_rows = 5000;
  const PlantedModel model(options);
  const FieldTokens tokens = CountTokens(model, 0, 0, options.train_rows);
  int64_t values = 0, new_ids = 0;
  CriteoExample e;
  for (int64_t row = 0; row < options.train_rows; ++row) {
    const double p = model.Draw(0, row, &e);
    ASSERT_DOUBLE_EQ(model.Probability(e), p) << "row " << row;
    for (int f = 0; f < kCriteoCategoricalFields; ++f) {
      const uint64_t token = e.categories[f];
      if (token == kMissingValue) continue;
      ++values;
      if (tokens[f].at(token) != 1) continue;
      // Unknown to the model: another token that never occurs in the field (so unknown too) scores the same.
      // A planted value seen once has a weight, and the replacement changes the probability.
      CriteoExample other = e;
      for (uint64_t t = token ^ 0x5a5a5a5aULL;; t = (t + 1) & 0xffffffffULL) {
        if (!tokens[f].count(t)) {
          other.categories[f] = t;
          break;
        }
      }
      if (model.Probability(other) == p) ++new_ids;
    }
  }
  const double fraction = static_cast<double>(new_ids) / values;
  EXPECT_GT(fraction, 0.19);  // 0.2 of about 120k values: a standard deviation of 0.0012
  EXPECT_LT(fraction, 0.21);

  // Without new ids, no value is both seen once and unknown.
  const PlantedModel fixed(Small());
  const FieldTokens fixed_tokens = CountTokens(fixed, 0, 0, Small().train_rows);
  int64_t unknown = 0;
  for (int64_t row = 0; row < Small().train_rows; ++row) {
    const double p = fixed.Draw(0, row, &e);
    for (int f = 0; f < kCriteoCategoricalFields; ++f) {
      if (e.categories[f] == kMissingValue || fixed_tokens[f].at(e.categories[f]) != 1) continue;
      CriteoExample other = e;
      other.categories[f] = kMissingValue;  // scored like an unknown token
      if (fixed.Probability(other) == p) ++unknown;
    }
  }
  EXPECT_EQ(unknown, 0);
}

TEST(DatagenTest, VocabDriftKeepsBringingNewIds) {
  DatagenOptions options = Small();
  options.train_rows = 20000;
  options.vocab_drift = 0.1;  // 2000 ids over the training split: a whole max_vocab
  const PlantedModel drifting(options), fixed(Small());
  // Per field, the distinct tokens of the second half of the rows that never occur in the first half.
  auto new_fraction = [&](const PlantedModel& model) {
    const FieldTokens first = CountTokens(model, 0, 0, options.train_rows / 2);
    const FieldTokens second = CountTokens(model, 0, options.train_rows / 2, options.train_rows);
    int64_t distinct = 0, unseen = 0;
    for (int f = 0; f < kCriteoCategoricalFields; ++f) {
      for (const auto& [token, n] : second[f]) {
        ++distinct;
        unseen += first[f].count(token) == 0;
      }
    }
    return static_cast<double>(unseen) / distinct;
  };
  const double drifting_new = new_fraction(drifting), fixed_new = new_fraction(fixed);
  EXPECT_GT(drifting_new, 0.5);
  EXPECT_GT(drifting_new, 2 * fixed_new);
  // The distinct tokens keep growing: each quarter of the rows brings a similar number of new ones.
  std::array<std::unordered_set<uint64_t>, kCriteoCategoricalFields> seen;
  std::vector<int64_t> added;
  for (int q = 0; q < 4; ++q) {
    const FieldTokens tokens = CountTokens(drifting, 0, q * options.train_rows / 4, (q + 1) * options.train_rows / 4);
    int64_t n = 0;
    for (int f = 0; f < kCriteoCategoricalFields; ++f) {
      for (const auto& [token, count] : tokens[f]) n += seen[f].insert(token).second;
    }
    added.push_back(n);
  }
  EXPECT_GT(added[3], added[1] / 2) << added[1] << " then " << added[3];

  // Row 0 has no shift yet, so it is the fixed-vocabulary row: an id's token does not depend on the drift.
  CriteoExample a, b;
  drifting.Draw(0, 0, &a);
  fixed.Draw(0, 0, &b);
  EXPECT_EQ(PlantedModel::FormatLine(a), PlantedModel::FormatLine(b));

  // Still learnable, and the parsed test split scores as the truth file says (weights follow the ids).
  const std::string dir = Dir("gen_drift");
  auto truth = GenerateCriteoData(options, dir);
  ASSERT_TRUE(truth.ok()) << truth.status();
  EXPECT_GT(truth->bayes_auc, 0.75);
  auto reader = *OpenCriteoReader({dir + "/test.tsv"}, {});
  std::vector<float> probabilities, labels;
  CriteoExample e;
  while (*reader->Next(&e)) {
    probabilities.push_back(static_cast<float>(drifting.Probability(e)));
    labels.push_back(e.label);
  }
  EXPECT_NEAR(ExactAuc(probabilities, labels), truth->bayes_auc, 1e-9);
  EXPECT_NE(Slurp(dir + "/truth.txt").find("vocab_drift: 0.1\n"), std::string::npos);
}

TEST(DatagenTest, GrowingVocabularyIsReproducible) {
  DatagenOptions options = Small();
  options.new_id_rate = 0.1;
  options.vocab_drift = 0.3;
  const std::string a = Dir("grow_a"), b = Dir("grow_b"), c = Dir("grow_c");
  ASSERT_TRUE(GenerateCriteoData(options, a).ok());
  ASSERT_TRUE(GenerateCriteoData(options, b).ok());
  for (const char* f : {"/train.tsv", "/test.tsv", "/truth.txt"}) EXPECT_EQ(Slurp(a + f), Slurp(b + f)) << f;
  DatagenOptions other = options;
  other.seed = 2;
  ASSERT_TRUE(GenerateCriteoData(other, c).ok());
  EXPECT_NE(Slurp(a + "/train.tsv"), Slurp(c + "/train.tsv"));
  // Any row can be regenerated alone.
  const std::string train = Slurp(a + "/train.tsv");
  CriteoExample e;
  PlantedModel(options).Draw(0, 2999, &e);
  EXPECT_EQ(train.substr(train.rfind('\n', train.size() - 2) + 1), PlantedModel::FormatLine(e) + "\n");
}

TEST(DatagenTest, LargeVocabPreset) {
  const DatagenOptions o = LargeVocabDatagenOptions();
  EXPECT_EQ(o.train_rows, 1000000);
  EXPECT_EQ(o.test_rows, 100000);
  EXPECT_EQ(o.max_vocab, 200000);
  EXPECT_EQ(o.zipf_exponent, 1.05);
  EXPECT_EQ(o.new_id_rate, 0.05);
  EXPECT_EQ(o.vocab_drift, 0.05);
  EXPECT_EQ(o.interaction_stddev, 0.3);
  EXPECT_EQ(o.seed, DatagenOptions().seed);
  // The model builds quickly and scores its own draws.
  const PlantedModel model(o);
  CriteoExample e;
  for (int64_t row = 0; row < 1000; ++row) {
    const double p = model.Draw(1, row, &e);
    EXPECT_DOUBLE_EQ(model.Probability(e), p);
  }
}

TEST(DatagenTest, RefusesOptionsOutOfRange) {
  const std::string dir = Dir("gen_invalid");
  auto expect_invalid = [&](const DatagenOptions& options, const std::string& name) {
    const absl::Status status = GenerateCriteoData(options, dir).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(std::string(status.message()).find(name), std::string::npos) << status;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double rate : {-0.1, 1.0, 1.5, nan}) {
    DatagenOptions o = Small();
    o.new_id_rate = rate;
    expect_invalid(o, "new_id_rate");
  }
  for (double drift : {-0.5, inf, nan, 1e9}) {  // 1e9 per row: too many ids for the token -> id map
    DatagenOptions o = Small();
    o.vocab_drift = drift;
    expect_invalid(o, "vocab_drift");
  }
  for (double exponent : {-1.0, nan}) {
    DatagenOptions o = Small();
    o.zipf_exponent = exponent;
    expect_invalid(o, "zipf_exponent");
  }
  DatagenOptions o = Small();
  o.new_id_rate = 0.999;
  o.vocab_drift = 1.0;
  EXPECT_TRUE(GenerateCriteoData(o, dir).ok());
}

}  // namespace
}  // namespace kestrel
