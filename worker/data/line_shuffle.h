// LineShuffle: the seeded order in which a shuffled epoch deals the training lines (TrainConfig.shuffle_buffer,
// docs/configuration.md).
//
// The data lines (global indices 0, 1, ... in file order, worker/data/record_reader.h) are cut into windows of
// `window` consecutive lines; window k holds lines [k * window, (k + 1) * window), the last one fewer when the data
// ends. Line k * window + i takes the position k * window + perm(i), where perm is a pseudo-random permutation of
// the window's line count, keyed by (seed, epoch, k): a 4-round Feistel network on the smallest even power of two
// covering the count, walked along its cycle until it lands inside the window. A pure function of its inputs,
// independent of the worker count, the platform and the standard library. Each window stays in place: positions
// of window k are exactly its lines' range, so a reader holds one window at a time. Immutable value type.
#ifndef KESTREL_WORKER_DATA_LINE_SHUFFLE_H_
#define KESTREL_WORKER_DATA_LINE_SHUFFLE_H_

#include <array>
#include <cstdint>

namespace kestrel {

class LineShuffle {
 public:
  // `window` >= 1 lines per window.
  LineShuffle(uint64_t window, uint64_t seed, int64_t epoch);

  uint64_t window() const { return window_; }
  // The first line of the window holding `line`.
  uint64_t WindowStart(uint64_t line) const { return line - line % window_; }
  // The position of `line` in the dealing order, when its window holds `window_lines` lines (window(), or fewer
  // for the data's last window). Requires line - WindowStart(line) < window_lines <= window().
  uint64_t Position(uint64_t line, uint64_t window_lines) const;

 private:
  uint64_t window_;
  uint64_t key_;  // of (seed, epoch)
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_DATA_LINE_SHUFFLE_H_
