// BoundedPolicy: admission, expiry, eviction and the cold tier of bounded tables (see bounded_policy.h).
#include "server/bounded_policy.h"

#include <algorithm>
#include <functional>

#include "common/status.h"

namespace kestrel {

BoundedPolicy::BoundedPolicy(const TableConfig& config, int row_floats)
    : name_(config.name()),
      bounded_(config.has_capacity()),
      row_floats_(row_floats),
      stored_floats_(row_floats - RowArena::kKeyFloats),
      meta_offset_(row_floats - (config.has_capacity() ? kMetaFloats : 0)),
      admit_after_(config.capacity().admit_after()),
      admit_to_disk_(config.capacity().admit_to_disk()),
      ttl_(config.capacity().ttl_clocks()),
      sweep_period_(std::max<int64_t>(1, config.capacity().ttl_clocks() / 4)),
      sketch_width_(AdmissionSketch::WidthFor(config.capacity(), KeyStripes::kCount)),
      max_disk_rows_per_stripe_(config.capacity().max_disk_bytes() /
                                (sizeof(float) * stored_floats_ + sizeof(uint64_t)) / KeyStripes::kCount) {}

bool BoundedPolicy::StoredRowExpired(const TableConfig& config, absl::Span<const float> stored_row, int64_t clock) {
  const int64_t ttl = config.capacity().ttl_clocks();
  if (!config.has_capacity() || ttl <= 0 || stored_row.size() < static_cast<size_t>(kMetaFloats)) return false;
  uint32_t last;
  std::memcpy(&last, stored_row.data() + stored_row.size() - kMetaFloats, sizeof(last));
  return clock - static_cast<int64_t>(last) > ttl;
}

bool BoundedPolicy::StoredExpiredAt(const float* stored, int64_t clock) const {
  if (ttl_ <= 0) return false;
  uint32_t last;
  std::memcpy(&last, stored + stored_floats_ - kMetaFloats, sizeof(last));
  return clock - static_cast<int64_t>(last) > ttl_;
}

void BoundedPolicy::SetMemoryBudget(uint64_t bytes) {
  memory_budget_.store(bytes, std::memory_order_relaxed);
  if (!bounded_ || bytes == 0) {
    max_rows_per_stripe_.store(0, std::memory_order_relaxed);
    return;
  }
  const uint64_t sketch = uint64_t{AdmissionSketch::kDepth} * sketch_width_ * KeyStripes::kCount;
  const uint64_t per_stripe = bytes > sketch ? (bytes - sketch) / KeyStripes::kCount : 0;
  // The most rows whose stripe fits per_stripe (at least 1: a table always takes the row being pushed).
  uint64_t lo = 1, hi = uint64_t{1} << 31;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    if (RowArena::BytesFor(mid, row_floats_) <= per_stripe) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  max_rows_per_stripe_.store(static_cast<uint32_t>(std::max<uint64_t>(lo, 16)), std::memory_order_relaxed);
}

void BoundedPolicy::AddPullStats(TableTierStats* stats) const {
  stats->pull_memory_hits += pull_memory_hits_.load(std::memory_order_relaxed);
  stats->pull_disk_hits += pull_disk_hits_.load(std::memory_order_relaxed);
  stats->pull_misses += pull_misses_.load(std::memory_order_relaxed);
}

absl::Status BoundedPolicy::MakeRoomLocked(RowArena& rows, BoundedStripe& stripe, int64_t clock) const {
  const uint32_t max_rows = max_rows_per_stripe_.load(std::memory_order_relaxed);
  if (max_rows > 0 && rows.size() >= max_rows) {
    // Full: move the coldest 1/16 out (rows pinned by the push being applied stay).
    return EvictLocked(rows, stripe, LowMark(max_rows), clock);
  }
  return absl::OkStatus();
}

absl::Status BoundedPolicy::RemoveLocked(RowArena& rows, BoundedStripe& stripe, absl::Span<const uint32_t> ids) const {
  ColdTier* cold = cold_.load(std::memory_order_acquire);
  thread_local std::vector<uint64_t> stored;
  stored.clear();
  for (uint32_t id : ids) {
    if (rows.InStore(id)) stored.push_back(RowArena::KeyOf(rows.row(id)));
  }
  if (!stored.empty()) {
    if (cold != nullptr) {
      std::sort(stored.begin(), stored.end());
      KESTREL_RETURN_IF_ERROR(cold->Delete(name_, stored));
    } else {
      stripe.tombstones.insert(stripe.tombstones.end(), stored.begin(), stored.end());
    }
  }
  for (uint32_t id : ids) rows.Remove(id);
  return absl::OkStatus();
}

absl::Status BoundedPolicy::EvictLocked(RowArena& rows, BoundedStripe& stripe, uint32_t target,
                                        int64_t clock) const {
  if (rows.size() <= target) return absl::OkStatus();
  struct Candidate {
    uint64_t order;  // last-push clock, then push count
    uint64_t key;
    uint32_t id;
    bool operator<(const Candidate& o) const { return order != o.order ? order < o.order : key < o.key; }
  };
  thread_local std::vector<Candidate> candidates;
  candidates.clear();
  for (uint32_t id = 0; id < rows.size(); ++id) {
    if (rows.flags(id) & RowArena::kPinned) continue;
    const float* row = rows.row(id);
    const RowMeta m = GetMeta(row);
    candidates.push_back({(uint64_t{m.clock} << 32) | m.count, RowArena::KeyOf(row), id});
  }
  const size_t need = std::min<size_t>(rows.size() - target, candidates.size());
  if (need == 0) return absl::OkStatus();
  std::nth_element(candidates.begin(), candidates.begin() + (need - 1), candidates.end());
  candidates.resize(need);
  // The coldest rows go to disk while it has room (expired ones are simply dropped), in key order.
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) { return a.key < b.key; });
  ColdTier* cold = cold_.load(std::memory_order_acquire);
  thread_local std::vector<uint64_t> spill_keys;
  thread_local std::vector<float> spill_rows;
  thread_local std::vector<uint32_t> ids;
  spill_keys.clear();
  spill_rows.clear();
  ids.clear();
  uint64_t expired = 0, dropped = 0;
  for (const Candidate& c : candidates) {
    const float* row = rows.row(c.id);
    ids.push_back(c.id);
    if (ExpiredAt(row, clock)) {
      ++expired;
    } else if (cold != nullptr && stripe.disk_rows + spill_keys.size() < max_disk_rows_per_stripe_) {
      spill_keys.push_back(c.key);
      spill_rows.insert(spill_rows.end(), row + RowArena::kKeyFloats, row + RowArena::kKeyFloats + stored_floats_);
    } else {
      ++dropped;
    }
  }
  if (!spill_keys.empty()) {
    KESTREL_RETURN_IF_ERROR(cold->Write(name_, spill_keys, spill_rows));
    // The store now holds these rows: no tombstone and no delete for them.
    for (const Candidate& c : candidates) {
      if (std::binary_search(spill_keys.begin(), spill_keys.end(), c.key)) rows.SetFlags(c.id, RowArena::kSpilled);
    }
  }
  std::sort(ids.begin(), ids.end(), std::greater<uint32_t>());
  KESTREL_RETURN_IF_ERROR(RemoveLocked(rows, stripe, ids));
  stripe.disk_rows += static_cast<uint32_t>(spill_keys.size());
  stripe.stats.spilled += spill_keys.size();
  stripe.stats.expired += expired;
  stripe.stats.capacity_dropped += dropped;
  return absl::OkStatus();
}

