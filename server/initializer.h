// Initial row values, a pure function of (initializer config, table seed, key, element index).
//
// A row's initial value therefore never depends on which server owns the key or when the row was created:
// resharding, restarts and BSP determinism rely on this. Each element draws from a counter-based generator
// (Mix64 of a per-row base and the element's counter), so no RNG state exists.
//
// Immutable after Create(): thread-safe.
#ifndef KESTREL_SERVER_INITIALIZER_H_
#define KESTREL_SERVER_INITIALIZER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "proto/table.pb.h"

namespace kestrel {

class Initializer {
 public:
  // Validates `config` (e.g. min < max for UNIFORM, stddev > 0; every parameter finite and within +-1e6) and
  // resolves its defaults.
  [[nodiscard]] static absl::StatusOr<Initializer> Create(const InitializerConfig& config, uint64_t seed);

  // Writes the initial value of `key`'s row (dim floats) to `row`.
  void Fill(uint64_t key, float* row, int dim) const;


 private:
  Initializer(InitializerConfig::Type type, uint64_t seed, float a, float b)
      : type_(type), seed_(seed), a_(a), b_(b) {}

  InitializerConfig::Type type_;
  uint64_t seed_;
  float a_;  // UNIFORM: min; NORMAL/TRUNCATED_NORMAL: mean; CONSTANT: value
  float b_;  // UNIFORM: max; NORMAL/TRUNCATED_NORMAL: stddev
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_INITIALIZER_H_
