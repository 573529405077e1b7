#include "worker/pull_split.h"

#include <cstring>

namespace kestrel {

void PullSplit::Build(const KeyBatch& current, const KeyBatch& next, const Partition& partition) {
  early_keys_.clear();
  late_keys_.clear();
  early_.positions.clear();
  late_.positions.clear();
  // Server by server, both key lists strictly increasing: one merge walk.
  for (int s = 0; s < next.num_servers(); ++s) {
    const absl::Span<const uint64_t> want = next.keys_of(s);
    const absl::Span<const uint64_t> have =
        s < current.num_servers() ? current.keys_of(s) : absl::Span<const uint64_t>();
    const uint32_t base = static_cast<uint32_t>(next.offset_of(s));
    size_t h = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      while (h < have.size() && have[h] < want[i]) ++h;
      const bool shared = h < have.size() && have[h] == want[i];
      (shared ? late_keys_ : early_keys_).push_back(want[i]);
      (shared ? late_.positions : early_.positions).push_back(base + static_cast<uint32_t>(i));
    }
  }
  early_.keys.Build(early_keys_, partition);
  late_.keys.Build(late_keys_, partition);
}

void PullSplit::Place(const Part& part, const float* part_rows, int dim, float* rows) {
  const size_t row_bytes = sizeof(float) * dim;
  for (size_t i = 0; i < part.positions.size(); ++i) {
    std::memcpy(rows + static_cast<size_t>(part.positions[i]) * dim, part_rows + i * dim, row_bytes);
  }
}

void PullSplit::Gather(const Part& part, const float* rows, int dim, float* part_rows) {
  const size_t row_bytes = sizeof(float) * dim;
  for (size_t i = 0; i < part.positions.size(); ++i) {
    std::memcpy(part_rows + i * dim, rows + static_cast<size_t>(part.positions[i]) * dim, row_bytes);
  }
}

}  // namespace kestrel