absl::Status BoundedPolicy::SweepLocked(RowArena& rows, BoundedStripe& stripe, int64_t clock) const {
  thread_local std::vector<uint32_t> ids;
  ids.clear();
  for (uint32_t id = rows.size(); id-- > 0;) {
    if (ExpiredAt(rows.row(id), clock)) ids.push_back(id);  // decreasing ids
  }
  KESTREL_RETURN_IF_ERROR(RemoveLocked(rows, stripe, ids));
  stripe.stats.expired += ids.size();
  return absl::OkStatus();
}

absl::Status BoundedPolicy::ReadCold(absl::Span<const uint64_t> keys, const std::vector<uint32_t>& missing,
                                     std::vector<float>* rows, std::vector<uint8_t>* found) const {
  thread_local std::vector<uint64_t> cold_keys;
  cold_keys.clear();
  for (uint32_t i : missing) cold_keys.push_back(keys[i]);
  rows->resize(missing.size() * static_cast<size_t>(stored_floats_));
  found->assign(missing.size(), 0);
  return cold_.load(std::memory_order_acquire)->Read(name_, cold_keys, stored_floats_, rows->data(), found);
}

BoundedPush::Buffers& BoundedPush::ThreadBuffers() {
  thread_local Buffers buffers;
  return buffers;
}

