#include "common/evaluation.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kestrel {
namespace {

// AUC by counting every (positive, negative) pair.
double BruteAuc(const std::vector<float>& s, const std::vector<float>& y) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    for (size_t j = 0; j < s.size(); ++j) {
      if (y[i] > 0.5f && y[j] < 0.5f) {
        pairs += 1;
        wins += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
      }
    }
  }
  return pairs == 0 ? 0.5 : wins / pairs;
}

TEST(MetricsTest, ExactAucMatchesPairCountingWithTies) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> s(1 + rng() % 200), y(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      s[i] = static_cast<float>(rng() % 10) / 10;  // many ties
      y[i] = static_cast<float>(rng() % 2);
    }
    EXPECT_NEAR(ExactAuc(s, y), BruteAuc(s, y), 1e-12) << trial;
  }
  EXPECT_EQ(ExactAuc(std::vector<float>{0.1f, 0.9f}, std::vector<float>{0, 1}), 1.0);
  EXPECT_EQ(ExactAuc(std::vector<float>{0.1f, 0.9f}, std::vector<float>{1, 0}), 0.0);
  EXPECT_EQ(ExactAuc(std::vector<float>{0.3f, 0.4f}, std::vector<float>{1, 1}), 0.5);
}

TEST(MetricsTest, LogLossByHand) {
  EXPECT_NEAR(LogLoss(std::vector<float>{0.8f, 0.3f}, std::vector<float>{1, 0}),
              -(std::log(0.8) + std::log(0.7)) / 2, 1e-6);
  EXPECT_LT(LogLoss(std::vector<float>{0.0f}, std::vector<float>{1}), 17.0) << "clamped, finite";
}

}  // namespace
}  // namespace kestrel
