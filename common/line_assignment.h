// LineAssignment: which training lines each worker reads, and how they are dealt anew when the worker count
// changes mid-epoch (elastic jobs, docs/elasticity.md).
//
// A worker's share of an epoch is a LineAssignment: first an explicit, increasing list of lines below a
// watermark (leftovers), then every line g >= watermark with (g - watermark) mod count == index. A job
// starts with the plain modulo deal of worker/data/record_reader.h: no leftovers, watermark 0.
//
// ReassignLines() takes every worker's assignment and how many of its lines it has consumed at a clock boundary,
// and deals the rest of the epoch to `new_count` workers:
// - The watermark G is the furthest line any worker will read next (and at least the previous watermark). No
//   line at or above G has been read.
// - Below G, each old worker's unread lines (its leftovers) stay with it if it stays. A leaving worker's
//   leftovers (a worker removed from the middle of the ranks included) are dealt round-robin to the staying
//   workers.
// - From G on, the new modulo deals the lines.
// Every line of the epoch is read exactly once, however many times the job is rescaled (line_assignment_test checks
// this against random schedules). Pure functions; thread-compatible values.
#ifndef KESTREL_COMMON_LINE_ASSIGNMENT_H_
#define KESTREL_COMMON_LINE_ASSIGNMENT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/checkpoint.pb.h"

namespace kestrel {

struct LineAssignment {
  std::vector<uint64_t> leftovers;  // increasing, all < watermark
  uint64_t watermark = 0;
  int index = 0;  // in [0, count)
  int count = 1;

  // The n-th line (0-based) this worker reads: the leftovers, then watermark + index + k * count.
  uint64_t Line(uint64_t n) const {
    if (n < leftovers.size()) return leftovers[n];
    return watermark + static_cast<uint64_t>(index) + (n - leftovers.size()) * static_cast<uint64_t>(count);
  }
  // Whether this worker reads `line`.
  bool Contains(uint64_t line) const;
  // How many of this worker's lines lie below `line` (those it has consumed when its reader is at `line`).
  uint64_t CountBelow(uint64_t line) const;
};

// The assignment's wire form (proto/checkpoint.proto LineShare), both ways.
LineAssignment AssignmentOf(const LineShare& share);
LineShare LineShareOf(const LineAssignment& assignment);

// The plain sharding: worker `index` of `count` reads lines congruent to index mod count.
LineAssignment PlainAssignment(int index, int count);

// The assignments of the workers of a new layout taking over from `old` (one per old worker, each `consumed[w]`
// lines into its assignment). `old_of_new[v]` is the old worker new worker v was (-1: a new one), as
// scheduler/rescale_layout.h MapRanks says; old workers it does not name leave, and their leftovers go round-robin
// (in old rank order) to the staying ones (in new rank order; to every new worker when none stays).
// InvalidArgument for mismatched sizes, a count outside [1, kMaxWorkers] (common/limits.h), an old worker named
// twice, or leftovers beyond `max_leftovers` lines (a worker far behind the others; BSP keeps them within a batch).
[[nodiscard]] absl::StatusOr<std::vector<LineAssignment>> ReassignLines(absl::Span<const LineAssignment> old,
                                                     absl::Span<const uint64_t> consumed,
                                                     absl::Span<const int> old_of_new,
                                                     uint64_t max_leftovers = uint64_t{1} << 24);
// The same with ranks that keep their identity: new worker v < old.size() is old worker v.
[[nodiscard]] absl::StatusOr<std::vector<LineAssignment>> ReassignLines(absl::Span<const LineAssignment> old,
                                                     absl::Span<const uint64_t> consumed, int new_count,
                                                     uint64_t max_leftovers = uint64_t{1} << 24);

}  // namespace kestrel

#endif  // KESTREL_COMMON_LINE_ASSIGNMENT_H_
