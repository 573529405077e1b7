// Stable 64-bit hashing. Unlike absl::Hash, these values never change between runs, builds or machines:
// key placement, initial row values and checkpoints depend on them.
#ifndef KESTREL_COMMON_HASH_H_
#define KESTREL_COMMON_HASH_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace kestrel {

// The SplitMix64 finalizer: a bijection on uint64 with good avalanche. Distinct inputs never collide.
constexpr uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// FNV-1a over the bytes, finished with Mix64.
inline uint64_t Hash64(absl::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return Mix64(h);
}

// Order-dependent combination of two hashes.
constexpr uint64_t HashCombine(uint64_t seed, uint64_t v) { return Mix64(seed ^ (v + 0x9e3779b97f4a7c15ULL)); }

}  // namespace kestrel

#endif  // KESTREL_COMMON_HASH_H_
