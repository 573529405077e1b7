// Counter-based random draws: draw number `counter` of stream `base` is a pure function of the two, so
// anything built on them (initial row values, generated data) is reproducible in any order and on any
// machine. Thread-safe.
#ifndef KESTREL_COMMON_COUNTER_RANDOM_H_
#define KESTREL_COMMON_COUNTER_RANDOM_H_

#include <cmath>
#include <cstdint>

#include "common/hash.h"

namespace kestrel {

// Uniform in [0, 1) with 53 random bits.
inline double CounterUniform01(uint64_t base, uint64_t counter) {
  return static_cast<double>(Mix64(base + counter * 0x9e3779b97f4a7c15ULL) >> 11) / 9007199254740992.0;
}

// Standard normal (Box-Muller on draws 2 * counter and 2 * counter + 1).
inline double CounterNormal(uint64_t base, uint64_t counter) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  const double u1 = 1.0 - CounterUniform01(base, 2 * counter);  // (0, 1]: log is finite
  const double u2 = CounterUniform01(base, 2 * counter + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

}  // namespace kestrel

#endif  // KESTREL_COMMON_COUNTER_RANDOM_H_
