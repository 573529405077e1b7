#include "common/half.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "absl/base/casts.h"
#include "common/test_seed.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

uint32_t Bits(float f) { return absl::bit_cast<uint32_t>(f); }
float FromBits(uint32_t u) { return absl::bit_cast<float>(u); }

// Every fp16 pattern decodes to the same fp32 bits on both paths, and every finite one encodes back to itself.
TEST(HalfTest, EveryFloat16RoundTripsAndBothPathsAgree) {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> scalar(65536), fast(65536);
  half_internal::DecodeFloat16Scalar(all.data(), all.size(), scalar.data());
  if (half_internal::HasF16c()) {
    half_internal::DecodeFloat16F16c(all.data(), all.size(), fast.data());
  } else {
    fast = scalar;
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(Bits(scalar[h]), Bits(fast[h])) << std::hex << h;
    if ((h & 0x7c00) == 0x7c00) continue;  // infinities and NaNs
    ASSERT_EQ(FloatToHalf(scalar[h]), h) << std::hex << h;
  }
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24)) << "the smallest subnormal, exact";
  EXPECT_EQ(HalfToFloat(0x03ff), 1023 * std::ldexp(1.0f, -24)) << "the largest subnormal";
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
}

// The scalar code and F16C agree on every kind of fp32 input: random bit patterns (all exponents) and values
// packed around the rounding boundaries.
TEST(HalfTest, ScalarAndF16cEncodeIdentically) {
  if (!half_internal::HasF16c()) GTEST_SKIP() << "this CPU has no F16C: the scalar path is the only one";
  const TestSeed seed(7);
  std::mt19937 rng(seed.value());
  std::vector<float> in;
  for (int i = 0; i < 1 << 20; ++i) {
    float f = FromBits(static_cast<uint32_t>(rng()));
    if (std::isfinite(f)) in.push_back(f);
  }
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // each half's neighbourhood: just below, the tie, just above
    const float lo = HalfToFloat(static_cast<uint16_t>(h)), hi = HalfToFloat(static_cast<uint16_t>(h + 1));
    const float mid = (lo + hi) / 2;
    for (float f : {mid, std::nextafter(mid, lo), std::nextafter(mid, hi)}) {
      in.push_back(f);
      in.push_back(-f);
    }
  }
  std::vector<uint16_t> scalar(in.size()), fast(in.size());
  half_internal::EncodeFloat16Scalar(in.data(), in.size(), scalar.data());
  half_internal::EncodeFloat16F16c(in.data(), in.size(), fast.data());
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(scalar[i], fast[i]) << in[i];
  if (!half_internal::HasAvx2()) return;
  // bf16: the AVX2 kernels against the scalar conversions, on the same inputs and on every pattern.
  half_internal::EncodeBfloat16Avx2(in.data(), in.size(), fast.data());
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(FloatToBfloat16(in[i]), fast[i]) << in[i];
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> decoded(65536);
  half_internal::DecodeBfloat16Avx2(all.data(), all.size(), decoded.data());
  for (uint32_t h = 0; h < 65536; ++h) ASSERT_EQ(Bits(decoded[h]), Bits(Bfloat16ToFloat(h))) << h;
}

TEST(HalfTest, RoundsToNearestTiesToEven) {
  // fp16 keeps 10 fraction bits: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(HalfToFloat(FloatToHalf(1 + std::ldexp(1.0f, -11))), 1.0f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(1 + 3 * std::ldexp(1.0f, -11))), 1 + std::ldexp(1.0f, -9));
  EXPECT_EQ(HalfToFloat(FloatToHalf(std::nextafter(1 + std::ldexp(1.0f, -11), 2.0f))), 1 + std::ldexp(1.0f, -10));
  // Subnormal halves: 2^-25 ties to 0, 1.5 * 2^-25 goes to the smallest subnormal.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0);
  EXPECT_EQ(FloatToHalf(1.5f * std::ldexp(1.0f, -25)), 1);
  EXPECT_EQ(FloatToHalf(3 * std::ldexp(1.0f, -25)), 2) << "1.5 subnormal steps: tie to even 2";
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00) << "the tie above 65504 rounds to infinity";
  // bf16 keeps 7 fraction bits.
  EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(1 + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(1 + 3 * std::ldexp(1.0f, -8))), 1 + std::ldexp(1.0f, -6));
  // fp32 subnormals stay subnormal in bf16.
  const float tiny = std::ldexp(1.0f, -130);
  EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(tiny)), tiny);
  EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(-2.5f)), -2.5f);
}

