#include "server/quantized_rows.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kestrel {
namespace {

std::vector<float> RoundTrip(RowCode code, const std::vector<float>& run) {
  std::string coded;
  EXPECT_TRUE(EncodeRun(code, run, &coded).ok());
  EXPECT_EQ(coded.size(), QuantizedBytes(run.size()));
  std::vector<float> back(run.size());
  absl::string_view in = coded;
  EXPECT_TRUE(DecodeRun(code, &in, absl::MakeSpan(back)).ok());
  EXPECT_TRUE(in.empty());
  return back;
}

TEST(QuantizedRowsTest, AffineErrorIsAtMostHalfAStep) {
  constexpr uint32_t kSeed = 7;
  std::mt19937 rng(kSeed);
  std::normal_distribution<float> value(0.0f, 0.05f);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> run(16);
    for (float& x : run) x = value(rng);
    const std::vector<float> back = RoundTrip(RowCode::kAffine8, run);
    const auto [mn, mx] = std::minmax_element(run.begin(), run.end());
    const double half_step = (double{*mx} - *mn) / 255 / 2;
    for (size_t i = 0; i < run.size(); ++i) {
      ASSERT_LE(std::abs(double{back[i]} - run[i]), half_step * 1.001 + 1e-9)
          << "seed=" << kSeed << " (fixed in the test) trial " << trial << " float " << i;
    }
    EXPECT_EQ(back[mn - run.begin()], *mn) << "the minimum is exact";
  }
}

TEST(QuantizedRowsTest, ConstantAndEmptyRunsAreExact) {
  EXPECT_EQ(RoundTrip(RowCode::kAffine8, {0.25f, 0.25f, 0.25f}), (std::vector<float>{0.25f, 0.25f, 0.25f}));
  EXPECT_EQ(RoundTrip(RowCode::kLog8, {0.1f, 0.1f}), (std::vector<float>{0.1f, 0.1f}));
  EXPECT_TRUE(RoundTrip(RowCode::kAffine8, {}).empty());
}

TEST(QuantizedRowsTest, LogKeepsZerosExactAndRelativeErrorSmall) {
  // Adagrad accumulators: zero, the initial value, and sums of squared gradients over decades.
  const std::vector<float> run = {0.0f, 0.1f, 0.1003f, 1.5f, 37.0f, 2048.5f, 1e-6f, 0.0f};
  const std::vector<float> back = RoundTrip(RowCode::kLog8, run);
  const double step = (std::log2(2048.5) - std::log2(1e-6)) / 254;
  for (size_t i = 0; i < run.size(); ++i) {
    if (run[i] == 0) {
      EXPECT_EQ(back[i], 0.0f);
    } else {
      EXPECT_LE(std::abs(back[i] / run[i] - 1), std::exp2(step / 2) - 1 + 1e-6) << "float " << i;
    }
  }
}

TEST(QuantizedRowsTest, RefusesWhatItCannotCodeAndLeavesTheOutputAlone) {
  std::string out = "kept";
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeRun(RowCode::kAffine8, {1.0f, NAN}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeRun(RowCode::kAffine8, {1.0f, INFINITY}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeRun(RowCode::kLog8, {1.0f, -0.5f}, &out)));
  EXPECT_EQ(out, "kept");
}

TEST(QuantizedRowsTest, DecodingRefusesTruncatedOrCorruptRuns) {
  std::string coded;
  ASSERT_TRUE(EncodeRun(RowCode::kAffine8, {1.0f, 2.0f, 3.0f}, &coded).ok());
  std::vector<float> out(3);
  absl::string_view truncated(coded.data(), coded.size() - 1);
  EXPECT_TRUE(absl::IsDataLoss(DecodeRun(RowCode::kAffine8, &truncated, absl::MakeSpan(out))));
  std::string corrupt = coded;
  corrupt[4] = corrupt[5] = corrupt[6] = static_cast<char>(0xff);  // step: a NaN
  corrupt[7] = static_cast<char>(0x7f);
  absl::string_view in = corrupt;
  EXPECT_TRUE(absl::IsDataLoss(DecodeRun(RowCode::kAffine8, &in, absl::MakeSpan(out))));
}

TEST(QuantizedRowsTest, Dim16AdagradRowTakes48BytesAgainst128) {
  // 16 values and 16 accumulators: 2 runs of 16 + 8 bytes against 32 float32s (2.67x fewer, before the key).
  EXPECT_EQ(2 * QuantizedBytes(16), 48u);
  EXPECT_EQ(32u * sizeof(float), 128u);
}

}  // namespace
}  // namespace kestrel
