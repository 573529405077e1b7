#include "server/bsp_aggregator.h"

#include <algorithm>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
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
  const size_t hash = absl::HashOf(
      absl::string_view(reinterpret_cast<const char*>(part.keys.data()), part.keys.size() * sizeof(uint64_t)),
      absl::string_view(reinterpret_cast<const char*>(part.grads.data()), part.grads.size() * sizeof(float)));
  absl::MutexLock lock(&mu_);
  if (fenced_from_ >= 0 && part.clock >= fenced_from_ && fenced_[part.worker]) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "worker %d was removed from the job at clock %d: its push for clock %d is refused", part.worker,
        fenced_from_, part.clock));
  }
  if (part.clock <= applied_through_) {
    if (part.clock == applying_) {
      return absl::UnavailableError(absl::StrFormat("clock %d is being applied; retry", part.clock));
    }
    auto clock = applied_parts_.find(part.clock);
    if (clock != applied_parts_.end()) {
      auto seen = clock->second.find({part.worker, part.index});
      if (seen != clock->second.end() && seen->second == hash) return std::optional<Batch>();  // a repeat
    }
    return absl::FailedPreconditionError(absl::StrFormat(
        "clock %d was already applied: part %d from worker %d is late or differs from what was applied",
        part.clock, part.index, part.worker));
  }
  // An earlier clock that is still incomplete means some worker skipped it: its updates would be lost.
  if (!pending_.empty() && pending_.begin()->first < part.clock) {
    const auto& [older, pending] = *pending_.begin();
    std::string missing;
    for (int w = 0; w < num_workers_; ++w) {
      const WorkerParts& parts = pending.workers[w];
      if (parts.count == 0 || static_cast<int>(parts.parts.size()) < parts.count) {
        absl::StrAppend(&missing, missing.empty() ? "" : ", ", w);
      }
    }
    return absl::FailedPreconditionError(absl::StrFormat(
        "clock %d is incomplete (workers %s have not pushed all of it) while worker %d pushes clock %d: in BSP "
        "every worker pushes every table once per clock",
        older, missing, part.worker, part.clock));
  }
  // Only the clock being collected is buffered: BSP's barrier means no worker pushes c + 1 before every worker
  // pushed c (and c was applied), so a part of any other clock is refused, not kept (a sender cannot pile up
  // clocks, descending or ahead).
  if (!pending_.empty() && pending_.begin()->first != part.clock) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "clock %d is being collected; worker %d's push for clock %d is refused (BSP pushes one clock at a time)",
        pending_.begin()->first, part.worker, part.clock));
  }
  if (applied_through_ >= 0 && part.clock > applied_through_ + 1) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "clock %d was applied last; worker %d's push for clock %d skips ahead (BSP pushes one clock at a time)",
        applied_through_, part.worker, part.clock));
  }
  PendingClock& pending = pending_[part.clock];
  if (pending.workers.empty()) pending.workers.resize(num_workers_);
  WorkerParts& w = pending.workers[part.worker];
  if (w.count != 0 && w.count != part.count) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "worker %d announced %d parts for clock %d, now %d", part.worker, w.count, part.clock, part.count));
  }
  auto existing = w.parts.find(part.index);
  if (existing != w.parts.end()) {
    if (existing->second.hash == hash) return std::optional<Batch>();  // a repeat
    return absl::InvalidArgumentError(absl::StrFormat(
        "worker %d already pushed part %d of clock %d with different contents: push each table once per clock",
        part.worker, part.index, part.clock));
  }
  w.count = part.count;
  w.parts[part.index] = PartData{std::vector<uint64_t>(part.keys.begin(), part.keys.end()),
                                 std::vector<float>(part.grads.begin(), part.grads.end()), hash};
  if (static_cast<int>(w.parts.size()) < w.count) return std::optional<Batch>();
  if (++pending.complete_workers < num_workers_) return std::optional<Batch>();
  Batch batch = CombineLocked(part.clock, pending, num_workers_);
  MarkApplyingLocked(part.clock, pending);
  return std::optional<Batch>(std::move(batch));
}

void BspAggregator::MarkApplyingLocked(int64_t clock, PendingClock& pending) {
  auto& record = applied_parts_[clock];
  for (int wi = 0; wi < num_workers_; ++wi) {
    for (const auto& [index, data] : pending.workers[wi].parts) record[{wi, index}] = data.hash;
  }
  while (applied_parts_.size() > 2) applied_parts_.erase(applied_parts_.begin());  // repeats come right after
  pending_.erase(clock);
  applied_through_ = clock;
  applying_ = clock;
}

