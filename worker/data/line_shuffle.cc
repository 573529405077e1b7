#include "worker/data/line_shuffle.h"

#include <algorithm>

#include "common/hash.h"

namespace kestrel {

LineShuffle::LineShuffle(uint64_t window, uint64_t seed, int64_t epoch)
    : window_(std::max<uint64_t>(window, 1)), key_(HashCombine(Mix64(seed), static_cast<uint64_t>(epoch))) {}

uint64_t LineShuffle::Position(uint64_t line, uint64_t window_lines) const {
  const uint64_t start = WindowStart(line);
  const uint64_t i = line - start;
  if (window_lines <= 1) return line;
  // Half of the bits of the smallest even power of two >= window_lines (at most 32 each).
  int half = 1;
  while (half < 32 && (uint64_t{1} << (2 * half)) < window_lines) ++half;
  const uint64_t mask = half == 32 ? 0xffffffffULL : (uint64_t{1} << half) - 1;
  constexpr int kRounds = 4;
  std::array<uint64_t, kRounds> round_keys;
  const uint64_t window_key = HashCombine(key_, start / window_);
  for (int r = 0; r < kRounds; ++r) round_keys[r] = HashCombine(window_key, static_cast<uint64_t>(r));
  // A bijection on [0, 2^(2 * half)); walking its cycle from i reaches a value below window_lines (i's cycle
  // returns to i), which makes the walk a bijection on [0, window_lines).
  uint64_t x = i;
  do {
    uint64_t left = x >> half;
    uint64_t right = x & mask;
    for (int r = 0; r < kRounds; ++r) {
      const uint64_t next = left ^ (Mix64(round_keys[r] ^ right) & mask);
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= window_lines);
  return start + x;
}

}  // namespace kestrel
