#include "worker/data/datagen.h"

#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/metrics.h"

namespace kestrel {
namespace {

std::string Dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  std::system(("mkdir -p " + dir).c_str());
  return dir;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

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
  if (counts.size() > 4) EXPECT_GT(counts[0], 3 * counts[counts.size() / 2]);
  EXPECT_EQ(Slurp(dir + "/truth.txt").find("bayes_auc: ") != std::string::npos, true);
}

}  // namespace
}  // namespace kestrel