absl::StatusOr<BspAggregator::Fenced> BspAggregator::Fence(const std::vector<int>& workers, int64_t clock) {
  absl::MutexLock lock(&mu_);
  std::vector<bool> fenced(num_workers_, false);
  for (int w : workers) {
    if (w < 0 || w >= num_workers_) {
      return absl::InvalidArgumentError(absl::StrFormat("worker rank %d is not in [0, %d)", w, num_workers_));
    }
    fenced[w] = true;
  }
  if (std::count(fenced.begin(), fenced.end(), true) >= num_workers_) {
    return absl::InvalidArgumentError("fencing every worker would leave nobody to complete the clock");
  }
  if (clock < 0) return absl::InvalidArgumentError(absl::StrFormat("clock %d is negative", clock));
  fenced_ = std::move(fenced);
  fenced_from_ = clock;
  if (completed_without_ == clock) return Fenced::kCompletedWithout;
  if (applied_through_ >= clock) return Fenced::kApplied;  // applying_ == clock included
  return Fenced::kNotApplied;
}

absl::StatusOr<std::optional<BspAggregator::Batch>> BspAggregator::CompleteWithout(int64_t clock) {
  absl::MutexLock lock(&mu_);
  if (fenced_from_ != clock) {
    return absl::FailedPreconditionError(
        absl::StrFormat("clock %d was not fenced (the fence is at clock %d)", clock, fenced_from_));
  }
  if (applied_through_ >= clock) return std::optional<Batch>();
  auto it = pending_.find(clock);
  if (it == pending_.end()) return std::optional<Batch>();  // nobody pushed it here
  PendingClock& pending = it->second;
  int contributors = 0;
  for (int w = 0; w < num_workers_; ++w) {  // checked whole before anything changes
    const WorkerParts& parts = pending.workers[w];
    if (fenced_[w]) continue;
    if (parts.count == 0 || static_cast<int>(parts.parts.size()) < parts.count) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "clock %d cannot be completed: worker %d, which was not removed, has not pushed all of it", clock, w));
    }
    ++contributors;
  }
  for (int w = 0; w < num_workers_; ++w) {
    if (fenced_[w]) pending.workers[w] = WorkerParts();  // a removed worker's parts never count
  }
  Batch batch = CombineLocked(clock, pending, contributors);
  MarkApplyingLocked(clock, pending);
  completed_without_ = clock;
  return std::optional<Batch>(std::move(batch));
}

bool BspAggregator::HasPushed(int worker, int64_t clock) const {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(clock);
  if (it == pending_.end() || worker < 0 || static_cast<size_t>(worker) >= it->second.workers.size()) return false;
  const WorkerParts& parts = it->second.workers[worker];
  return parts.count > 0 && static_cast<int>(parts.parts.size()) == parts.count;
}

void BspAggregator::Applied(int64_t clock) {
  absl::MutexLock lock(&mu_);
  if (applying_ == clock) applying_ = -1;
}

BspAggregator::Batch BspAggregator::CombineLocked(int64_t clock, PendingClock& pending, int contributors) const {
  // Every (key, position) in rank order, then part order; sorting by (key, position) keeps each key's
  // contributions in that order (the radix sort is stable, the small-batch sort compares positions), so the
  // sums below add the same numbers in the same order whatever the arrival order.
  std::vector<std::pair<uint64_t, uint32_t>> order, scratch;
  std::vector<const float*> rows;
  for (const WorkerParts& w : pending.workers) {
    for (const auto& [index, part] : w.parts) {
      const auto& keys = part.keys;
      const auto& grads = part.grads;
      for (size_t i = 0; i < keys.size(); ++i) {
        order.emplace_back(keys[i], static_cast<uint32_t>(rows.size()));
        rows.push_back(grads.data() + i * dim_);
      }
    }
  }
  KeyBatch::SortByKey(&order, &scratch);
  Batch batch;
  batch.clock = clock;
  // Pushed values (kSum) start from -0, the identity of float addition (0 + -0 is +0), so that a key's single
  // contribution keeps its bits.
  const float zero = combine_ == Combine::kSum ? -0.0f : 0.0f;
  for (const auto& [key, position] : order) {
    if (batch.keys.empty() || batch.keys.back() != key) {
      batch.keys.push_back(key);
      batch.grads.resize(batch.grads.size() + dim_, zero);
    }
    float* dst = batch.grads.data() + batch.grads.size() - dim_;
    const float* src = rows[position];
    for (int j = 0; j < dim_; ++j) dst[j] += src[j];
  }
  if (combine_ == Combine::kMean) {
    const float scale = 1.0f / static_cast<float>(contributors);
    for (float& g : batch.grads) g *= scale;
  }
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
