#include "server/checkpoint_row_codec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/test_seed.h"
#include "gtest/gtest.h"
#include "proto/table.pb.h"
#include "server/bounded_policy.h"
#include "common/optimizer.h"
#include "server/row_values.h"

namespace kestrel {
namespace {

using Kind = Optimizer::SlotRun::Kind;

TableConfig Config(OptimizerConfig::Type optimizer, int dim, CheckpointCodec codec = CHECKPOINT_Q8,
                   ValueType storage = VALUE_TYPE_FLOAT32, bool bounded = false) {
  TableConfig c;
  c.set_name("emb");
  c.set_dim(dim);
  c.set_seed(3);
  c.mutable_optimizer()->set_type(optimizer);
  c.set_checkpoint_codec(codec);
  if (storage != VALUE_TYPE_FLOAT32) c.mutable_storage()->set_type(storage);
  if (bounded) c.mutable_capacity()->set_ttl_clocks(100);
  return c;
}

CheckpointRowCodec MustCreate(const TableConfig& config) {
  absl::StatusOr<CheckpointRowCodec> codec = CheckpointRowCodec::Create(config);
  EXPECT_TRUE(codec.ok()) << codec.status();
  return *std::move(codec);
}

std::unique_ptr<Optimizer> MustCreateOptimizer(const TableConfig& config) {
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = Optimizer::Create(config.optimizer(), config.dim());
  EXPECT_TRUE(optimizer.ok()) << optimizer.status();
  return *std::move(optimizer);
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

// A stored row as a table would hold it: initial values, then `pushes` random gradients applied by the optimizer
// (values rounded to the storage after each), then random meta for a bounded table.
std::vector<float> MakeRow(const TableConfig& config, std::mt19937* rng, int pushes = 12) {
  const RowValues values(config);
  const std::unique_ptr<Optimizer> optimizer = MustCreateOptimizer(config);
  const int dim = config.dim();
  std::normal_distribution<float> init(0.0f, 0.05f), grad(0.0f, 0.1f);
  std::vector<float> w(dim), g(dim), slots(optimizer->slot_floats());
  for (float& x : w) x = init(*rng);
  values.Round(w.data());
  optimizer->InitSlots(w.data(), slots.data());
  for (int p = 0; p < pushes; ++p) {
    for (int j = 0; j < dim; ++j) g[j] = (*rng)() % 4 == 0 ? 0.0f : grad(*rng);  // some never pushed
    optimizer->Apply(g.data(), w.data(), slots.data());
    values.Round(w.data());
  }
  std::vector<float> row(values.words());
  values.Encode(w.data(), row.data(), 0);
  row.insert(row.end(), slots.begin(), slots.end());
  if (config.has_capacity()) {
    for (int i = 0; i < BoundedPolicy::kMetaFloats; ++i) row.push_back(FromBits(static_cast<uint32_t>((*rng)())));
  }
  return row;
}

void ExpectBitwiseEqual(absl::Span<const float> a, absl::Span<const float> b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(Bits(a[i]), Bits(b[i])) << "word " << i;
}

// quantized_rows.h's bound on the fp16 step of a run (log2 domain for kLog8) in [low, high] with `top` levels: the
// ideal (high - low) / top, widened by fp16's rounding of the base down and the step up.
double StepBound(double low, double high, int top) {
  return ((high - low) + std::abs(low) / 1024 + std::exp2(-24)) / top * (1 + 1.0 / 1024) + std::exp2(-24);
}

// Checks `back` against `row` within the Q8 codes' bounds (checkpoint_row_codec.h, quantized_rows.h).
void ExpectWithinQ8Bounds(const TableConfig& config, absl::Span<const float> row, absl::Span<const float> back) {
  ASSERT_EQ(row.size(), back.size());
  const RowValues values(config);
  const std::unique_ptr<Optimizer> optimizer = MustCreateOptimizer(config);
  const int dim = config.dim();
  // Values.
  if (dim <= 2) {
    ExpectBitwiseEqual(row.subspan(0, values.words()), back.subspan(0, values.words()));
  } else {
    std::vector<float> a(dim), b(dim);
    values.Decode(row.data(), a.data());
    values.Decode(back.data(), b.data());
    const auto [mn, mx] = std::minmax_element(a.begin(), a.end());
    const double rounding = values.type() == VALUE_TYPE_BFLOAT16  ? 1.0 / 256
                            : values.type() == VALUE_TYPE_FLOAT16 ? 1.0 / 2048
                                                                  : 2e-7;
    for (int j = 0; j < dim; ++j) {
      EXPECT_LE(std::abs(double{b[j]} - a[j]), StepBound(*mn, *mx, 255) / 2 + std::abs(b[j]) * rounding + 6e-8)
          << "value " << j;
    }
    if (values.compact() && dim % 2 == 1) { EXPECT_EQ(Bits(back[values.words() - 1]) >> 16, 0u) << "padding"; }
  }
  // Slots, run by run.
  size_t at = values.words();
  for (const Optimizer::SlotRun& run : optimizer->slot_runs()) {
    const absl::Span<const float> a = row.subspan(at, run.floats), b = back.subspan(at, run.floats);
    at += run.floats;
    if (run.kind == Optimizer::SlotRun::kBits || run.floats <= 2) {
      ExpectBitwiseEqual(a, b);
      continue;
    }
    if (run.kind == Optimizer::SlotRun::kSigned) {
      const auto [mn, mx] = std::minmax_element(a.begin(), a.end());
      for (size_t j = 0; j < a.size(); ++j) {
        EXPECT_LE(std::abs(double{b[j]} - a[j]), StepBound(*mn, *mx, 255) / 2 + std::abs(a[j]) * 2e-7 + 1e-30)
            << "signed slot " << j;
      }
    } else {
      double lo = INFINITY, hi = -INFINITY;
      for (float x : a) {
        if (x > 0) lo = std::min(lo, std::log2(double{x})), hi = std::max(hi, std::log2(double{x}));
      }
      const double relative = std::isfinite(lo) ? std::exp2(StepBound(lo, hi, 254) / 2) - 1 + 1e-6 : 0;
      for (size_t j = 0; j < a.size(); ++j) {
        if (a[j] == 0) {
          EXPECT_EQ(b[j], 0.0f) << "zeros stay exact";
        } else {
          EXPECT_LE(std::abs(double{b[j]} / a[j] - 1), relative) << "non-negative slot " << j;
        }
      }
    }
  }
  // Meta.
  ExpectBitwiseEqual(row.subspan(at), back.subspan(at));
}

// Encodes `row`, expects a Q8 record of q8_bytes(), decodes it and checks the bounds.
void ExpectQ8RoundTrip(const TableConfig& config, const std::vector<float>& row) {
  const CheckpointRowCodec codec = MustCreate(config);
  ASSERT_EQ(row.size(), static_cast<size_t>(codec.stored_floats()));
  std::string record;
  codec.Encode(row, &record);
  ASSERT_EQ(record.size(), codec.q8_bytes());
  EXPECT_TRUE(CheckpointRowCodec::IsQ8(record));
  std::vector<float> back;
  ASSERT_TRUE(codec.Decode(record, &back).ok());
  ExpectWithinQ8Bounds(config, row, back);
}

TEST(CheckpointRowCodecTest, SlotRunsAddUpToTheSlotsAndSayWhatTheyHold) {
  using T = OptimizerConfig;
  for (T::Type type : {T::SGD, T::ADAGRAD, T::ADAM, T::FTRL, T::ASSIGN, T::ROWWISE_ADAGRAD}) {
    for (int dim : {1, 2, 3, 16, 4096}) {
      const std::unique_ptr<Optimizer> optimizer = MustCreateOptimizer(Config(type, dim));
      int floats = 0;
      for (const Optimizer::SlotRun& run : optimizer->slot_runs()) floats += run.floats;
      EXPECT_EQ(floats, optimizer->slot_floats()) << T::Type_Name(type) << " dim " << dim;
    }
  }
  auto kinds = [](T::Type type) {
    std::vector<std::pair<int, Kind>> out;
    for (const Optimizer::SlotRun& run : MustCreateOptimizer(Config(type, 5))->slot_runs()) {
      out.emplace_back(run.floats, run.kind);
    }
    return out;
  };
  using K = Optimizer::SlotRun;
  EXPECT_TRUE(kinds(T::SGD).empty());
  EXPECT_TRUE(kinds(T::ASSIGN).empty());
  EXPECT_EQ(kinds(T::ADAGRAD), (std::vector<std::pair<int, Kind>>{{5, K::kNonNegative}}));
  EXPECT_EQ(kinds(T::ROWWISE_ADAGRAD), (std::vector<std::pair<int, Kind>>{{1, K::kNonNegative}}));
  EXPECT_EQ(kinds(T::ADAM), (std::vector<std::pair<int, Kind>>{{5, K::kSigned}, {5, K::kNonNegative}, {1, K::kBits}}));
  EXPECT_EQ(kinds(T::FTRL), (std::vector<std::pair<int, Kind>>{{5, K::kSigned}, {5, K::kNonNegative}}));
}

TEST(CheckpointRowCodecTest, Fp32RecordsAreTheRowBitwise) {
  std::mt19937 rng(11);
  using T = OptimizerConfig;
  for (T::Type type : {T::SGD, T::ADAGRAD, T::ADAM, T::FTRL, T::ROWWISE_ADAGRAD}) {
    for (ValueType storage : {VALUE_TYPE_FLOAT32, VALUE_TYPE_BFLOAT16}) {
      const TableConfig config = Config(type, 7, CHECKPOINT_FP32, storage, /*bounded=*/true);
      const CheckpointRowCodec codec = MustCreate(config);
      std::vector<float> row = MakeRow(config, &rng);
      row[1] = NAN;  // anything goes: the record is the bits
      row.back() = FromBits(0xffffffffu);
      std::string record;
      codec.Encode(row, &record);
      ASSERT_EQ(record, std::string(reinterpret_cast<const char*>(row.data()), sizeof(float) * row.size()));
      EXPECT_EQ(record.size(), codec.raw_bytes());
      EXPECT_EQ(codec.max_encoded_bytes(), codec.raw_bytes());
      EXPECT_FALSE(CheckpointRowCodec::IsQ8(record));
      std::vector<float> back;
      ASSERT_TRUE(codec.Decode(record, &back).ok());
      ExpectBitwiseEqual(row, back);
    }
  }
}

TEST(CheckpointRowCodecTest, StoredFloatsAreTheTables) {
  const TableConfig config = Config(OptimizerConfig::ADAM, 9, CHECKPOINT_Q8, VALUE_TYPE_FLOAT16, true);
  EXPECT_EQ(MustCreate(config).stored_floats(), 5 + 19 + BoundedPolicy::kMetaFloats);
  EXPECT_EQ(MustCreate(Config(OptimizerConfig::SGD, 16)).stored_floats(), 16);
}

TEST(CheckpointRowCodecTest, Q8RoundTripsEveryOptimizerWithinTheCodesBounds) {
  constexpr uint32_t kSeed = 5;
  std::mt19937 rng(kSeed);
  using T = OptimizerConfig;
  for (T::Type type : {T::SGD, T::ADAGRAD, T::ADAM, T::FTRL, T::ROWWISE_ADAGRAD, T::ASSIGN}) {
    for (int dim : {1, 2, 3, 16, 61}) {
      for (bool bounded : {false, true}) {
        const TableConfig config = Config(type, dim, CHECKPOINT_Q8, VALUE_TYPE_FLOAT32, bounded);
        for (int trial = 0; trial < 20; ++trial) {
          SCOPED_TRACE(testing::Message() << T::Type_Name(type) << " dim " << dim << " bounded " << bounded
                                          << " trial " << trial << " seed " << kSeed << " (fixed)");
          ExpectQ8RoundTrip(config, MakeRow(config, &rng, trial));
        }
      }
    }
  }
}

TEST(CheckpointRowCodecTest, Q8AdagradAccumulatorsKeepTheirRatiosAndRowwiseStaysExact) {
  const TableConfig config = Config(OptimizerConfig::ADAGRAD, 4);
  // Initial accumulators (0.1), a zero, and sums over decades.
  const std::vector<float> row = {0.01f, -0.02f, 0.5f, 0.0f, 0.1f, 0.0f, 37.5f, 1e-5f};
  ExpectQ8RoundTrip(config, row);
  const TableConfig rowwise = Config(OptimizerConfig::ROWWISE_ADAGRAD, 4);
  const std::vector<float> rowwise_row = {0.01f, -0.02f, 0.5f, 0.0f, 0.123456f};
  const CheckpointRowCodec codec = MustCreate(rowwise);
  std::string record;
  codec.Encode(rowwise_row, &record);
  std::vector<float> back;
  ASSERT_TRUE(codec.Decode(record, &back).ok());
  EXPECT_EQ(Bits(back[4]), Bits(0.123456f)) << "a run of one float is kept raw";
}

TEST(CheckpointRowCodecTest, Q8CompactStorageDecodesToStorableValues) {
  std::mt19937 rng(17);
  for (ValueType storage : {VALUE_TYPE_BFLOAT16, VALUE_TYPE_FLOAT16}) {
    for (int dim : {2, 3, 16, 17}) {
      for (bool stochastic : {false, true}) {
        TableConfig config = Config(OptimizerConfig::ADAGRAD, dim, CHECKPOINT_Q8, storage, /*bounded=*/true);
        config.mutable_storage()->set_stochastic_rounding(stochastic);
        for (int trial = 0; trial < 10; ++trial) {
          SCOPED_TRACE(testing::Message() << ValueType_Name(storage) << " dim " << dim << " stochastic "
                                          << stochastic << " trial " << trial);
          ExpectQ8RoundTrip(config, MakeRow(config, &rng));
        }
      }
    }
  }
}

TEST(CheckpointRowCodecTest, BoundedMetaIsKeptBitwise) {
  const TableConfig config = Config(OptimizerConfig::ADAM, 16, CHECKPOINT_Q8, VALUE_TYPE_FLOAT32, true);
  std::mt19937 rng(23);
  std::vector<float> row = MakeRow(config, &rng);
  // Meta words are uint32s: any bits, NaN patterns included.
  for (uint32_t clock : {0u, 7u, 0x7fc00001u, 0xffffffffu}) {
    row[row.size() - 2] = FromBits(clock);
    row[row.size() - 1] = FromBits(~clock);
    const CheckpointRowCodec codec = MustCreate(config);
    std::string record;
    codec.Encode(row, &record);
    ASSERT_EQ(record.size(), codec.q8_bytes()) << "meta never makes a row fall back";
    std::vector<float> back;
    ASSERT_TRUE(codec.Decode(record, &back).ok());
    EXPECT_EQ(Bits(back[back.size() - 2]), clock);
    EXPECT_EQ(Bits(back[back.size() - 1]), ~clock);
    EXPECT_EQ(Bits(back[16 + 32]), Bits(row[16 + 32])) << "Adam's step count is kept";
  }
}

TEST(CheckpointRowCodecTest, Q8RecordSizes) {
  struct Case {
    TableConfig config;
    size_t raw, q8;
  };
  using T = OptimizerConfig;
  const Case cases[] = {
      {Config(T::ADAGRAD, 16), 128, 1 + 20 + 20},
      {Config(T::ADAGRAD, 32), 256, 1 + 36 + 36},
      {Config(T::ADAGRAD, 64), 512, 1 + 68 + 68},
      {Config(T::ADAGRAD, 16, CHECKPOINT_Q8, VALUE_TYPE_FLOAT32, true), 136, 1 + 20 + 20 + 8},
      {Config(T::ADAGRAD, 16, CHECKPOINT_Q8, VALUE_TYPE_BFLOAT16), 96, 1 + 20 + 20},
      {Config(T::ROWWISE_ADAGRAD, 16), 68, 1 + 20 + 4},
      {Config(T::ADAM, 16), 196, 1 + 20 + 20 + 20 + 4},
      {Config(T::FTRL, 16), 128 + 64, 1 + 20 + 20 + 20},
      {Config(T::SGD, 16), 64, 1 + 20},
      {Config(T::SGD, 3), 12, 2 + 7},  // 1 + 7 would be a multiple of 4: a zero byte after the tag
      {Config(T::ADAGRAD, 2), 16, 1 + 16},  // dim 2: runs of 2 floats stay raw
      {Config(T::FTRL, 1), 12, 1 + 12},  // dim 1: everything raw
  };
  for (const Case& c : cases) {
    const CheckpointRowCodec codec = MustCreate(c.config);
    EXPECT_EQ(codec.raw_bytes(), c.raw) << c.config.ShortDebugString();
    EXPECT_EQ(codec.q8_bytes(), c.q8) << c.config.ShortDebugString();
    EXPECT_EQ(codec.max_encoded_bytes(), std::max(c.raw, c.q8));
  }
  // The dim-16 Adagrad row of the proto's comment: at most 42 bytes, at least 3x smaller than fp32 (its 128 bytes),
  // and so from dim 16 up; dim-16 Adam too.
  EXPECT_LE(MustCreate(Config(T::ADAGRAD, 16)).q8_bytes(), 42u);
  for (int dim : {16, 17, 24, 32, 64, 128, 1024, 4096}) {
    EXPECT_GE(8.0 * dim / MustCreate(Config(T::ADAGRAD, dim)).q8_bytes(), 3.0) << "dim " << dim;
  }
  EXPECT_GE(196.0 / MustCreate(Config(T::ADAM, 16)).q8_bytes(), 3.0);
}

TEST(CheckpointRowCodecTest, Q8LengthsAreNeverMultiplesOfFourAndDecodeAnyway) {
  std::mt19937 rng(29);
  using T = OptimizerConfig;
  for (T::Type type : {T::SGD, T::ADAGRAD, T::ADAM, T::FTRL, T::ROWWISE_ADAGRAD}) {
    for (int dim = 1; dim <= 40; ++dim) {
      for (ValueType storage : {VALUE_TYPE_FLOAT32, VALUE_TYPE_BFLOAT16}) {
        for (bool bounded : {false, true}) {
          const TableConfig config = Config(type, dim, CHECKPOINT_Q8, storage, bounded);
          SCOPED_TRACE(config.ShortDebugString());
          const CheckpointRowCodec codec = MustCreate(config);
          EXPECT_NE(codec.q8_bytes() % 4, 0u);
          ExpectQ8RoundTrip(config, MakeRow(config, &rng, 3));
        }
      }
    }
  }
}

TEST(CheckpointRowCodecTest, RowsQ8CannotCodeAreWrittenRaw) {
  const TableConfig config = Config(OptimizerConfig::ADAGRAD, 16);
  const CheckpointRowCodec codec = MustCreate(config);
  std::mt19937 rng(31);
  const std::vector<float> good = MakeRow(config, &rng);
  for (int at : {3, 16 + 5}) {
    for (float bad : {NAN, INFINITY, -INFINITY, -1.0f}) {
      if (bad == -1.0f && at < 16) continue;  // a negative value is fine; a negative accumulator is not
      std::vector<float> row = good;
      row[at] = bad;
      std::string record;
      codec.Encode(row, &record);
      ASSERT_EQ(record.size(), codec.raw_bytes()) << "word " << at << " = " << bad;
      EXPECT_FALSE(CheckpointRowCodec::IsQ8(record));
      std::vector<float> back;
      ASSERT_TRUE(codec.Decode(record, &back).ok());
      ExpectBitwiseEqual(row, back);
    }
  }
  // A value beyond fp16's range cannot be coded affinely: raw. An accumulator there can (log domain).
  std::vector<float> row = good;
  row[3] = 70000.0f;
  std::string wide;
  codec.Encode(row, &wide);
  EXPECT_EQ(wide.size(), codec.raw_bytes());
  row = good;
  row[16 + 5] = 70000.0f;
  codec.Encode(row, &wide);
  EXPECT_EQ(wide.size(), codec.q8_bytes());
  // A row of the wrong width is written raw, and refused when read.
  std::string record;
  codec.Encode(absl::MakeConstSpan(good).subspan(1), &record);
  EXPECT_EQ(record.size(), codec.raw_bytes() - 4);
  std::vector<float> back;
  EXPECT_TRUE(absl::IsDataLoss(codec.Decode(record, &back)));
}

TEST(CheckpointRowCodecTest, EitherCodecReadsEitherRecord) {
  std::mt19937 rng(37);
  const TableConfig q8 = Config(OptimizerConfig::FTRL, 16, CHECKPOINT_Q8, VALUE_TYPE_BFLOAT16, true);
  TableConfig fp32 = q8;
  fp32.set_checkpoint_codec(CHECKPOINT_FP32);
  const std::vector<float> row = MakeRow(q8, &rng);
  std::string q8_record, raw_record;
  MustCreate(q8).Encode(row, &q8_record);
  MustCreate(fp32).Encode(row, &raw_record);
  std::vector<float> a, b;
  ASSERT_TRUE(MustCreate(fp32).Decode(q8_record, &a).ok());
  ASSERT_TRUE(MustCreate(q8).Decode(q8_record, &b).ok());
  ExpectBitwiseEqual(a, b);
  ExpectWithinQ8Bounds(q8, row, a);
  ASSERT_TRUE(MustCreate(q8).Decode(raw_record, &a).ok());
  ExpectBitwiseEqual(row, a);
}

TEST(CheckpointRowCodecTest, DecodeRefusesTruncatedAndCorruptRecords) {
  std::mt19937 rng(41);
  const TableConfig config = Config(OptimizerConfig::ADAM, 16, CHECKPOINT_Q8, VALUE_TYPE_FLOAT32, true);
  const CheckpointRowCodec codec = MustCreate(config);
  const std::vector<float> row = MakeRow(config, &rng);
  std::string record, raw(reinterpret_cast<const char*>(row.data()), sizeof(float) * row.size());
  codec.Encode(row, &record);
  ASSERT_EQ(record.size(), codec.q8_bytes());
  std::vector<float> back;
  for (size_t n = 0; n < raw.size() + 9; ++n) {
    if (n == codec.q8_bytes() || n == codec.raw_bytes()) continue;
    const std::string& source = n <= record.size() ? record : raw;
    EXPECT_TRUE(absl::IsDataLoss(codec.Decode(source.substr(0, std::min(n, source.size())) +
                                                  std::string(n - std::min(n, source.size()), '\0'),
                                              &back)))
        << n << " bytes";
  }
  std::string bad_tag = record;
  bad_tag[0] = 'R';
  EXPECT_TRUE(absl::IsDataLoss(codec.Decode(bad_tag, &back)));
  // Run headers: fp16 base then step, little-endian (quantized_rows.h). Runs of 16: 20 bytes each.
  auto with_half = [&](size_t at, uint16_t half) {
    std::string bytes = record;
    bytes[at] = static_cast<char>(half & 0xff);
    bytes[at + 1] = static_cast<char>(half >> 8);
    return bytes;
  };
  EXPECT_TRUE(absl::IsDataLoss(codec.Decode(with_half(1 + 2, 0x7e00), &back))) << "the values' step: a NaN";
  EXPECT_TRUE(absl::IsDataLoss(codec.Decode(with_half(1 + 2, 0xbc00), &back))) << "the values' step: -1";
  EXPECT_TRUE(absl::IsDataLoss(codec.Decode(with_half(1, 0x7c00), &back))) << "the values' base: infinity";
  EXPECT_TRUE(absl::IsDataLoss(codec.Decode(with_half(1 + 20, 0xfc00), &back))) << "the first moment's base: -inf";
  // The second moment's base: 2^200 (fp16 200.0 is 0x5a40), past float's range.
  EXPECT_TRUE(absl::IsDataLoss(codec.Decode(with_half(1 + 20 + 20, 0x5a40), &back)));
  // The largest finite header decodes the affine values to finite floats (65504 * 256), so it is accepted.
  EXPECT_TRUE(codec.Decode(with_half(1 + 2, 0x7bff), &back).ok());
  // The zero byte after the tag, where there is one.
  const CheckpointRowCodec padded = MustCreate(Config(OptimizerConfig::SGD, 3));
  std::string small;
  padded.Encode(std::vector<float>{1.0f, 2.0f, 3.0f}, &small);
  ASSERT_EQ(small.size(), 9u);
  EXPECT_EQ(small[1], '\0');
  ASSERT_TRUE(padded.Decode(small, &back).ok());
  small[1] = 1;
  EXPECT_TRUE(absl::IsDataLoss(padded.Decode(small, &back)));
  // A span of the wrong width is the caller's error.
  std::vector<float> narrow(3);
  EXPECT_TRUE(absl::IsInvalidArgument(codec.Decode(record, absl::MakeSpan(narrow))));
}

// Random bytes of every length up to past the raw record, and valid records with random bytes changed: Decode
// answers OK or DataLoss, never crashes, and the coded values it accepts are finite.
TEST(CheckpointRowCodecTest, HostileBytesAreRefusedOrDecodedSafely) {
  const TestSeed seed;  // replay: KESTREL_TEST_SEED
  std::mt19937 rng(static_cast<uint32_t>(seed.value()));
  using T = OptimizerConfig;
  for (T::Type type : {T::ADAGRAD, T::ADAM, T::FTRL}) {
    for (ValueType storage : {VALUE_TYPE_FLOAT32, VALUE_TYPE_FLOAT16}) {
      const int dim = 1 + static_cast<int>(rng() % 24);
      const bool bounded = rng() % 2 == 0;
      const TableConfig config = Config(type, dim, CHECKPOINT_Q8, storage, bounded);
      SCOPED_TRACE(config.ShortDebugString());
      const CheckpointRowCodec codec = MustCreate(config);
      std::vector<float> back;
      auto check = [&](const std::string& bytes) {
        const absl::Status s = codec.Decode(bytes, &back);
        ASSERT_TRUE(s.ok() || absl::IsDataLoss(s)) << s;
        if (s.ok() && CheckpointRowCodec::IsQ8(bytes) && config.dim() > 2) {  // coded values (else raw: any bits)
          const RowValues values(config);
          std::vector<float> v(config.dim());
          values.Decode(back.data(), v.data());
          for (float x : v) ASSERT_TRUE(std::isfinite(x));
        }
      };
      for (size_t n = 0; n <= codec.raw_bytes() + 8; ++n) {
        for (int trial = 0; trial < 8; ++trial) {
          std::string bytes(n, '\0');
          for (char& c : bytes) c = static_cast<char>(rng());
          if (n > 0 && trial % 2 == 0) bytes[0] = 'Q';
          check(bytes);
        }
      }
      std::string record;
      for (int trial = 0; trial < 500; ++trial) {
        codec.Encode(MakeRow(config, &rng, 4), &record);
        for (int flips = 1 + rng() % 4; flips > 0; --flips) record[rng() % record.size()] = static_cast<char>(rng());
        check(record);
      }
    }
  }
}

TEST(CheckpointRowCodecTest, CreateRefusesBadConfigs) {
  TableConfig dense = Config(OptimizerConfig::ADAM, 16);
  dense.set_kind(TableConfig::DENSE);
  dense.set_dense_size(100);
  EXPECT_TRUE(absl::IsInvalidArgument(CheckCheckpointCodec(dense)));
  EXPECT_TRUE(absl::IsInvalidArgument(CheckpointRowCodec::Create(dense).status()));
  dense.set_checkpoint_codec(CHECKPOINT_FP32);
  EXPECT_TRUE(CheckCheckpointCodec(dense).ok());
  EXPECT_TRUE(CheckpointRowCodec::Create(dense).ok());

  TableConfig unknown = Config(OptimizerConfig::ADAGRAD, 16);
  unknown.set_checkpoint_codec(static_cast<CheckpointCodec>(7));
  EXPECT_TRUE(absl::IsInvalidArgument(CheckCheckpointCodec(unknown)));
  EXPECT_TRUE(absl::IsInvalidArgument(CheckpointRowCodec::Create(unknown).status()));
  EXPECT_TRUE(CheckCheckpointCodec(Config(OptimizerConfig::ADAGRAD, 16)).ok());

  for (int dim : {0, -1, RowValues::kMaxDim + 1}) {
    EXPECT_TRUE(absl::IsInvalidArgument(CheckpointRowCodec::Create(Config(OptimizerConfig::SGD, dim)).status()));
  }
  TableConfig bad_lr = Config(OptimizerConfig::ADAGRAD, 16);
  bad_lr.mutable_optimizer()->set_learning_rate(-1);
  EXPECT_TRUE(absl::IsInvalidArgument(CheckpointRowCodec::Create(bad_lr).status()));
  TableConfig bad_storage = Config(OptimizerConfig::ADAGRAD, 16);
  bad_storage.mutable_storage()->set_type(static_cast<ValueType>(9));
  EXPECT_TRUE(absl::IsInvalidArgument(CheckpointRowCodec::Create(bad_storage).status()));
}

}  // namespace
}  // namespace kestrel
