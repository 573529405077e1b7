// AdmissionSketch: the count-min sketch of absent keys' push counts (see admission_sketch.h).
#include "server/admission_sketch.h"

#include <algorithm>
#include <string>

#include "common/hash.h"

namespace kestrel {

uint32_t AdmissionSketch::WidthFor(const CapacityPolicy& policy, int stripes) {
  if (policy.admit_after() <= 1) return 0;
  const uint64_t bytes = policy.sketch_bytes() == 0 ? kDefaultBytes : policy.sketch_bytes();
  uint64_t width = 16;
  while (width * 2 * kDepth * stripes <= bytes) width *= 2;
  return static_cast<uint32_t>(width);
}

uint32_t AdmissionSketch::Count(uint64_t hash) {
  // Count-min with conservative update: raise only the counters below the new estimate.
  const uint64_t h1 = Mix64(hash ^ 0x5bd1e9955bd1e995ULL);
  const uint64_t h2 = Mix64(h1) | 1;
  const uint32_t mask = width_ - 1;
  uint8_t* counters[kDepth];
  uint32_t estimate = kMaxCount;
  for (int d = 0; d < kDepth; ++d) {
    counters[d] = &counters_[static_cast<size_t>(d) * width_ + ((h1 + d * h2) & mask)];
    estimate = std::min<uint32_t>(estimate, *counters[d]);
  }
  const uint32_t next = std::min<uint32_t>(estimate + 1, kMaxCount);
  for (uint8_t* c : counters) *c = static_cast<uint8_t>(std::max<uint32_t>(*c, next));
  dirty_ = true;
  if (++increments_ >= width_) {
    for (uint8_t& c : counters_) c >>= 1;  // age: a key must recur within about a window to be admitted
    increments_ = 0;
  }
  return next;
}

void AdmissionSketch::Reset() {
  std::fill(counters_.begin(), counters_.end(), 0);
  increments_ = 0;
  dirty_ = false;
}

void AdmissionSketch::Save(AdmissionSketchState::Stripe* out) const {
  out->set_counters(std::string(counters_.begin(), counters_.end()));
  out->set_increments(increments_);
}

bool AdmissionSketch::Fits(const AdmissionSketchState::Stripe& state, uint32_t width) {
  return state.counters().size() == size_t{kDepth} * width && state.increments() < width;
}

void AdmissionSketch::Load(const AdmissionSketchState::Stripe& state) {
  counters_.assign(state.counters().begin(), state.counters().end());
  increments_ = state.increments();
  dirty_ = true;
}

}  // namespace kestrel
