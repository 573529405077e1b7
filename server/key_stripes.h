// KeyStripes: how a Table splits its shard's key span into lock stripes, and a request's keys grouped by stripe.
//
// Each stripe is a contiguous slice of the span (keys are hashed feature ids, so slices hold equal shares). A
// request takes each stripe's lock once, visiting the stripe's keys in request order: sorted requests (the
// protocol's rule for sparse keys) are already grouped by stripe, others are bucketed first.
#ifndef KESTREL_SERVER_KEY_STRIPES_H_
#define KESTREL_SERVER_KEY_STRIPES_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/partition.h"

namespace kestrel {

// Immutable; thread-safe.
class KeyStripes {
 public:
  static constexpr int kBits = 6;
  static constexpr int kCount = 1 << kBits;

  // Stripes for keys in `span` (the owning shard's first to last key; keys outside it go to the first or last
  // stripe).
  explicit KeyStripes(KeyRange span);

  uint64_t key_lo() const { return key_lo_; }
  uint64_t key_hi() const { return key_hi_; }

  int StripeOf(uint64_t key) const {
    if (key < key_lo_) return 0;  // outside the shard's span: only possible for unvalidated keys
    return static_cast<int>(std::min<uint64_t>((key - key_lo_) >> shift_, kCount - 1));
  }

 private:
  const uint64_t key_lo_;  // first key of the shard's span
  const uint64_t key_hi_;  // last key of the shard's span
  const int shift_;        // stripe = (key - key_lo_) >> shift_
};

// One stripe's share of a request: request positions Position(o) for o in [begin, end), in request order, and
// every key's index hash (by request position). A view of a StripedKeys, copied by value into the row loops
// (so they keep it in registers rather than reload a thread-local scratch's fields); valid while it is.
struct StripeKeys {
  const uint64_t* hashes;
  const uint32_t* order;  // null: the positions are begin .. end - 1
  uint32_t begin;
  uint32_t end;

  uint32_t Position(uint32_t o) const { return order == nullptr ? o : order[o]; }
};

// The positions of one request's keys, grouped by stripe, with each key's index hash. Scratch space reused from
// request to request; not thread-safe (each thread keeps its own).
struct StripedKeys {
  std::vector<uint64_t> hashes;  // Mix64 of each key (by request position): its index slot
  std::vector<uint32_t> order;   // request positions grouped by stripe (unused when in_order)
  bool in_order = false;         // the request's keys are already grouped by stripe (sorted keys are)
  uint32_t bounds[KeyStripes::kCount + 1];

  // Groups `keys` by stripe.
  void Group(absl::Span<const uint64_t> keys, const KeyStripes& stripes);

  bool empty(int stripe) const { return bounds[stripe] == bounds[stripe + 1]; }
  StripeKeys Stripe(int stripe) const {
    return {hashes.data(), in_order ? nullptr : order.data(), bounds[stripe], bounds[stripe + 1]};
  }
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_KEY_STRIPES_H_
