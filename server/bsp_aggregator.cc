#include "server/bsp_aggregator.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/key_batch.h"

namespace kestrel {

absl::StatusOr<std::optional<BspAggregator::Batch>> BspAggregator::Add(const Part& part) {
  if (part.worker < 0 || part.worker >= num_workers_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("worker rank %d is not in [0, %d)", part.worker, num_workers_));
  }
  if (part.count < 1 || part.index < 0 || part.index >= part.count) {
    return absl::InvalidArgumentError(absl::StrFormat("push part %d of %d is malformed", part.index, part.count));
  }
  if (part.grads.size() != part.keys.size() * static_cast<size_t>(dim_)) {
    return absl::InvalidArgumentError(absl::StrFormat("%d keys of dim %d need %d gradient values, got %d",
                                                      part.keys.size(), dim_, part.keys.size() * dim_,
                                                      part.grads.size()));
  }
  absl::MutexLock lock(&mu_);
  if (part.clock <= applied_through_) return std::optional<Batch>();  // a late duplicate: already applied
  PendingClock& pending = pending_[part.clock];
  if (pending.workers.empty()) pending.workers.resize(num_workers_);
  WorkerParts& w = pending.workers[part.worker];
  if (w.count != 0 && w.count != part.count) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "worker %d announced %d parts for clock %d, now %d", part.worker, w.count, part.clock, part.count));
  }
  w.count = part.count;
  if (w.parts.count(part.index) != 0) return std::optional<Batch>();  // duplicate part
  w.parts[part.index] = {std::vector<uint64_t>(part.keys.begin(), part.keys.end()),
                         std::vector<float>(part.grads.begin(), part.grads.end())};
  if (static_cast<int>(w.parts.size()) < w.count) return std::optional<Batch>();
  if (++pending.complete_workers < num_workers_) return std::optional<Batch>();
  // Clocks complete in order in BSP (a worker cannot push c + 1 before every worker finished c), so this is
  // the next clock to apply.
  Batch batch = CombineLocked(part.clock, pending);
  pending_.erase(part.clock);
  applied_through_ = std::max(applied_through_, part.clock);
  return std::optional<Batch>(std::move(batch));
}

BspAggregator::Batch BspAggregator::CombineLocked(int64_t clock, PendingClock& pending) const {
  // Every (key, position) in rank order, then part order; sorting by (key, position) keeps each key's
  // contributions in that order (the radix sort is stable, the small-batch sort compares positions), so the
  // sums below add the same numbers in the same order whatever the arrival order.
  std::vector<std::pair<uint64_t, uint32_t>> order, scratch;
  std::vector<const float*> rows;
  for (const WorkerParts& w : pending.workers) {
    for (const auto& [index, part] : w.parts) {
      const auto& [keys, grads] = part;
      for (size_t i = 0; i < keys.size(); ++i) {
        order.emplace_back(keys[i], static_cast<uint32_t>(rows.size()));
        rows.push_back(grads.data() + i * dim_);
      }
    }
  }
  KeyBatch::SortByKey(&order, &scratch);
  Batch batch;
  batch.clock = clock;
  for (const auto& [key, position] : order) {
    if (batch.keys.empty() || batch.keys.back() != key) {
      batch.keys.push_back(key);
      batch.grads.resize(batch.grads.size() + dim_, 0.0f);
    }
    float* dst = batch.grads.data() + batch.grads.size() - dim_;
    const float* src = rows[position];
    for (int j = 0; j < dim_; ++j) dst[j] += src[j];
  }
  const float scale = 1.0f / static_cast<float>(num_workers_);
  for (float& g : batch.grads) g *= scale;
  return batch;
}

int64_t BspAggregator::applied_through() const {
  absl::MutexLock lock(&mu_);
  return applied_through_;
}

size_t BspAggregator::pending_clocks() const {
  absl::MutexLock lock(&mu_);
  return pending_.size();
}

}  // namespace kestrel
