// What a gradient may be: the one check shared by clients (before sending) and servers (before applying).
#ifndef KESTREL_COMMON_GRADIENTS_H_
#define KESTREL_COMMON_GRADIENTS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/types/span.h"
#include "common/half.h"

namespace kestrel {

// Largest gradient magnitude accepted. Larger finite values would overflow optimizer state such as Adagrad's
// sum of squares to Inf and silently freeze or poison the row.
inline constexpr float kMaxGradientMagnitude = 1e15f;

// True when `g` is NaN, +-Inf or larger in magnitude than kMaxGradientMagnitude.
inline bool BadGradient(float g) { return !(std::abs(g) <= kMaxGradientMagnitude); }

// The index of the first bad gradient, or -1. The common all-good case is a max-reduction over the magnitude
// bits (for non-negative floats integer order is float order, NaNs sort above Inf), in AVX2 where the CPU has it
// (common/half.h: GCC at -O2 leaves the reduction scalar, a few % of a server's push time).
inline int64_t FirstBadGradient(absl::Span<const float> grads) {
  uint32_t limit;
  std::memcpy(&limit, &kMaxGradientMagnitude, sizeof(limit));
  if (MaxMagnitudeBits(grads.data(), grads.size()) <= limit) return -1;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (BadGradient(grads[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace kestrel

#endif  // KESTREL_COMMON_GRADIENTS_H_