BoundedPush::BoundedPush(const BoundedPolicy& policy, int64_t clock)
    : policy_(policy),
      clock_(clock),
      clock32_(static_cast<uint32_t>(std::clamp<int64_t>(clock, 0, UINT32_MAX))),
      has_cold_(policy.cold_.load(std::memory_order_acquire) != nullptr),
      buffers_(ThreadBuffers()) {}

absl::Status BoundedPush::BeginStripe(RowArena& rows, BoundedStripe& stripe, absl::Span<const uint64_t> keys,
                                      StripeKeys request) {
  rows_ = &rows;
  stripe_ = &stripe;
  keys_ = keys;
  request_ = request;
  next_missing_ = 0;
  error_ = absl::OkStatus();
  if (policy_.ttl_ > 0 && clock_ % policy_.sweep_period_ == 0 && stripe.swept_at != clock_) {
    KESTREL_RETURN_IF_ERROR(policy_.SweepLocked(rows, stripe, clock_));
    stripe.swept_at = clock_;
  }
  // Pin the push's rows in memory (room made for new rows never evicts them) and find those to read from disk.
  std::vector<uint32_t>& missing = buffers_.missing;
  missing.clear();
  for (uint32_t o = request.begin; o < request.end; ++o) {
    const uint32_t i = request.Position(o);
    const int64_t id = rows.Find(request.hashes[i], keys[i]);
    if (id >= 0) {
      rows.SetFlags(static_cast<uint32_t>(id), RowArena::kPinned);
    } else if (has_cold_ && stripe.disk_rows > 0) {
      missing.push_back(i);
    }
  }
  buffers_.found.assign(missing.size(), 0);
  if (!missing.empty()) {
    absl::Status read = policy_.ReadCold(keys, missing, &buffers_.cold_rows, &buffers_.found);
    if (!read.ok()) {
      Unpin();
      return read;
    }
  }
  buffers_.forget.clear();
  buffers_.staged_keys.clear();
  buffers_.staged_rows.clear();
  return absl::OkStatus();
}

void BoundedPush::Unpin() {
  for (uint32_t o = request_.begin; o < request_.end; ++o) {
    const uint32_t i = request_.Position(o);
    const int64_t id = rows_->Find(request_.hashes[i], keys_[i]);
    if (id >= 0) rows_->ClearFlags(static_cast<uint32_t>(id), RowArena::kPinned);
  }
}

bool BoundedPush::Readmit(uint64_t hash) {
  ++stripe_->stats.expired;
  if (!policy_.AdmitLocked(*stripe_, hash)) {
    ++stripe_->stats.not_admitted;
    return false;
  }
  ++stripe_->stats.admitted;
  return true;
}

NewRow BoundedPush::Absent(uint32_t i, uint64_t hash, uint64_t key) {
  NewRow row;
  const float* stored = nullptr;
  if (next_missing_ < buffers_.missing.size() && buffers_.missing[next_missing_] == i) {
    row.on_disk = buffers_.found[next_missing_];
    stored = buffers_.cold_rows.data() + next_missing_ * policy_.stored_floats_;
    ++next_missing_;
  }
  if (row.on_disk) --stripe_->disk_rows;
  if (row.on_disk && !policy_.StoredExpiredAt(stored, clock_)) {
    row.stored = stored;  // brought back, state included
    if (policy_.admit_to_disk_ && has_cold_ && policy_.GetStoredMeta(stored).count + 1 < policy_.admit_after_) {
      row.admitted = false;  // not yet: pushed where it is
      row.to_disk = true;
    }
    return row;
  }
  if (row.on_disk) ++stripe_->stats.expired;
  if (policy_.admit_to_disk_ && has_cold_) {
    if (stripe_->disk_rows < policy_.max_disk_rows_per_stripe_) {
      row.admitted = false;  // its first push, on disk (over an expired copy, if any)
      row.to_disk = true;
      row.stored = nullptr;
    } else {
      ++stripe_->stats.not_admitted;
      if (row.on_disk) buffers_.forget.push_back(key);
      row.admitted = false;
    }
    return row;
  }
  if (!policy_.AdmitLocked(*stripe_, hash)) {
    ++stripe_->stats.not_admitted;
    if (row.on_disk) buffers_.forget.push_back(key);
    row.admitted = false;
  }
  return row;
}

