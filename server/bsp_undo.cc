#include "server/bsp_undo.h"

#include <cstring>

#include "common/status.h"

namespace kestrel {

absl::Status BspUndo::Apply(Table& table, const BspAggregator::Batch& batch, TierHealth& health) {
  absl::MutexLock lock(&mu_);
  Undo& undo = undo_[table.config().name()];
  undo.clock = batch.clock;
  undo.keys = batch.keys;
  undo.values.resize(batch.keys.size() * static_cast<size_t>(table.dim()));
  absl::Status applied = table.Pull(undo.keys, undo.values.data(), batch.clock);
  if (applied.ok()) applied = table.Push(batch.keys, batch.grads.data(), batch.clock);
  return health.Failed(applied);
}

absl::Status BspUndo::Pull(const Table& table, absl::Span<const uint64_t> keys, int64_t clock, float* out) const {
  absl::ReaderMutexLock lock(&mu_);
  KESTREL_RETURN_IF_ERROR(table.Pull(keys, out, clock));
  // A pull for a clock already applied here: answer the rows as they were before it.
  auto it = undo_.find(table.config().name());
  if (it != undo_.end() && it->second.clock == clock) {
    const Undo& undo = it->second;
    const size_t dim = table.dim();
    size_t j = 0;
    for (size_t i = 0; i < keys.size(); ++i) {  // both sorted (dense block keys: look each up)
      if (table.config().kind() == TableConfig::DENSE) j = 0;
      while (j < undo.keys.size() && undo.keys[j] < keys[i]) ++j;
      if (j < undo.keys.size() && undo.keys[j] == keys[i]) {
        std::memcpy(out + i * dim, undo.values.data() + j * dim, sizeof(float) * dim);
      }
    }
  }
  return absl::OkStatus();
}

void BspUndo::Clear() {
  absl::MutexLock lock(&mu_);
  undo_.clear();
}

}  // namespace kestrel
