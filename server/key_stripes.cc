// KeyStripes: a key span split into lock stripes, and requests grouped by stripe (see key_stripes.h).
#include "server/key_stripes.h"

#include <cstring>

#include "common/hash.h"

namespace kestrel {
namespace {

// Shift that maps a span of `width` keys onto at most KeyStripes::kCount stripes.
int StripeShift(uint64_t width) {
  int shift = 0;
  while ((width >> shift) >= static_cast<uint64_t>(KeyStripes::kCount)) ++shift;
  return shift;
}

}  // namespace

KeyStripes::KeyStripes(KeyRange span)
    : key_lo_(span.first), key_hi_(span.last), shift_(StripeShift(span.last - span.first)) {}

void StripedKeys::Group(absl::Span<const uint64_t> keys, const KeyStripes& stripes) {
  const size_t n = keys.size();
  hashes.resize(n);
  uint32_t counts[KeyStripes::kCount + 1] = {0};
  bool grouped = true;
  int previous = 0;
  for (size_t i = 0; i < n; ++i) {
    hashes[i] = Mix64(keys[i]);
    const int stripe = stripes.StripeOf(keys[i]);
    grouped &= stripe >= previous;
    previous = stripe;
    ++counts[stripe + 1];
  }
  for (int s = 0; s < KeyStripes::kCount; ++s) counts[s + 1] += counts[s];
  std::memcpy(bounds, counts, sizeof(counts));
  in_order = grouped;
  if (grouped) return;
  order.resize(n);
  for (size_t i = 0; i < n; ++i) order[counts[stripes.StripeOf(keys[i])]++] = static_cast<uint32_t>(i);
}

}  // namespace kestrel