TEST(HalfTest, OnlyFiniteValuesTravel) {
  const float inf = std::numeric_limits<float>::infinity();
  uint16_t out[4];
  for (ValueType type : {VALUE_TYPE_FLOAT32, VALUE_TYPE_FLOAT16, VALUE_TYPE_BFLOAT16}) {
    SCOPED_TRACE(ValueType_Name(type));
    float buffer[4];
    for (float bad : {inf, -inf, std::numeric_limits<float>::quiet_NaN()}) {
      const float in[3] = {1.0f, bad, 2.0f};
      EXPECT_EQ(EncodeValues(type, in, 3, 0, buffer).code(), absl::StatusCode::kInvalidArgument);
    }
  }
  const float big[2] = {1.0f, 65520.0f};
  EXPECT_EQ(EncodeValues(VALUE_TYPE_FLOAT16, big, 2, 0, out).code(), absl::StatusCode::kOutOfRange);
  const float ok[2] = {1.0f, 65519.0f};
  EXPECT_TRUE(EncodeValues(VALUE_TYPE_FLOAT16, ok, 2, 0, out).ok());
  const float huge[1] = {std::numeric_limits<float>::max()};
  EXPECT_EQ(EncodeValues(VALUE_TYPE_BFLOAT16, huge, 1, 0, out).code(), absl::StatusCode::kOutOfRange);
  // Decoding refuses non-finite halves from the wire.
  float decoded[2];
  const uint16_t inf16[2] = {0x3c00, 0x7c00}, nan_bf16[2] = {0x3f80, 0x7fc0};
  EXPECT_EQ(DecodeValues(VALUE_TYPE_FLOAT16, inf16, 2, 0, decoded).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeValues(VALUE_TYPE_BFLOAT16, nan_bf16, 2, 0, decoded).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeValues(static_cast<ValueType>(7), inf16, 2, 0, decoded).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeValues(VALUE_TYPE_BFLOAT16, ok, 2, 3, out).code(), absl::StatusCode::kInvalidArgument)
      << "only fp16 is scaled";
  EXPECT_EQ(EncodeValues(VALUE_TYPE_FLOAT16, ok, 2, 99, out).code(), absl::StatusCode::kInvalidArgument);
}

// The fp16 gradient scale: the largest power of two keeping every value within 65504, so nothing overflows
// and the largest gradient keeps fp16's full precision; the scaled round trip is exactly the scalar one.
TEST(HalfTest, Float16GradientScaleNeverOverflows) {
  const TestSeed seed(3);
  std::mt19937 rng(seed.value());
  for (float max_abs : {1e15f, 1e10f, 65504.0f, 65505.0f, 1.0f, 1e-3f, 3e-8f, 1e-16f, 1e-30f}) {
    SCOPED_TRACE(max_abs);
    std::vector<float> g(1000);
    std::uniform_real_distribution<float> u(-1, 1);
    for (float& x : g) x = u(rng) * max_abs;
    g[17] = -max_abs;
    const int e = Float16ScaleExponent(g.data(), g.size());
    EXPECT_LE(std::ldexp(max_abs, e), kFloat16Max);
    if (e < kMaxScaleExponent) { EXPECT_GT(std::ldexp(max_abs, e + 1), kFloat16Max); }
    std::vector<uint16_t> wire(g.size());
    ASSERT_TRUE(EncodeValues(VALUE_TYPE_FLOAT16, g.data(), g.size(), e, wire.data()).ok());
    std::vector<float> back(g.size());
    ASSERT_TRUE(DecodeValues(VALUE_TYPE_FLOAT16, wire.data(), wire.size(), e, back.data()).ok());
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_EQ(back[i], std::ldexp(HalfToFloat(FloatToHalf(std::ldexp(g[i], e))), -e)) << i;
      if (std::ldexp(std::fabs(g[i]), e) >= std::ldexp(1.0f, -14)) {  // a normal half: 11 significant bits
        ASSERT_NEAR(back[i], g[i], std::fabs(g[i]) * std::ldexp(1.0f, -11));
      }
    }
  }
  const float zeros[3] = {0, -0.0f, 0};
  EXPECT_EQ(Float16ScaleExponent(zeros, 3), kMaxScaleExponent);
}

TEST(HalfTest, Float32PassesThroughBitExact) {
  const float in[3] = {1.0f / 3, -0.0f, std::numeric_limits<float>::denorm_min()};
  float wire[3], out[3];
  ASSERT_TRUE(EncodeValues(VALUE_TYPE_FLOAT32, in, 3, 0, wire).ok());
  ASSERT_TRUE(DecodeValues(VALUE_TYPE_FLOAT32, wire, 3, 0, out).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Bits(out[i]), Bits(in[i]));
  EXPECT_EQ(BytesPerValue(VALUE_TYPE_FLOAT32), 4u);
  EXPECT_EQ(BytesPerValue(VALUE_TYPE_BFLOAT16), 2u);
}

}  // namespace
}  // namespace kestrel
