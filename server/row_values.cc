// RowValues: fp32, bf16 or fp16 row values, rounded once per update (see row_values.h).
#include "server/row_values.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "common/half.h"
#include "common/hash.h"

namespace kestrel {
namespace {

uint16_t ToHalf(ValueType type, float f) {
  if (type == VALUE_TYPE_BFLOAT16) return FloatToBfloat16(f);
  return FloatToHalf(std::clamp(f, -kFloat16Max, kFloat16Max));  // NaN stays NaN
}

float FromHalf(ValueType type, uint16_t h) {
  return type == VALUE_TYPE_BFLOAT16 ? Bfloat16ToFloat(h) : HalfToFloat(h);
}

// `x` rounded stochastically to a half of `type`: the nearest half r, or the neighbour n on x's other side with
// probability |x - r| / |n - r| (which is the probability of the farther of x's two neighbours: unbiased).
// `u` is uniform in [0, 2^32).
uint16_t StochasticHalf(ValueType type, float x, uint32_t u) {
  const uint16_t r = ToHalf(type, x);
  const float d = FromHalf(type, r);
  if (!std::isfinite(x) || !std::isfinite(d) || x == d) return r;
  // Halves order like sign-magnitude integers: the neighbour away from zero is r + 1, toward zero r - 1.
  const uint16_t magnitude = r & 0x7fff;
  const bool away = std::fabs(x) > std::fabs(d);
  if (!away && magnitude == 0) return r;  // (x between -0 and +0 cannot be)
  const uint16_t n = away ? static_cast<uint16_t>(r + 1) : static_cast<uint16_t>(r - 1);
  const float nd = FromHalf(type, n);
  if (!std::isfinite(nd) || (type == VALUE_TYPE_FLOAT16 && std::fabs(nd) > kFloat16Max)) return r;
  const double p = std::fabs(static_cast<double>(x) - d) / std::fabs(static_cast<double>(nd) - d);
  return static_cast<double>(u) < p * 4294967296.0 ? n : r;
}

void PutHalf(float* stored, int i, uint16_t h) {
  std::memcpy(reinterpret_cast<char*>(stored) + 2 * i, &h, sizeof(h));
}

// FloatToBfloat16 over an array, inline so that the compiler vectorizes it (row_values_test checks the bits agree).
void EncodeBfloat16(const float* in, int n, uint16_t* out) {
  for (int i = 0; i < n; ++i) {
    uint32_t x;
    std::memcpy(&x, in + i, sizeof(x));
    const uint32_t nan = (x >> 16) | 0x40;
    const uint32_t rounded = (x + 0x7fff + ((x >> 16) & 1)) >> 16;
    out[i] = static_cast<uint16_t>((x & 0x7fffffff) > 0x7f800000 ? nan : rounded);
  }
}

// fp16 values of n floats (clamped to +-65504): F16C where the CPU has it (the same bits as the scalar code).
void EncodeFloat16(const float* in, int n, uint16_t* out) {
  float clamped[RowValues::kMaxDim];
  for (int i = 0; i < n; ++i) clamped[i] = std::clamp(in[i], -kFloat16Max, kFloat16Max);
  if (half_internal::HasF16c()) {
    half_internal::EncodeFloat16F16c(clamped, n, out);
  } else {
    half_internal::EncodeFloat16Scalar(clamped, n, out);
  }
}

}  // namespace

absl::Status RowValues::Check(const TableConfig& config) {
  const ValueStorage& s = config.storage();
  if (!ValueType_IsValid(s.type())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table '%s': storage.type %d is no ValueType", config.name(), s.type()));
  }
  if (s.type() != VALUE_TYPE_FLOAT32 && config.kind() != TableConfig::SPARSE) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dense table '%s' is stored in fp32: storage.type applies to sparse tables only", config.name()));
  }
  if (s.stochastic_rounding() && s.type() == VALUE_TYPE_FLOAT32) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "table '%s': storage.stochastic_rounding needs a half storage.type (BFLOAT16 or FLOAT16)", config.name()));
  }
  return absl::OkStatus();
}

int RowValues::WordsFor(const TableConfig& config) {
  return config.storage().type() == VALUE_TYPE_FLOAT32 ? config.dim() : (config.dim() + 1) / 2;
}

RowValues::RowValues(const TableConfig& config)
    : dim_(config.dim()),
      words_(WordsFor(config)),
      type_(config.storage().type()),
      stochastic_(config.storage().stochastic_rounding()),
      seed_(Mix64(config.seed() ^ 0x5f0d1e2c3b4a5968ULL)) {}

void RowValues::DecodeFloat16(const float* stored, float* out) const {
  uint16_t halves[kMaxDim];
  std::memcpy(halves, stored, sizeof(uint16_t) * dim_);
  if (half_internal::HasF16c()) {
    half_internal::DecodeFloat16F16c(halves, dim_, out);
  } else {
    half_internal::DecodeFloat16Scalar(halves, dim_, out);
  }
}

void RowValues::Encode(const float* in, float* stored, uint64_t noise) const {
  if (type_ == VALUE_TYPE_FLOAT32) {
    std::memcpy(stored, in, sizeof(float) * dim_);
    return;
  }
  if (dim_ % 2 != 0) stored[words_ - 1] = 0.0f;  // the padding half, before the last value goes in
  if (stochastic_) {
    for (int i = 0; i < dim_; ++i) {
      PutHalf(stored, i, StochasticHalf(type_, in[i], static_cast<uint32_t>(Mix64(noise + i))));
    }
  } else {
    EncodeNearest(in, stored);
  }
}

void RowValues::EncodeNearest(const float* in, float* stored) const {
  uint16_t halves[kMaxDim];
  if (type_ == VALUE_TYPE_BFLOAT16) {
    EncodeBfloat16(in, dim_, halves);
  } else {
    EncodeFloat16(in, dim_, halves);
  }
  std::memcpy(stored, halves, sizeof(uint16_t) * dim_);
}

void RowValues::Round(float* values) const {
  if (type_ == VALUE_TYPE_FLOAT32) return;
  float stored[kMaxDim / 2];
  EncodeNearest(values, stored);
  Decode(stored, values);
}

uint64_t RowValues::Noise(uint64_t key, int64_t clock) const {
  return HashCombine(HashCombine(seed_, key), static_cast<uint64_t>(clock));
}

}  // namespace kestrel
