#include "worker/row_cache.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status.h"

namespace kestrel {

RowCache::RowCache(PsClient* client, RowCacheOptions options) : client_(client), options_(options) {}

void RowCache::AddTable(const TableConfig& config) {
  if (config.kind() != TableConfig::SPARSE) return;
  std::unique_ptr<Optimizer> replay;
  // Replayed only where the cached row is exactly the server's: fp32 on the wire and in storage.
  if (config.wire_type() == VALUE_TYPE_FLOAT32 && config.storage().type() == VALUE_TYPE_FLOAT32) {
    absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = Optimizer::Create(config.optimizer(), config.dim());
    if (optimizer.ok() && (*optimizer)->slot_floats() == 0) replay = *std::move(optimizer);
  }
  absl::MutexLock lock(&mu_);
  tables_[config.name()] = std::make_unique<TableCache>(config, std::move(replay));
}

absl::Status RowCache::CreateTable(const TableConfig& config) {
  KESTREL_RETURN_IF_ERROR(client_->CreateTable(config));
  AddTable(config);
  return absl::OkStatus();
}

RowCache::TableCache* RowCache::Find(absl::string_view table) const {
  absl::MutexLock lock(&mu_);
  auto it = tables_.find(table);
  return it == tables_.end() ? nullptr : it->second.get();
}

void RowCache::MakeRoom(TableCache& t, size_t incoming, int64_t read_clock) {
  if (t.index.size() + incoming <= options_.max_rows) return;
  // Rows no read at read_clock or later may use (reads only move forward).
  for (auto it = t.index.begin(); it != t.index.end();) {
    if (it->second.fresh < read_clock - options_.bound) {
      t.free_slots.push_back(it->second.slot);
      t.index.erase(it++);
    } else {
      ++it;
    }
  }
  if (t.index.size() + incoming <= options_.max_rows) return;
  t.index.clear();
  t.free_slots.clear();
  t.values.clear();
}

absl::Status RowCache::Pull(absl::string_view table, const KeyBatch& batch, int dim, float* out,
                            const CallClock& clock) {
  TableCache* t = clock.cache.has_value() ? Find(table) : nullptr;
  if (t == nullptr) return client_->Pull(table, batch, dim, out, clock);
  const int64_t read_clock = clock.cache->read_clock;
  const int64_t fresh_clock = clock.cache->fresh_clock;
  const absl::Span<const uint64_t> keys = batch.unique_keys();
  if (dim != t->config.dim()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table '%s' has dim %d, the pull asks for %d", table, t->config.dim(), dim));
  }
  // Hits are copied and misses collected under the lock; the misses (grouped by server like `keys`) are pulled
  // without it (a push of this table, its replay, stats() all go on meanwhile), then stored unless a fresher
  // copy was stored meanwhile.
  thread_local std::vector<uint64_t> miss_keys;
  thread_local std::vector<size_t> miss_positions;
  thread_local std::vector<float> miss_rows;
  miss_keys.clear();
  miss_positions.clear();
  {
    absl::MutexLock lock(&t->mu);
    const int64_t oldest_usable = read_clock - options_.bound;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = t->index.find(keys[i]);
      if (it != t->index.end() && it->second.fresh >= oldest_usable) {
        std::memcpy(out + i * dim, t->values.data() + static_cast<size_t>(it->second.slot) * dim,
                    dim * sizeof(float));
      } else {
        miss_keys.push_back(keys[i]);
        miss_positions.push_back(i);
      }
    }
  }
  const size_t misses = miss_keys.size();
  {
    absl::MutexLock stats(&stats_mu_);
    hits_ += keys.size() - misses;
    misses_ += misses;
  }
  if (misses == 0) return absl::OkStatus();
  miss_rows.resize(misses * dim);
  absl::Status pulled = client_->Pull(table, miss_keys, dim, miss_rows.data(),
                                     CallClock{clock.clock, std::nullopt, clock.wait_clock});
  if (!pulled.ok()) return pulled;
  absl::MutexLock lock(&t->mu);
  // Stamped when stored: a push that began before this may be in these rows already, so it is not replayed
  // onto them (see Push).
  const uint64_t stored = ++t->seq;
  MakeRoom(*t, misses, read_clock);
  for (size_t m = 0; m < misses; ++m) {
    const float* row = miss_rows.data() + m * dim;
    std::memcpy(out + miss_positions[m] * dim, row, dim * sizeof(float));
    auto [it, inserted] = t->index.try_emplace(miss_keys[m]);
    if (inserted) {
      if (!t->free_slots.empty()) {
        it->second.slot = t->free_slots.back();
        t->free_slots.pop_back();
      } else {
        it->second.slot = static_cast<uint32_t>(t->values.size() / dim);
        t->values.resize(t->values.size() + dim);
      }
    } else if (it->second.fresh > fresh_clock) {
      continue;  // a pull that finished meanwhile stored a fresher copy
    }
    it->second.fresh = fresh_clock;
    it->second.fetched = stored;
    std::memcpy(t->values.data() + static_cast<size_t>(it->second.slot) * dim, row, dim * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status RowCache::Push(absl::string_view table, const KeyBatch& batch, int dim, const float* grads,
                            const CallClock& clock) {
  TableCache* t = Find(table);
  const bool replay = t != nullptr && t->replay != nullptr && dim == t->config.dim();
  uint64_t began = 0;
  if (replay) {
    absl::MutexLock lock(&t->mu);
    began = ++t->seq;
  }
  absl::Status pushed = client_->Push(table, batch, dim, grads, clock);
  if (!pushed.ok() || !replay) return pushed;
  const absl::Span<const uint64_t> keys = batch.unique_keys();
  absl::MutexLock lock(&t->mu);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = t->index.find(keys[i]);
    if (it == t->index.end() || it->second.fetched > began) continue;
    t->replay->Apply(grads + i * dim, t->values.data() + static_cast<size_t>(it->second.slot) * dim, nullptr);
  }
  return absl::OkStatus();
}

RowCacheStats RowCache::stats() const {
  RowCacheStats s;
  {
    absl::MutexLock lock(&stats_mu_);
    s.hits = hits_;
    s.misses = misses_;
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [name, t] : tables_) {
    absl::MutexLock table_lock(&t->mu);
    s.rows += t->index.size();
  }
  return s;
}

}  // namespace kestrel
