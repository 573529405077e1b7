#include "server/row_values.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <cstdint>
#include <vector>

#include "common/half.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

TableConfig Config(ValueType type, int dim, bool stochastic = false) {
  TableConfig c;
  c.set_name("emb");
  c.set_dim(dim);
  c.set_seed(7);
  c.mutable_storage()->set_type(type);
  c.mutable_storage()->set_stochastic_rounding(stochastic);
  return c;
}

TEST(RowValuesTest, WordsPerRow) {
  EXPECT_EQ(RowValues::WordsFor(Config(VALUE_TYPE_FLOAT32, 16)), 16);
  EXPECT_EQ(RowValues::WordsFor(Config(VALUE_TYPE_BFLOAT16, 16)), 8);
  EXPECT_EQ(RowValues::WordsFor(Config(VALUE_TYPE_FLOAT16, 3)), 2);
  EXPECT_EQ(RowValues::WordsFor(Config(VALUE_TYPE_BFLOAT16, 1)), 1);
}

TEST(RowValuesTest, CheckRefusesWhatCannotBeStored) {
  EXPECT_TRUE(RowValues::Check(Config(VALUE_TYPE_BFLOAT16, 16, true)).ok());
  TableConfig dense = Config(VALUE_TYPE_BFLOAT16, 16);
  dense.set_kind(TableConfig::DENSE);
  EXPECT_EQ(RowValues::Check(dense).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RowValues::Check(Config(VALUE_TYPE_FLOAT32, 16, true)).code(), absl::StatusCode::kInvalidArgument);
  TableConfig unknown = Config(VALUE_TYPE_FLOAT32, 16);
  unknown.mutable_storage()->set_type(static_cast<ValueType>(9));
  const absl::Status status = RowValues::Check(unknown);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("storage.type"), absl::string_view::npos) << status;
}

// Nearest-even encoding is common/half.h's, the padding half of an odd dim is zero, and decoding a stored row
// gives the stored values exactly (Round is Encode then Decode).
TEST(RowValuesTest, EncodeRoundsOnceAndDecodeIsExact) {
  for (ValueType type : {VALUE_TYPE_BFLOAT16, VALUE_TYPE_FLOAT16}) {
    const RowValues values(Config(type, 5));
    const std::vector<float> in = {0.1f, -0.333333f, 1e-3f, 3.14159f, -2.5e-5f};
    std::vector<float> stored(values.words(), -1.0f);
    values.Encode(in.data(), stored.data(), 0);
    uint32_t last;
    std::memcpy(&last, &stored[2], sizeof(last));
    EXPECT_EQ(last >> 16, 0u) << "padding half of an odd dim";
    std::vector<float> out(5);
    values.Decode(stored.data(), out.data());
    std::vector<float> rounded = in;
    values.Round(rounded.data());
    for (int i = 0; i < 5; ++i) {
      const float expected =
          type == VALUE_TYPE_BFLOAT16 ? Bfloat16ToFloat(FloatToBfloat16(in[i])) : HalfToFloat(FloatToHalf(in[i]));
      EXPECT_EQ(out[i], expected) << i;
      EXPECT_EQ(rounded[i], expected) << i;
    }
  }
  const RowValues fp32(Config(VALUE_TYPE_FLOAT32, 2));
  const float in[2] = {0.1f, -7.0f};
  float stored[2], out[2];
  fp32.Encode(in, stored, 0);
  fp32.Decode(stored, out);
  EXPECT_EQ(out[0], in[0]);
  EXPECT_EQ(out[1], in[1]);
}

// The vectorized nearest-even paths give common/half.h's scalar bits for every kind of float (random bit patterns:
// normals, subnormals, zeros, infinities, NaNs).
TEST(RowValuesTest, NearestEvenMatchesTheScalarConversions) {
  std::mt19937 rng(12345);
  constexpr int kDim = 64;
  for (ValueType type : {VALUE_TYPE_BFLOAT16, VALUE_TYPE_FLOAT16}) {
    const RowValues values(Config(type, kDim));
    for (int round = 0; round < 2000; ++round) {
      float in[kDim];
      for (float& f : in) {
        const uint32_t bits = static_cast<uint32_t>(rng());
        std::memcpy(&f, &bits, sizeof(bits));
      }
      float stored[kDim / 2];
      values.Encode(in, stored, 0);
      for (int i = 0; i < kDim; ++i) {
        uint16_t h;
        std::memcpy(&h, reinterpret_cast<const char*>(stored) + 2 * i, sizeof(h));
        const float clamped = std::isnan(in[i]) ? in[i] : std::clamp(in[i], -kFloat16Max, kFloat16Max);
        const uint16_t expected = type == VALUE_TYPE_BFLOAT16 ? FloatToBfloat16(in[i]) : FloatToHalf(clamped);
        ASSERT_EQ(h, expected) << "type " << type << " value " << in[i];
      }
    }
  }
}

TEST(RowValuesTest, Float16ClampsInsteadOfOverflowing) {
  const RowValues values(Config(VALUE_TYPE_FLOAT16, 2));
  const float in[2] = {1e6f, -1e9f};
  float stored[1], out[2];
  values.Encode(in, stored, 0);
  values.Decode(stored, out);
  EXPECT_EQ(out[0], kFloat16Max);
  EXPECT_EQ(out[1], -kFloat16Max);
}

// Stochastic rounding picks one of the two neighbours, the same one for the same noise, and is unbiased: a value a
// quarter of the way from one bf16 to the next rounds up about a quarter of the time.
TEST(RowValuesTest, StochasticRoundingIsUnbiasedAndDeterministic) {
  for (ValueType type : {VALUE_TYPE_BFLOAT16, VALUE_TYPE_FLOAT16}) {
    const RowValues values(Config(type, 1, /*stochastic=*/true));
    const float lo = 1.0f;
    const float ulp = type == VALUE_TYPE_BFLOAT16 ? 1.0f / 128 : 1.0f / 1024;
    for (float sign : {1.0f, -1.0f}) {
      const float x = sign * (lo + 0.25f * ulp);
      int up = 0;
      const int n = 20000;
      for (int k = 0; k < n; ++k) {
        const uint64_t noise = values.Noise(/*key=*/k, /*clock=*/3);
        float stored[1], out[1], again[1];
        values.Encode(&x, stored, noise);
        values.Decode(stored, out);
        values.Encode(&x, stored, noise);
        values.Decode(stored, again);
        ASSERT_EQ(out[0], again[0]);
        ASSERT_TRUE(out[0] == sign * lo || out[0] == sign * (lo + ulp)) << out[0];
        up += out[0] != sign * lo;
      }
      EXPECT_NEAR(static_cast<double>(up) / n, 0.25, 0.02) << "type " << type << " sign " << sign;
    }
    // A value the storage holds is kept whatever the noise.
    const float exact = 0.5f;
    float stored[1], out[1];
    values.Encode(&exact, stored, values.Noise(1, 1));
    values.Decode(stored, out);
    EXPECT_EQ(out[0], exact);
  }
}

}  // namespace
}  // namespace kestrel
