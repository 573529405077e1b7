#include "server/initializer.h"

#include "common/counter_random.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "proto/table.pb.h"

namespace kestrel {
namespace {

constexpr int kKeys = 1000;
constexpr int kDim = 100;  // kKeys * kDim = 100k samples

InitializerConfig Config(InitializerConfig::Type type) {
  InitializerConfig c;
  c.set_type(type);
  return c;
}

InitializerConfig Uniform(float min, float max) {
  InitializerConfig c = Config(InitializerConfig::UNIFORM);
  c.set_min(min);
  c.set_max(max);
  return c;
}

InitializerConfig Normal(InitializerConfig::Type type, float mean, float stddev) {
  InitializerConfig c = Config(type);
  c.set_mean(mean);
  c.set_stddev(stddev);
  return c;
}

InitializerConfig Constant(float value) {
  InitializerConfig c = Config(InitializerConfig::CONSTANT);
  c.set_value(value);
  return c;
}

Initializer MustCreate(const InitializerConfig& config, uint64_t seed = 42) {
  auto init = Initializer::Create(config, seed);
  EXPECT_TRUE(init.ok()) << init.status();
  return *std::move(init);
}

std::vector<float> Row(const Initializer& init, uint64_t key, int dim) {
  std::vector<float> row(dim, std::numeric_limits<float>::quiet_NaN());
  init.Fill(key, row.data(), dim);
  return row;
}

// kKeys rows of kDim values each, for keys spread over the key space.
std::vector<float> Samples(const Initializer& init) {
  std::vector<float> all;
  all.reserve(kKeys * kDim);
  for (uint64_t k = 0; k < kKeys; ++k) {
    const std::vector<float> row = Row(init, k * 0x9e3779b97f4a7c15ULL, kDim);
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

struct Moments {
  double mean = 0;
  double variance = 0;
};

Moments ComputeMoments(const std::vector<float>& x) {
  Moments m;
  for (float v : x) m.mean += v;
  m.mean /= x.size();
  for (float v : x) m.variance += (v - m.mean) * (v - m.mean);
  m.variance /= x.size() - 1;
  return m;
}

// Bit-exact equality (so that -0.0 != 0.0 and NaNs compare by payload).
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

std::vector<InitializerConfig> RandomConfigs() {
  return {Uniform(-0.5f, 1.5f), Normal(InitializerConfig::NORMAL, 0.25f, 2.0f),
          Normal(InitializerConfig::TRUNCATED_NORMAL, -1.0f, 0.5f)};
}

void ExpectInvalid(const InitializerConfig& config) {
  EXPECT_EQ(Initializer::Create(config, 1).status().code(), absl::StatusCode::kInvalidArgument)
      << config.ShortDebugString();
}

TEST(InitializerTest, FillIsAPureFunctionOfConfigSeedAndKey) {
  const std::vector<uint64_t> keys = {0, 1, 2, 12345, 0x8000000000000000ULL, ~0ULL};
  for (const InitializerConfig& config : RandomConfigs()) {
    SCOPED_TRACE(config.ShortDebugString());
    const Initializer a = MustCreate(config, 7);
    std::vector<std::vector<float>> forward;
    for (uint64_t key : keys) forward.push_back(Row(a, key, 16));
    // A fresh object, keys in reverse order, each key twice.
    const Initializer b = MustCreate(config, 7);
    for (size_t i = keys.size(); i-- > 0;) {
      EXPECT_TRUE(SameBits(Row(b, keys[i], 16), forward[i])) << keys[i];
      EXPECT_TRUE(SameBits(Row(b, keys[i], 16), forward[i])) << keys[i];
    }
    // Element j does not depend on the row's dim.
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::vector<float> shorter = Row(a, keys[i], 5);
      EXPECT_TRUE(SameBits(shorter, std::vector<float>(forward[i].begin(), forward[i].begin() + 5))) << keys[i];
    }
  }
}

TEST(InitializerTest, FillDiffersAcrossSeedsKeysAndElements) {
  for (const InitializerConfig& config : RandomConfigs()) {
    SCOPED_TRACE(config.ShortDebugString());
    const Initializer seed1 = MustCreate(config, 1);
    const Initializer seed2 = MustCreate(config, 2);
    for (uint64_t key : {0ULL, 1ULL, 99ULL}) {
      const std::vector<float> row = Row(seed1, key, 8);
      EXPECT_NE(row, Row(seed2, key, 8)) << key;
      EXPECT_NE(row, Row(seed1, key + 1, 8)) << key;
      int equal_neighbours = 0;
      for (int j = 1; j < 8; ++j) equal_neighbours += row[j] == row[j - 1];
      EXPECT_EQ(equal_neighbours, 0) << key;
    }
  }
}

TEST(InitializerTest, UniformRangeAndMoments) {
  const float lo = -0.5f, hi = 1.5f;
  const std::vector<float> x = Samples(MustCreate(Uniform(lo, hi)));
  for (float v : x) {
    ASSERT_GE(v, lo);
    ASSERT_LT(v, hi);
  }
  const Moments m = ComputeMoments(x);
  const double n = x.size();
  const double width = hi - lo;
  const double mean = (lo + hi) / 2.0, variance = width * width / 12;
  // Standard error of the sample variance of U: sqrt((mu4 - var^2) / n), mu4 = width^4 / 80.
  const double variance_se = std::sqrt((std::pow(width, 4) / 80 - variance * variance) / n);
  EXPECT_NEAR(m.mean, mean, 5 * std::sqrt(variance / n));
  EXPECT_NEAR(m.variance, variance, 5 * variance_se);
}

TEST(InitializerTest, UniformDefaultsToPlusMinusOneHundredth) {
  const std::vector<float> x = Samples(MustCreate(Config(InitializerConfig::UNIFORM)));
  float lo = x[0], hi = x[0];
  for (float v : x) {
    ASSERT_GE(v, -0.01f);
    ASSERT_LT(v, 0.01f);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  // 100k draws come close to both ends.
  EXPECT_LT(lo, -0.0099f);
  EXPECT_GT(hi, 0.0099f);
}

// The contract is U[min, max): max itself must never be returned.
TEST(InitializerTest, UniformNeverReturnsMax) {
  // With the default range and seed 42, element 49 of key 2345139 draws u = 0.999999988; -0.01 + 0.02 * u is
  // below 0.01 but rounds to 0.01f when converted to float (found by a search over keys; Fill is
  // deterministic, so this is a fixed case).
  const std::vector<float> row = Row(MustCreate(Config(InitializerConfig::UNIFORM), 42), 2345139, 64);
  EXPECT_LT(row[49], 0.01f);

  // With max the next float after min, every draw lies in [min, max) in exact arithmetic and must round to
  // min; about half round up to max instead.
  const float lo = 1.0f, hi = std::nextafter(1.0f, 2.0f);
  const Initializer init = MustCreate(Uniform(lo, hi));
  int at_max = 0;
  for (uint64_t key = 0; key < 100; ++key) {
    for (float v : Row(init, key, 10)) {
      EXPECT_GE(v, lo);
      at_max += v >= hi;
    }
  }
  EXPECT_EQ(at_max, 0) << "of 1000 draws in U[1, nextafter(1)) returned max";
}

TEST(InitializerTest, NormalMoments) {
  const float mean = 0.25f, stddev = 2.0f;
  const std::vector<float> x = Samples(MustCreate(Normal(InitializerConfig::NORMAL, mean, stddev)));
  const Moments m = ComputeMoments(x);
  const double n = x.size();
  EXPECT_NEAR(m.mean, mean, 5 * stddev / std::sqrt(n));
  // The sample stddev has standard error ~ stddev / sqrt(2n).
  EXPECT_NEAR(std::sqrt(m.variance), stddev, 5 * stddev / std::sqrt(2 * n));
  // Shape: ~68.27% within one stddev, ~95.45% within two.
  int within1 = 0, within2 = 0;
  for (float v : x) {
    within1 += std::abs(v - mean) <= stddev;
    within2 += std::abs(v - mean) <= 2 * stddev;
  }
  const double p1 = std::erf(1 / std::sqrt(2.0)), p2 = std::erf(2 / std::sqrt(2.0));
  EXPECT_NEAR(within1 / n, p1, 5 * std::sqrt(p1 * (1 - p1) / n));
  EXPECT_NEAR(within2 / n, p2, 5 * std::sqrt(p2 * (1 - p2) / n));
}

TEST(InitializerTest, NormalStddevDefaultsToOneHundredth) {
  const Moments m = ComputeMoments(Samples(MustCreate(Normal(InitializerConfig::NORMAL, 0.0f, 0.0f))));
  EXPECT_NEAR(std::sqrt(m.variance), 0.01, 5 * 0.01 / std::sqrt(2.0 * kKeys * kDim));
  EXPECT_NEAR(m.mean, 0.0, 5 * 0.01 / std::sqrt(1.0 * kKeys * kDim));
}

TEST(InitializerTest, TruncatedNormalStaysWithinTwoStddevs) {
  const float mean = -1.0f, stddev = 0.5f;
  const std::vector<float> x = Samples(MustCreate(Normal(InitializerConfig::TRUNCATED_NORMAL, mean, stddev)));
  for (float v : x) {
    ASSERT_GE(v, mean - 2 * stddev);
    ASSERT_LE(v, mean + 2 * stddev);
  }
  // The standard normal truncated to [-2, 2] has variance 1 - 2 * 2 * phi(2) / (Phi(2) - Phi(-2)) (~0.8796^2).
  const double phi2 = std::exp(-2.0) / std::sqrt(2 * M_PI);
  const double mass = std::erf(2 / std::sqrt(2.0));
  const double expected_stddev = stddev * std::sqrt(1 - 4 * phi2 / mass);
  ASSERT_NEAR(expected_stddev / stddev, 0.88, 0.005);
  const Moments m = ComputeMoments(x);
  const double n = x.size();
  EXPECT_NEAR(m.mean, mean, 5 * expected_stddev / std::sqrt(n));
  EXPECT_NEAR(std::sqrt(m.variance), expected_stddev, 5 * expected_stddev / std::sqrt(2 * n));
}

TEST(InitializerTest, ZerosAndConstantAreExact) {
  for (uint64_t key : {0ULL, 5ULL, ~0ULL}) {
    for (float v : Row(MustCreate(Config(InitializerConfig::ZEROS)), key, 7)) {
      EXPECT_EQ(v, 0.0f);
      EXPECT_FALSE(std::signbit(v));
    }
    for (float c : {0.375f, -2.5f, 1e-30f}) {
      EXPECT_EQ(Row(MustCreate(Constant(c)), key, 7), std::vector<float>(7, c));
    }
  }
}

TEST(InitializerTest, CreateRejectsInvalidConfigs) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ExpectInvalid(Uniform(1.0f, 1.0f));
  ExpectInvalid(Uniform(2.0f, 1.0f));
  ExpectInvalid(Uniform(0.0f, -1.0f));
  ExpectInvalid(Uniform(-inf, 1.0f));
  ExpectInvalid(Uniform(0.0f, inf));
  ExpectInvalid(Uniform(nan, 1.0f));
  ExpectInvalid(Uniform(0.0f, nan));
  for (auto type : {InitializerConfig::NORMAL, InitializerConfig::TRUNCATED_NORMAL}) {
    ExpectInvalid(Normal(type, 0.0f, -1.0f));
    ExpectInvalid(Normal(type, 0.0f, inf));
    ExpectInvalid(Normal(type, 0.0f, nan));
    ExpectInvalid(Normal(type, nan, 1.0f));
    ExpectInvalid(Normal(type, inf, 1.0f));
  }
  ExpectInvalid(Constant(inf));
  ExpectInvalid(Constant(-inf));
  ExpectInvalid(Constant(nan));
  InitializerConfig unknown;
  unknown.set_type(static_cast<InitializerConfig::Type>(99));
  ExpectInvalid(unknown);
}

TEST(InitializerTest, StaticDrawsAreDeterministicAndInRange) {
  double sum = 0;
  for (uint64_t c = 0; c < 10000; ++c) {
    const double u = CounterUniform01(123, c);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    EXPECT_EQ(u, CounterUniform01(123, c));
    sum += u;
    const double z = CounterNormal(123, c);
    ASSERT_TRUE(std::isfinite(z));
    EXPECT_EQ(z, CounterNormal(123, c));
  }
  EXPECT_NEAR(sum / 10000, 0.5, 5 * std::sqrt(1.0 / 12 / 10000));
  EXPECT_NE(CounterUniform01(1, 0), CounterUniform01(2, 0));
}

}  // namespace
}  // namespace kestrel