void BoundedPush::Stage(uint64_t key, const float* stored) {
  buffers_.staged_keys.push_back(key);
  buffers_.staged_rows.insert(buffers_.staged_rows.end(), stored, stored + policy_.stored_floats_);
  ++stripe_->disk_rows;
  ++stripe_->stats.staged;
}

void BoundedPush::Inserted(uint32_t id, const NewRow& row) {
  // The store still holds the (now stale) copy of a row that was on disk.
  if (row.on_disk) rows_->SetFlags(id, RowArena::kStored);
  if (row.stored != nullptr) {
    ++stripe_->stats.promoted;
  } else {
    ++stripe_->stats.admitted;
  }
}

absl::Status BoundedPush::EndStripe() {
  Unpin();
  if (!buffers_.staged_keys.empty()) {
    const absl::Status staged = policy_.cold_.load(std::memory_order_acquire)
                                    ->Write(policy_.name_, buffers_.staged_keys, buffers_.staged_rows);
    buffers_.staged_keys.clear();
    buffers_.staged_rows.clear();
    KESTREL_RETURN_IF_ERROR(staged);
  }
  KESTREL_RETURN_IF_ERROR(error_);
  if (!buffers_.forget.empty()) {
    KESTREL_RETURN_IF_ERROR(policy_.cold_.load(std::memory_order_acquire)->Delete(policy_.name_, buffers_.forget));
  }
  // More new rows than the stripe had room for (all pinned): back under the cap now.
  const uint32_t max_rows = policy_.max_rows_per_stripe_.load(std::memory_order_relaxed);
  if (max_rows > 0 && rows_->size() > max_rows) {
    KESTREL_RETURN_IF_ERROR(
        policy_.EvictLocked(*rows_, *stripe_, BoundedPolicy::LowMark(max_rows), clock_));
  }
  return absl::OkStatus();
}

BoundedPull::BoundedPull(const BoundedPolicy& policy, int64_t clock)
    : policy_(policy),
      clock_(clock),
      has_cold_(policy.cold_.load(std::memory_order_acquire) != nullptr),
      missing_([]() -> std::vector<uint32_t>& {
        thread_local std::vector<uint32_t> missing;
        return missing;
      }()) {
  missing_.clear();
}

absl::Status BoundedPull::Finish(absl::Span<const uint64_t> keys, float* out, const RowValues& values,
                                const Initializer& init) {
  if (!missing_.empty()) {
    thread_local std::vector<float> cold_rows;
    thread_local std::vector<uint8_t> found;
    const size_t floats = policy_.stored_floats_;
    const int dim = values.dim();
    KESTREL_RETURN_IF_ERROR(policy_.ReadCold(keys, missing_, &cold_rows, &found));
    for (size_t j = 0; j < missing_.size(); ++j) {
      const uint32_t i = missing_[j];
      float* dst = out + static_cast<size_t>(i) * dim;
      const float* stored = cold_rows.data() + j * floats;
      if (found[j] && !policy_.StoredExpiredAt(stored, clock_)) {
        values.Decode(stored, dst);
        ++disk_hits_;
      } else {
        init.Fill(keys[i], dst, dim);
        values.Round(dst);
        ++misses_;
      }
    }
  }
  policy_.pull_memory_hits_.fetch_add(memory_hits_, std::memory_order_relaxed);
  policy_.pull_disk_hits_.fetch_add(disk_hits_, std::memory_order_relaxed);
  policy_.pull_misses_.fetch_add(misses_, std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace kestrel
