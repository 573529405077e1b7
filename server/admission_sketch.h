// AdmissionSketch: the push counts of keys not yet in a bounded table, as a count-min sketch (one per lock
// stripe).
//
// kDepth rows of 8-bit counters with conservative update (a count raises only the counters below its new
// estimate); every width() counts all counters are halved, so a key must recur within about a window of
// width() pushes of absent keys to reach a high count. The state (counters and the count since the last halving)
// is a function of the counted sequence alone, and is saved in checkpoints (AdmissionSketchState).
#ifndef KESTREL_SERVER_ADMISSION_SKETCH_H_
#define KESTREL_SERVER_ADMISSION_SKETCH_H_

#include <cstdint>
#include <vector>

#include "proto/table.pb.h"

namespace kestrel {

// Owns its counters. Not thread-safe: the owner (Table) guards each sketch with its stripe's lock.
class AdmissionSketch {
 public:
  // Counter rows.
  static constexpr int kDepth = 4;
  // Bytes of all of a table's sketches when CapacityPolicy.sketch_bytes is 0.
  static constexpr uint64_t kDefaultBytes = uint64_t{4} << 20;
  // The highest count (8-bit counters), so the most admit_after can be.
  static constexpr uint32_t kMaxCount = 255;

  // Counters per row of each of the `stripes` sketches of a table with `policy`: a power of two, at least 16,
  // such that all of them fit sketch_bytes (kDefaultBytes if 0); 0 (no sketch) when admit_after <= 1.
  static uint32_t WidthFor(const CapacityPolicy& policy, int stripes);

  // A sketch without counters (width 0).
  AdmissionSketch() = default;
  // A sketch of kDepth rows of `width` counters (a power of two), all 0.
  explicit AdmissionSketch(uint32_t width) : width_(width), counters_(size_t{kDepth} * width, 0) {}

  // Counts one push of the key whose Mix64 is `hash`; returns its estimated count, this push included (at most
  // kMaxCount). Marks the sketch dirty.
  uint32_t Count(uint64_t hash);

  uint32_t width() const { return width_; }
  // Whether it changed since the last ClearDirty() (or was loaded or marked).
  bool dirty() const { return dirty_; }
  void ClearDirty() { dirty_ = false; }
  void MarkDirty() { dirty_ = width_ > 0; }
  // All counters 0, not dirty.
  void Reset();
  // Bytes held by the counters.
  uint64_t memory_bytes() const { return counters_.capacity(); }

  void Save(AdmissionSketchState::Stripe* out) const;
  // Whether `state` is a well-formed sketch of `width` counters per row (Load's precondition).
  static bool Fits(const AdmissionSketchState::Stripe& state, uint32_t width);
  // Replaces the state with `state` (which Fits this sketch's width) and marks the sketch dirty.
  void Load(const AdmissionSketchState::Stripe& state);

 private:
  uint32_t width_ = 0;
  std::vector<uint8_t> counters_;  // kDepth rows of width_
  uint64_t increments_ = 0;        // counts since the last halving
  bool dirty_ = false;
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_ADMISSION_SKETCH_H_
