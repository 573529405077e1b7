#include "server/quantized_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/half.h"
#include "gtest/gtest.h"

namespace kestrel {
namespace {

struct Coded {
  std::vector<float> back;
  double lo = 0, step = 0;  // the header's halves, decoded
  uint16_t lo_bits = 0, step_bits = 0;
};

Coded RoundTrip(RowCode code, const std::vector<float>& run) {
  Coded c;
  std::string coded;
  EXPECT_TRUE(EncodeRun(code, run, &coded).ok());
  EXPECT_EQ(coded.size(), QuantizedBytes(run.size()));
  if (coded.size() < 4) return c;
  c.lo_bits = static_cast<uint16_t>(static_cast<uint8_t>(coded[0]) | static_cast<uint8_t>(coded[1]) << 8);
  c.step_bits = static_cast<uint16_t>(static_cast<uint8_t>(coded[2]) | static_cast<uint8_t>(coded[3]) << 8);
  c.lo = HalfToFloat(c.lo_bits);
  c.step = HalfToFloat(c.step_bits);
  c.back.resize(run.size());
  absl::string_view in = coded;
  EXPECT_TRUE(DecodeRun(code, &in, absl::MakeSpan(c.back)).ok());
  EXPECT_TRUE(in.empty());
  return c;
}

// The neighbouring finite halves of a finite half (the half itself at fp16's ends).
double NextHalfUp(uint16_t h) {
  if (h == 0x8000 || h == 0) return HalfToFloat(1);
  if (h == 0x7bff) return HalfToFloat(h);
  return HalfToFloat(static_cast<uint16_t>(h & 0x8000 ? h - 1 : h + 1));
}
double NextHalfDown(uint16_t h) {
  if (h == 0x8000 || h == 0) return HalfToFloat(0x8001);
  if (h == 0xfbff) return HalfToFloat(h);
  return HalfToFloat(static_cast<uint16_t>(h & 0x8000 ? h + 1 : h - 1));
}

// quantized_rows.h's bound on the step of a run (log2 domain for Log8) in [low, high] with `top` levels.
double StepBound(double low, double high, int top) {
  return ((high - low) + std::abs(low) / 1024 + std::exp2(-24)) / top * (1 + 1.0 / 1024) + std::exp2(-24);
}

// Checks the header is the documented one: lo the largest half <= low, step the smallest with lo + top * step >=
// high (0 only if high == lo), and step within StepBound.
void ExpectConservativeHeader(const Coded& c, double low, double high, int top) {
  EXPECT_LE(c.lo, low);
  EXPECT_GT(NextHalfUp(c.lo_bits), low) << "lo is the largest half <= " << low;
  EXPECT_GE(c.step, 0.0);
  EXPECT_EQ(c.step_bits & 0x8000, 0);
  EXPECT_GE(c.lo + top * c.step, high);
  if (c.step > 0) {
    EXPECT_LT(c.lo + top * NextHalfDown(c.step_bits), high) << "step is the smallest half that covers the run";
  } else {
    EXPECT_EQ(c.lo, high);
  }
  EXPECT_LE(c.step, StepBound(low, high, top));
}

void ExpectAffineBound(const std::vector<float>& run, const char* what) {
  SCOPED_TRACE(what);
  const Coded c = RoundTrip(RowCode::kAffine8, run);
  const auto [mn, mx] = std::minmax_element(run.begin(), run.end());
  ExpectConservativeHeader(c, *mn, *mx, 255);
  for (size_t i = 0; i < run.size(); ++i) {
    ASSERT_LE(std::abs(double{c.back[i]} - run[i]), c.step / 2 * (1 + 1e-12) + std::abs(c.back[i]) * std::exp2(-24))
        << "float " << i << " = " << run[i] << " (lo " << c.lo << ", step " << c.step << ")";
  }
}

void ExpectLogBound(const std::vector<float>& run, const char* what) {
  SCOPED_TRACE(what);
  const Coded c = RoundTrip(RowCode::kLog8, run);
  double low = INFINITY, high = -INFINITY;
  for (float x : run) {
    if (x > 0) low = std::min(low, std::log2(double{x})), high = std::max(high, std::log2(double{x}));
  }
  if (!std::isfinite(low)) low = high = 0;
  ExpectConservativeHeader(c, low, high, 254);
  for (size_t i = 0; i < run.size(); ++i) {
    if (run[i] == 0) {
      ASSERT_EQ(c.back[i], 0.0f) << "float " << i;
    } else {
      ASSERT_LE(std::abs(c.back[i] / double{run[i]} - 1), std::exp2(c.step / 2) - 1 + std::exp2(-24) + 1e-12)
          << "float " << i << " = " << run[i] << " (lo " << c.lo << ", step " << c.step << ")";
    }
  }
}

TEST(QuantizedRowsTest, AffineErrorIsAtMostHalfTheWrittenStep) {
  constexpr uint32_t kSeed = 7;
  std::mt19937 rng(kSeed);
  std::normal_distribution<float> value(0.0f, 0.05f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int trial = 0; trial < 400; ++trial) {
    SCOPED_TRACE(testing::Message() << "seed=" << kSeed << " (fixed in the test) trial " << trial);
    std::vector<float> run(16);
    for (float& x : run) x = value(rng);
    ExpectAffineBound(run, "embedding-like");
    // The header's fp16 rounding matters most for a narrow range far from 0, tiny (subnormal) steps, and fp16's
    // ends.
    for (float& x : run) x = 1000.0f + 0.01f * unit(rng);
    ExpectAffineBound(run, "narrow, far from 0");
    for (float& x : run) x = -3e-6f + 1e-6f * unit(rng);
    ExpectAffineBound(run, "subnormal step");
    for (float& x : run) x = 1e-30f * value(rng);
    ExpectAffineBound(run, "below fp16's smallest step");
    for (float& x : run) x = kFloat16Max * (2 * unit(rng) - 1);
    run[0] = -kFloat16Max;
    run[1] = kFloat16Max;
    ExpectAffineBound(run, "fp16's whole range");
    // Against the ideal float32 header: at most fp16's rounding worse (StepBound, checked above), so for these
    // rows about 1/510 of the range.
  }
  const Coded c = RoundTrip(RowCode::kAffine8, {0.0f, 0.05f, -0.1f, 0.2f});
  EXPECT_LE(c.step, 0.3 / 255 * 1.003);
}

TEST(QuantizedRowsTest, ConstantAndEmptyRunsAndHalvesAreExact) {
  EXPECT_EQ(RoundTrip(RowCode::kAffine8, {0.25f, 0.25f, 0.25f}).back, (std::vector<float>{0.25f, 0.25f, 0.25f}));
  EXPECT_EQ(RoundTrip(RowCode::kAffine8, {1.0f, -3.0f}).back[1], -3.0f) << "a minimum that is a half is exact";
  EXPECT_EQ(RoundTrip(RowCode::kLog8, {0.5f, 0.0f, 0.5f}).back, (std::vector<float>{0.5f, 0.0f, 0.5f}));
  EXPECT_EQ(RoundTrip(RowCode::kLog8, {0.0f, 0.0f}).back, (std::vector<float>{0.0f, 0.0f}));
  EXPECT_TRUE(RoundTrip(RowCode::kAffine8, {}).back.empty());
  EXPECT_TRUE(RoundTrip(RowCode::kLog8, {}).back.empty());
  // Constant runs of floats that are not halves: the smallest covering step, so within about 2^-19 of them.
  for (float x : {0.1f, -0.1f, 1000.3f, 1e-7f, 65503.9f}) {
    const Coded affine = RoundTrip(RowCode::kAffine8, {x, x});
    EXPECT_GT(affine.step, 0.0) << x;
    EXPECT_LE(std::abs(affine.back[0] - double{x}), std::abs(x) * std::exp2(-19) + std::exp2(-25) * 1.001) << x;
    ExpectAffineBound({x, x}, "constant");
    if (x > 0) ExpectLogBound({x, x}, "constant");
  }
  const Coded log = RoundTrip(RowCode::kLog8, {0.1f, 0.1f});
  EXPECT_LE(std::abs(log.back[0] / 0.1 - 1), 1e-5);
}

TEST(QuantizedRowsTest, LogKeepsZerosExactAndRelativeErrorSmall) {
  // Adagrad accumulators: zero, the initial value, and sums of squared gradients over decades.
  const std::vector<float> run = {0.0f, 0.1f, 0.1003f, 1.5f, 37.0f, 2048.5f, 1e-6f, 0.0f};
  ExpectLogBound(run, "accumulators");
  const Coded c = RoundTrip(RowCode::kLog8, run);
  // About what a float32 header gives: log2 range 31 over 254 steps, relative error <= 2^(step / 2) - 1.
  const double ideal = (std::log2(2048.5) - std::log2(1e-6)) / 254;
  EXPECT_LE(c.step, ideal * 1.002);
  for (size_t i = 0; i < run.size(); ++i) {
    if (run[i] != 0) {
      EXPECT_LE(std::abs(c.back[i] / run[i] - 1), std::exp2(ideal * 1.002 / 2) - 1) << i;
    }
  }
  constexpr uint32_t kSeed = 13;
  std::mt19937 rng(kSeed);
  std::uniform_real_distribution<float> exponent(-149.0f, 126.0f);
  for (int trial = 0; trial < 400; ++trial) {
    SCOPED_TRACE(testing::Message() << "seed=" << kSeed << " (fixed in the test) trial " << trial);
    std::vector<float> wide(16);
    for (float& x : wide) x = rng() % 5 == 0 ? 0.0f : std::exp2(exponent(rng));
    ExpectLogBound(wide, "float's whole range");
    const float base = std::exp2(exponent(rng) / 2);
    for (float& x : wide) x = base * (1 + 1e-4f * (rng() % 100));
    ExpectLogBound(wide, "narrow");
  }
  ExpectLogBound({std::numeric_limits<float>::denorm_min(), 1e38f}, "float's ends");
  // Near FLT_MAX the largest float's level may decode past it: such a run is refused, never written undecodable.
  const float max = std::numeric_limits<float>::max();
  int refused = 0;
  for (float x = max; x > max / 4; x *= 0.99f) {
    for (float low : {std::numeric_limits<float>::denorm_min(), 1e-20f, 1.0f, x}) {
      std::string coded;
      const absl::Status s = EncodeRun(RowCode::kLog8, {low, x}, &coded);
      if (!s.ok()) {
        EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
        ++refused;
        continue;
      }
      std::vector<float> back(2);
      absl::string_view in = coded;
      ASSERT_TRUE(DecodeRun(RowCode::kLog8, &in, absl::MakeSpan(back)).ok());
      EXPECT_TRUE(std::isfinite(back[1])) << low << ", " << x;
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(QuantizedRowsTest, RefusesWhatItCannotCodeAndLeavesTheOutputAlone) {
  std::string out = "kept";
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeRun(RowCode::kAffine8, {1.0f, NAN}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeRun(RowCode::kAffine8, {1.0f, INFINITY}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeRun(RowCode::kLog8, {1.0f, -0.5f}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeRun(RowCode::kLog8, {1.0f, INFINITY}, &out)));
  // Beyond fp16's range, the affine code's base and step cannot be halves.
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeRun(RowCode::kAffine8, {1.0f, 65505.0f}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeRun(RowCode::kAffine8, {-65520.0f, 0.0f}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeRun(RowCode::kAffine8, {1e6f, 1e6f}, &out)));
  EXPECT_EQ(out, "kept");
  // The log code takes float's whole range.
  EXPECT_TRUE(EncodeRun(RowCode::kLog8, {1e6f, 3e38f}, &out).ok());
}

TEST(QuantizedRowsTest, DecodingRefusesTruncatedOrCorruptRuns) {
  std::string coded;
  ASSERT_TRUE(EncodeRun(RowCode::kAffine8, {1.0f, 2.0f, 3.0f}, &coded).ok());
  ASSERT_EQ(coded.size(), 7u);
  std::vector<float> out(3);
  absl::string_view truncated(coded.data(), coded.size() - 1);
  EXPECT_TRUE(absl::IsDataLoss(DecodeRun(RowCode::kAffine8, &truncated, absl::MakeSpan(out))));
  EXPECT_EQ(truncated.size(), coded.size() - 1) << "nothing consumed";
  auto refused = [&](int at, uint16_t half) {
    std::string corrupt = coded;
    corrupt[at] = static_cast<char>(half & 0xff);
    corrupt[at + 1] = static_cast<char>(half >> 8);
    absl::string_view affine = corrupt, log = corrupt;
    return absl::IsDataLoss(DecodeRun(RowCode::kAffine8, &affine, absl::MakeSpan(out))) &&
           absl::IsDataLoss(DecodeRun(RowCode::kLog8, &log, absl::MakeSpan(out))) && affine.size() == corrupt.size();
  };
  EXPECT_TRUE(refused(0, 0x7e00)) << "base: a NaN";
  EXPECT_TRUE(refused(0, 0xfc00)) << "base: -infinity";
  EXPECT_TRUE(refused(2, 0x7c00)) << "step: infinity";
  EXPECT_TRUE(refused(2, 0x7c01)) << "step: a NaN";
  EXPECT_TRUE(refused(2, 0xbc00)) << "step: -1";
  EXPECT_TRUE(refused(2, 0x8000)) << "step: -0 (never written)";
  // Any finite header decodes Affine8 to finite floats: 65504 + 255 * 65504 fits float.
  std::string largest = coded;
  largest[0] = largest[2] = static_cast<char>(0xff);
  largest[1] = largest[3] = static_cast<char>(0x7b);
  largest[4] = largest[5] = largest[6] = static_cast<char>(255);
  absl::string_view in = largest;
  ASSERT_TRUE(DecodeRun(RowCode::kAffine8, &in, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out[0], 65504.0f * 256);
}

TEST(QuantizedRowsTest, Dim16AdagradRowTakes40BytesAgainst128) {
  // 16 values and 16 accumulators: 2 runs of 16 + 4 bytes against 32 float32s (3.2x fewer, before the key).
  EXPECT_EQ(QuantizedBytes(16), 20u);
  EXPECT_EQ(2 * QuantizedBytes(16), 40u);
  EXPECT_EQ(32u * sizeof(float), 128u);
}

}  // namespace
}  // namespace kestrel
