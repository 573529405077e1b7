#include "common/line_assignment.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/limits.h"

namespace kestrel {

bool LineAssignment::Contains(uint64_t line) const {
  if (line < watermark) return std::binary_search(leftovers.begin(), leftovers.end(), line);
  return (line - watermark) % static_cast<uint64_t>(count) == static_cast<uint64_t>(index);
}

uint64_t LineAssignment::CountBelow(uint64_t line) const {
  const uint64_t below = static_cast<uint64_t>(std::lower_bound(leftovers.begin(), leftovers.end(), line) -
                                               leftovers.begin());
  if (line <= watermark + static_cast<uint64_t>(index)) return below;
  // Lines watermark + index + k * count below `line`: k = 0 .. ceil((line - first) / count) - 1.
  const uint64_t first = watermark + static_cast<uint64_t>(index);
  return below + (line - first + static_cast<uint64_t>(count) - 1) / static_cast<uint64_t>(count);
}

LineAssignment AssignmentOf(const LineShare& share) {
  LineAssignment a;
  a.leftovers.assign(share.leftovers().begin(), share.leftovers().end());
  a.watermark = share.watermark();
  a.index = share.index();
  a.count = share.count();
  return a;
}

LineShare LineShareOf(const LineAssignment& assignment) {
  LineShare share;
  for (uint64_t line : assignment.leftovers) share.add_leftovers(line);
  share.set_watermark(assignment.watermark);
  share.set_index(assignment.index);
  share.set_count(assignment.count);
  return share;
}

LineAssignment PlainAssignment(int index, int count) {
  LineAssignment a;
  a.index = index;
  a.count = count;
  return a;
}

absl::StatusOr<std::vector<LineAssignment>> ReassignLines(absl::Span<const LineAssignment> old,
                                                     absl::Span<const uint64_t> consumed,
                                                     absl::Span<const int> old_of_new, uint64_t max_leftovers) {
  const int new_count = static_cast<int>(old_of_new.size());
  if (old.empty() || old.size() != consumed.size() || new_count < 1 || new_count > kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "resharding %d workers (%d positions) to %d: need as many positions as workers and 1..%d workers",
        old.size(), consumed.size(), new_count, kMaxWorkers));
  }
  // new_of_old[w]: the new rank old worker w stays as, or -1 (it leaves).
  std::vector<int> new_of_old(old.size(), -1);
  std::vector<int> staying;  // new ranks that were old workers, increasing
  for (int v = 0; v < new_count; ++v) {
    const int w = old_of_new[v];
    if (w < -1 || w >= static_cast<int>(old.size()) || (w >= 0 && new_of_old[w] != -1)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("resharding: new worker %d names old worker %d (of %d), or one named twice", v, w,
                          old.size()));
    }
    if (w >= 0) {
      new_of_old[w] = v;
      staying.push_back(v);
    }
  }
  if (staying.empty()) {
    for (int v = 0; v < new_count; ++v) staying.push_back(v);
  }
  for (const LineAssignment& a : old) {
    if (a.count < 1 || a.index < 0 || a.index >= a.count ||
        (!a.leftovers.empty() && a.leftovers.back() >= a.watermark)) {
      return absl::InvalidArgumentError("resharding: a malformed assignment");
    }
  }
  // The watermark: the furthest next line, and never below the previous watermark (lines below it may have been
  // read in earlier generations by workers whose positions are gone). Lines read in this generation are below
  // their reader's next line.
  uint64_t watermark = 0;
  for (size_t w = 0; w < old.size(); ++w) {
    watermark = std::max({watermark, old[w].watermark, old[w].Line(consumed[w])});
  }

  std::vector<LineAssignment> out(new_count);
  for (int v = 0; v < new_count; ++v) {
    out[v].watermark = watermark;
    out[v].index = v;
    out[v].count = new_count;
  }
  uint64_t total = 0;
  size_t next_heir = 0;  // leaving workers' leftovers go round-robin
  for (size_t w = 0; w < old.size(); ++w) {
    for (uint64_t n = consumed[w];; ++n) {
      const uint64_t line = old[w].Line(n);
      if (line >= watermark) break;
      if (++total > max_leftovers) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "resharding: more than %d unread lines below the watermark %d (a worker is far behind)", max_leftovers,
            watermark));
      }
      const int heir = new_of_old[w] >= 0 ? new_of_old[w] : staying[next_heir++ % staying.size()];
      out[heir].leftovers.push_back(line);
    }
  }
  for (LineAssignment& a : out) std::sort(a.leftovers.begin(), a.leftovers.end());
  return out;
}

absl::StatusOr<std::vector<LineAssignment>> ReassignLines(absl::Span<const LineAssignment> old,
                                                     absl::Span<const uint64_t> consumed, int new_count,
                                                     uint64_t max_leftovers) {
  if (new_count < 1 || new_count > kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrFormat("resharding to %d workers: need 1..%d", new_count, kMaxWorkers));
  }
  std::vector<int> old_of_new(new_count);
  for (int v = 0; v < new_count; ++v) old_of_new[v] = v < static_cast<int>(old.size()) ? v : -1;
  return ReassignLines(old, consumed, old_of_new, max_leftovers);
}

}  // namespace kestrel
