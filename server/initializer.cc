#include "server/initializer.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "common/counter_random.h"
#include "common/hash.h"

namespace kestrel {
namespace {

// TRUNCATED_NORMAL re-draws an element at most this many times (P[all fail] = 0.0455^64, never in practice)
// and then clamps, so Fill always terminates.
constexpr int kMaxTruncatedDraws = 64;
// Initializer parameters beyond this magnitude are configuration mistakes (and NORMAL draws of them could
// overflow float).
constexpr float kMaxMagnitude = 1e6f;

bool InRange(float v) { return std::isfinite(v) && std::abs(v) <= kMaxMagnitude; }

}  // namespace

absl::StatusOr<Initializer> Initializer::Create(const InitializerConfig& config, uint64_t seed) {
  switch (config.type()) {
    case InitializerConfig::ZEROS:
      return Initializer(config.type(), seed, 0, 0);
    case InitializerConfig::CONSTANT:
      if (!InRange(config.value())) {
        return absl::InvalidArgumentError(
            absl::StrFormat("initializer value must be finite with |value| <= %g", kMaxMagnitude));
      }
      return Initializer(config.type(), seed, config.value(), 0);
    case InitializerConfig::UNIFORM: {
      float lo = config.min(), hi = config.max();
      if (lo == 0 && hi == 0) lo = -0.01f, hi = 0.01f;
      if (!(lo < hi) || !InRange(lo) || !InRange(hi)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "uniform initializer needs min < max, both within +-%g, got [%g, %g)", kMaxMagnitude, lo, hi));
      }
      return Initializer(config.type(), seed, lo, hi);
    }
    case InitializerConfig::NORMAL:
    case InitializerConfig::TRUNCATED_NORMAL: {
      float stddev = config.stddev() == 0 ? 0.01f : config.stddev();
      if (!(stddev > 0) || !InRange(stddev) || !InRange(config.mean())) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "normal initializer needs 0 < stddev <= %g and |mean| <= %g, got mean %g stddev %g", kMaxMagnitude,
            kMaxMagnitude, config.mean(), stddev));
      }
      return Initializer(config.type(), seed, config.mean(), stddev);
    }
    default:
      return absl::InvalidArgumentError(absl::StrFormat("unknown initializer type %d", config.type()));
  }
}

void Initializer::Fill(uint64_t key, float* row, int dim) const {
  const uint64_t base = HashCombine(Mix64(seed_), key);
  switch (type_) {
    case InitializerConfig::UNIFORM:
      for (int j = 0; j < dim; ++j) {
        // Rounding to float can land on max; keep the interval half-open.
        const float v = static_cast<float>(a_ + (b_ - a_) * CounterUniform01(base, j));
        row[j] = v < b_ ? v : std::nextafter(b_, a_);
      }
      return;
    case InitializerConfig::NORMAL:
      for (int j = 0; j < dim; ++j) row[j] = static_cast<float>(a_ + b_ * CounterNormal(base, j));
      return;
    case InitializerConfig::TRUNCATED_NORMAL:
      for (int j = 0; j < dim; ++j) {
        double z = 2.0;
        for (int attempt = 0; attempt < kMaxTruncatedDraws; ++attempt) {
          const double draw = CounterNormal(base, static_cast<uint64_t>(j) * kMaxTruncatedDraws + attempt);
          if (std::abs(draw) <= 2.0) {
            z = draw;
            break;
          }
        }
        row[j] = static_cast<float>(a_ + b_ * z);
      }
      return;
    case InitializerConfig::CONSTANT:
      for (int j = 0; j < dim; ++j) row[j] = a_;
      return;
    default:  // ZEROS
      for (int j = 0; j < dim; ++j) row[j] = 0.0f;
      return;
  }
}

}  // namespace kestrel
