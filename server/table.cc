#include "server/table.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>

#include "absl/strings/str_format.h"
#include "common/hash.h"
#include "common/status.h"

namespace kestrel {

struct Table::Scratch {
  std::vector<uint64_t> hashes;  // Mix64 of each key: its index slot
  std::vector<uint32_t> order;   // request positions grouped by stripe (unused when in_order)
  bool in_order = false;         // the request's keys are already grouped by stripe (sorted keys are)
  uint32_t bounds[kStripes + 1];

  uint32_t Position(uint32_t o) const { return in_order ? o : order[o]; }
};

namespace {

constexpr int kKeyFloats = 2;  // the key's 8 bytes at the start of each row

bool ValidTableName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  }
  return true;
}

// Shift that maps a span of `width` keys onto at most Table::kStripes stripes.
int StripeShift(uint64_t width) {
  int shift = 0;
  while ((width >> shift) >= static_cast<uint64_t>(Table::kStripes)) ++shift;
  return shift;
}

// log2 of the rows per arena chunk for rows of `row_floats` floats (see Table::kChunkBytes).
int ChunkShift(int row_floats) {
  const size_t row_bytes = sizeof(float) * row_floats;
  int shift = 0;
  while ((size_t{2} << shift) <= Table::kMaxChunkRows && (size_t{2} << shift) * row_bytes <= Table::kChunkBytes) {
    ++shift;
  }
  return shift;
}

}  // namespace

absl::Status Table::CheckShape(const TableConfig& config) {
  if (!ValidTableName(config.name())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table name '%s' must be 1-64 characters of [A-Za-z0-9_.-]", config.name()));
  }
  if (config.dim() < 1 || config.dim() > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table '%s': dim must be in [1, %d], got %d", config.name(), kMaxDim, config.dim()));
  }
  if (!ValueType_IsValid(config.wire_type())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table '%s': wire_type %d is no ValueType", config.name(), config.wire_type()));
  }
  if (config.kind() == TableConfig::DENSE &&
      (config.dense_size() == 0 || config.dense_size() > kMaxDenseSize)) {
    return absl::InvalidArgumentError(absl::StrFormat("dense table '%s' needs dense_size in [1, %d], got %d",
                                                      config.name(), kMaxDenseSize, config.dense_size()));
  }
  if (config.kind() == TableConfig::SPARSE && config.dense_size() != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sparse table '%s' must not set dense_size", config.name()));
  }
  if (config.has_capacity()) {
    const CapacityPolicy& c = config.capacity();
    if (config.kind() != TableConfig::SPARSE) {
      return absl::InvalidArgumentError(
          absl::StrFormat("dense table '%s' cannot have a capacity policy (only sparse tables grow)", config.name()));
    }
    if (c.admit_after() > kMaxAdmitAfter) {
      return absl::InvalidArgumentError(absl::StrFormat("table '%s': capacity.admit_after must be at most %d, got %d",
                                                        config.name(), kMaxAdmitAfter, c.admit_after()));
    }
    if (c.ttl_clocks() < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("table '%s': capacity.ttl_clocks must be >= 0, got %d", config.name(), c.ttl_clocks()));
    }
    if (c.sketch_bytes() > (uint64_t{1} << 30)) {
      return absl::InvalidArgumentError(absl::StrFormat("table '%s': capacity.sketch_bytes must be at most 1 GiB, got %d",
                                                        config.name(), c.sketch_bytes()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Table>> Table::Create(const TableConfig& config, KeyRange span) {
  KESTREL_RETURN_IF_ERROR(CheckShape(config));
  auto init = Initializer::Create(config.initializer(), config.seed());
  if (!init.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("table '%s': %s", config.name(), init.status().message()));
  }
  auto optimizer = Optimizer::Create(config.optimizer(), config.dim());
  if (!optimizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table '%s': %s", config.name(), optimizer.status().message()));
  }
  return std::unique_ptr<Table>(new Table(config, span, *init, std::move(optimizer).value()));
}

namespace {

// Counters per sketch row per stripe: a power of two, at least 16.
uint32_t SketchWidth(const CapacityPolicy& c) {
  if (c.admit_after() <= 1) return 0;
  const uint64_t bytes = c.sketch_bytes() == 0 ? Table::kDefaultSketchBytes : c.sketch_bytes();
  uint64_t width = 16;
  while (width * 2 * Table::kSketchDepth * Table::kStripes <= bytes) width *= 2;
  return static_cast<uint32_t>(width);
}

}  // namespace

Table::Table(const TableConfig& config, KeyRange span, Initializer init, std::unique_ptr<Optimizer> optimizer)
    : config_(config),
      key_lo_(span.first),
      key_hi_(span.last),
      stripe_shift_(StripeShift(span.last - span.first)),
      dim_(config.dim()),
      meta_floats_(config.has_capacity() ? kMetaFloats : 0),
      meta_offset_(kKeyFloats + config.dim() + optimizer->slot_floats()),
      row_floats_(meta_offset_ + meta_floats_),
      chunk_shift_(ChunkShift(row_floats_)),
      chunk_mask_((uint32_t{1} << chunk_shift_) - 1),
      init_(init),
      optimizer_(std::move(optimizer)),
      admit_after_(config.capacity().admit_after()),
      ttl_(config.capacity().ttl_clocks()),
      sweep_period_(std::max<int64_t>(1, config.capacity().ttl_clocks() / 4)),
      sketch_width_(SketchWidth(config.capacity())),
      max_disk_rows_per_stripe_(config.capacity().max_disk_bytes() /
                                (sizeof(float) * (row_floats_ - kKeyFloats) + sizeof(uint64_t)) / kStripes),
      stripes_(new Stripe[kStripes]) {
  if (sketch_width_ > 0) {
    for (int si = 0; si < kStripes; ++si) {
      absl::MutexLock lock(&stripes_[si].mu);
      stripes_[si].sketch.assign(size_t{kSketchDepth} * sketch_width_, 0);
    }
  }
}

int Table::StripeOf(uint64_t key) const {
  if (key < key_lo_) return 0;  // outside the shard's span: only possible for unvalidated keys
  return static_cast<int>(std::min<uint64_t>((key - key_lo_) >> stripe_shift_, kStripes - 1));
}

void Table::BucketByStripe(absl::Span<const uint64_t> keys, Scratch* scratch) const {
  const size_t n = keys.size();
  scratch->hashes.resize(n);
  uint32_t counts[kStripes + 1] = {0};
  bool in_order = true;
  int previous = 0;
  for (size_t i = 0; i < n; ++i) {
    scratch->hashes[i] = Mix64(keys[i]);
    const int stripe = StripeOf(keys[i]);
    in_order &= stripe >= previous;
    previous = stripe;
    ++counts[stripe + 1];
  }
  for (int s = 0; s < kStripes; ++s) counts[s + 1] += counts[s];
  std::memcpy(scratch->bounds, counts, sizeof(counts));
  scratch->in_order = in_order;
  if (in_order) return;
  scratch->order.resize(n);
  for (size_t i = 0; i < n; ++i) scratch->order[counts[StripeOf(keys[i])]++] = static_cast<uint32_t>(i);
}

int64_t Table::FindLocked(const Stripe& s, uint64_t hash, uint64_t key) const {
  if (s.index.empty()) return -1;
  const size_t mask = s.index.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const uint32_t slot = s.index[i];
    if (slot == 0) return -1;
    if (RowKey(RowLocked(s, slot - 1)) == key) return slot - 1;
  }
}

void Table::GrowIndexLocked(Stripe& s) {
  const size_t capacity = s.index.empty() ? 16 : s.index.size() * 2;
  std::vector<uint32_t> index(capacity, 0);
  const size_t mask = capacity - 1;
  for (uint32_t row = 0; row < s.rows; ++row) {
    size_t i = Mix64(RowKey(RowLocked(s, row))) & mask;
    while (index[i] != 0) i = (i + 1) & mask;
    index[i] = row + 1;
  }
  s.index.swap(index);
}

void Table::InitRow(float* row, uint64_t key, int64_t clock) const {
  float* values = row + kKeyFloats;
  init_.Fill(key, values, dim_);
  optimizer_->InitSlots(values, values + dim_);
  if (meta_floats_ > 0) SetMeta(row, Meta{static_cast<uint32_t>(std::clamp<int64_t>(clock, 0, UINT32_MAX)), 0});
}

absl::StatusOr<float*> Table::InsertLocked(Stripe& s, uint64_t hash, uint64_t key, int64_t clock) {
  const uint32_t max_rows = max_rows_per_stripe_.load(std::memory_order_relaxed);
  if (max_rows > 0 && s.rows >= max_rows) {
    // Full: move the coldest 1/16 out (rows pinned by the push being applied stay).
    KESTREL_RETURN_IF_ERROR(EvictLocked(s, max_rows - std::max<uint32_t>(1, max_rows / 16), clock));
  }
  // Keep the index at most 3/4 full.
  if ((static_cast<size_t>(s.rows) + 1) * 4 > s.index.size() * 3) GrowIndexLocked(s);
  const size_t mask = s.index.size() - 1;
  size_t i = hash & mask;
  while (s.index[i] != 0) i = (i + 1) & mask;
  const uint32_t id = s.rows++;
  s.flags.push_back(kDirty);
  ++s.num_dirty;
  if ((id >> chunk_shift_) == s.chunks.size()) {
    s.chunks.emplace_back(new float[(size_t{1} << chunk_shift_) * row_floats_]);
  }
  s.index[i] = id + 1;
  float* row = RowLocked(s, id);
  std::memcpy(row, &key, sizeof(key));
  return row;
}

void Table::RemoveOneLocked(Stripe& s, uint32_t id) {
  const size_t mask = s.index.size() - 1;
  // The index slot of `id`, then backward-shift deletion (linear probing keeps no tombstones).
  size_t hole = Mix64(RowKey(RowLocked(s, id))) & mask;
  while (s.index[hole] != id + 1) hole = (hole + 1) & mask;
  for (size_t j = (hole + 1) & mask; s.index[j] != 0; j = (j + 1) & mask) {
    const size_t home = Mix64(RowKey(RowLocked(s, s.index[j] - 1))) & mask;
    // The entry at j may fill the hole unless its home lies cyclically in (hole, j].
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      s.index[hole] = s.index[j];
      hole = j;
    }
  }
  s.index[hole] = 0;
  if (s.flags[id] & kDirty) --s.num_dirty;
  const uint32_t last = s.rows - 1;
  if (id != last) {
    // The last row moves into the freed place; its index slot follows.
    float* from = RowLocked(s, last);
    size_t slot = Mix64(RowKey(from)) & mask;
    while (s.index[slot] != last + 1) slot = (slot + 1) & mask;
    s.index[slot] = id + 1;
    std::memcpy(RowLocked(s, id), from, sizeof(float) * row_floats_);
    s.flags[id] = s.flags[last];
  }
  s.flags.pop_back();
  s.rows = last;
  // Free the arena's last chunk once a whole spare chunk is empty (one stays, so a row coming and going does
  // not allocate each time).
  if (s.chunks.size() >= 2 && (static_cast<size_t>(s.rows) >> chunk_shift_) + 2 <= s.chunks.size()) {
    s.chunks.pop_back();
  }
}

absl::Status Table::RemoveLocked(Stripe& s, absl::Span<const uint32_t> ids) {
  ColdTier* cold = cold_.load(std::memory_order_acquire);
  thread_local std::vector<uint64_t> stored;
  stored.clear();
  for (uint32_t id : ids) {
    if (s.flags[id] & kStored) stored.push_back(RowKey(RowLocked(s, id)));
  }
  if (!stored.empty()) {
    if (cold != nullptr) {
      std::sort(stored.begin(), stored.end());
      KESTREL_RETURN_IF_ERROR(cold->Delete(config_.name(), stored));
    } else {
      s.tombstones.insert(s.tombstones.end(), stored.begin(), stored.end());
    }
  }
  for (uint32_t id : ids) RemoveOneLocked(s, id);
  return absl::OkStatus();
}

absl::Status Table::EvictLocked(Stripe& s, uint32_t target, int64_t clock) {
  if (s.rows <= target) return absl::OkStatus();
  struct Candidate {
    uint64_t order;  // last-push clock, then push count
    uint64_t key;
    uint32_t id;
    bool operator<(const Candidate& o) const { return order != o.order ? order < o.order : key < o.key; }
  };
  thread_local std::vector<Candidate> candidates;
  candidates.clear();
  for (uint32_t id = 0; id < s.rows; ++id) {
    if (s.flags[id] & kPinned) continue;
    const float* row = RowLocked(s, id);
    const Meta m = GetMeta(row);
    candidates.push_back({(uint64_t{m.clock} << 32) | m.count, RowKey(row), id});
  }
  const size_t need = std::min<size_t>(s.rows - target, candidates.size());
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
  const int floats = stored_floats();
  for (const Candidate& c : candidates) {
    const float* row = RowLocked(s, c.id);
    ids.push_back(c.id);
    if (ExpiredAt(row, clock)) {
      ++expired;
    } else if (cold != nullptr && s.disk_rows + spill_keys.size() < max_disk_rows_per_stripe_) {
      spill_keys.push_back(c.key);
      spill_rows.insert(spill_rows.end(), row + kKeyFloats, row + kKeyFloats + floats);
    } else {
      ++dropped;
    }
  }
  if (!spill_keys.empty()) {
    KESTREL_RETURN_IF_ERROR(cold->Write(config_.name(), spill_keys, spill_rows));
    // The store now holds these rows: no tombstone and no delete for them.
    for (const Candidate& c : candidates) {
      if (std::binary_search(spill_keys.begin(), spill_keys.end(), c.key)) s.flags[c.id] &= ~kStored;
    }
  }
  std::sort(ids.begin(), ids.end(), std::greater<uint32_t>());
  KESTREL_RETURN_IF_ERROR(RemoveLocked(s, ids));
  s.disk_rows += static_cast<uint32_t>(spill_keys.size());
  s.stats.spilled += spill_keys.size();
  s.stats.expired += expired;
  s.stats.capacity_dropped += dropped;
  return absl::OkStatus();
}

absl::Status Table::SweepLocked(Stripe& s, int64_t clock) {
  thread_local std::vector<uint32_t> ids;
  ids.clear();
  for (uint32_t id = s.rows; id-- > 0;) {
    if (ExpiredAt(RowLocked(s, id), clock)) ids.push_back(id);  // decreasing ids
  }
  KESTREL_RETURN_IF_ERROR(RemoveLocked(s, ids));
  s.stats.expired += ids.size();
  return absl::OkStatus();
}

bool Table::AdmitLocked(Stripe& s, uint64_t hash) {
  if (admit_after_ <= 1) return true;
  // Count-min with conservative update: raise only the counters below the new estimate.
  const uint64_t h1 = Mix64(hash ^ 0x5bd1e9955bd1e995ULL);
  const uint64_t h2 = Mix64(h1) | 1;
  const uint32_t mask = sketch_width_ - 1;
  uint8_t* counters[kSketchDepth];
  uint32_t estimate = 255;
  for (int d = 0; d < kSketchDepth; ++d) {
    counters[d] = &s.sketch[static_cast<size_t>(d) * sketch_width_ + ((h1 + d * h2) & mask)];
    estimate = std::min<uint32_t>(estimate, *counters[d]);
  }
  const uint32_t next = std::min<uint32_t>(estimate + 1, 255);
  for (uint8_t* c : counters) *c = static_cast<uint8_t>(std::max<uint32_t>(*c, next));
  s.sketch_dirty = true;
  if (++s.sketch_increments >= sketch_width_) {
    for (uint8_t& c : s.sketch) c >>= 1;  // age: a key must recur within about a window to be admitted
    s.sketch_increments = 0;
  }
  return next >= admit_after_;
}

absl::Status Table::ReadCold(absl::Span<const uint64_t> keys, const std::vector<uint32_t>& missing,
                             std::vector<float>* rows, std::vector<uint8_t>* found) const {
  thread_local std::vector<uint64_t> cold_keys;
  cold_keys.clear();
  for (uint32_t i : missing) cold_keys.push_back(keys[i]);
  rows->resize(missing.size() * static_cast<size_t>(stored_floats()));
  found->assign(missing.size(), 0);
  return cold_.load(std::memory_order_acquire)->Read(config_.name(), cold_keys, stored_floats(), rows->data(), found);
}

void Table::PrefetchSlotLocked(const Stripe& s, uint64_t hash) const {
  if (!s.index.empty()) __builtin_prefetch(&s.index[hash & (s.index.size() - 1)]);
}

void Table::PrefetchRowLocked(const Stripe& s, uint64_t hash, bool for_write) const {
  if (s.index.empty()) return;
  const uint32_t slot = s.index[hash & (s.index.size() - 1)];
  if (slot == 0) return;
  PrefetchSpan(RowLocked(s, slot - 1), sizeof(float) * row_floats_, for_write);
}

void Table::PrefetchSpan(const void* p, size_t bytes, bool for_write) {
  const char* begin = static_cast<const char*>(p);
  bytes = std::min(bytes, kMaxPrefetchBytes);
  for (size_t off = 0; off < bytes; off += 64) {
    if (for_write) {
      __builtin_prefetch(begin + off, 1);
    } else {
      __builtin_prefetch(begin + off, 0);
    }
  }
}

template <typename Visit>
void Table::VisitStripeLocked(const Stripe& s, const Scratch& scratch, int si, const float* request_rows,
                              bool pushing, Visit visit) const {
  const uint32_t begin = scratch.bounds[si], end = scratch.bounds[si + 1];
  // Rows are scattered in memory, and so are the request's own rows (visited in stripe order): fetch the
  // index slot kSlotAhead keys ahead and the table row and request row kRowAhead keys ahead, so the work
  // below mostly hits the cache. A push writes table rows and reads request rows; a pull the reverse.
  for (uint32_t o = begin; o < std::min(end, begin + kSlotAhead); ++o) {
    PrefetchSlotLocked(s, scratch.hashes[scratch.Position(o)]);
  }
  for (uint32_t o = begin; o < end; ++o) {
    if (o + kSlotAhead < end) PrefetchSlotLocked(s, scratch.hashes[scratch.Position(o + kSlotAhead)]);
    if (o + kRowAhead < end) {
      const uint32_t ahead = scratch.Position(o + kRowAhead);
      PrefetchRowLocked(s, scratch.hashes[ahead], /*for_write=*/pushing);
      PrefetchSpan(request_rows + static_cast<size_t>(ahead) * dim_, sizeof(float) * dim_, /*for_write=*/!pushing);
    }
    visit(scratch.Position(o));
  }
}

absl::Status Table::Pull(absl::Span<const uint64_t> keys, float* out, int64_t clock) const {
  thread_local Scratch scratch;
  BucketByStripe(keys, &scratch);
  const size_t row_bytes = sizeof(float) * dim_;
  if (!bounded()) {
    for (int si = 0; si < kStripes; ++si) {
      if (scratch.bounds[si] == scratch.bounds[si + 1]) continue;
      const Stripe& s = stripes_[si];
      absl::ReaderMutexLock lock(&s.mu);
      VisitStripeLocked(s, scratch, si, out, /*pushing=*/false, [&](uint32_t i) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        const int64_t row = FindLocked(s, scratch.hashes[i], keys[i]);
        float* dst = out + static_cast<size_t>(i) * dim_;
        if (row >= 0) {
          std::memcpy(dst, RowLocked(s, static_cast<uint32_t>(row)) + kKeyFloats, row_bytes);
        } else {
          init_.Fill(keys[i], dst, dim_);
        }
      });
    }
    return absl::OkStatus();
  }
  // Bounded: expired rows read as absent; rows on disk are read there (in place: pulls never move rows, so
  // what memory holds depends only on pushes), in one batch per request after the stripe locks are released.
  // A push applied meanwhile could make such a row stale; under BSP none is (a clock's pushes are applied
  // after every pull of that clock), under SSP/ASP the pull then sees the row as before that push.
  const bool has_cold = cold_.load(std::memory_order_acquire) != nullptr;
  thread_local std::vector<uint32_t> missing;
  thread_local std::vector<float> cold_rows;
  thread_local std::vector<uint8_t> found;
  missing.clear();
  uint64_t memory_hits = 0, disk_hits = 0, misses = 0;
  for (int si = 0; si < kStripes; ++si) {
    if (scratch.bounds[si] == scratch.bounds[si + 1]) continue;
    const Stripe& s = stripes_[si];
    absl::ReaderMutexLock lock(&s.mu);
    const bool disk = has_cold && s.disk_rows > 0;
    VisitStripeLocked(s, scratch, si, out, /*pushing=*/false, [&](uint32_t i) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      const int64_t row = FindLocked(s, scratch.hashes[i], keys[i]);
      float* dst = out + static_cast<size_t>(i) * dim_;
      if (row >= 0) {
        const float* r = RowLocked(s, static_cast<uint32_t>(row));
        if (!ExpiredAt(r, clock)) {
          std::memcpy(dst, r + kKeyFloats, row_bytes);
          ++memory_hits;
          return;
        }
      } else if (disk) {
        missing.push_back(i);
        return;
      }
      init_.Fill(keys[i], dst, dim_);
      ++misses;
    });
  }
  if (!missing.empty()) {
    const size_t floats = stored_floats();
    KESTREL_RETURN_IF_ERROR(ReadCold(keys, missing, &cold_rows, &found));
    for (size_t j = 0; j < missing.size(); ++j) {
      const uint32_t i = missing[j];
      float* dst = out + static_cast<size_t>(i) * dim_;
      const float* stored = cold_rows.data() + j * floats;
      if (found[j] && !Expired(config_, absl::MakeConstSpan(stored, floats), clock)) {
        std::memcpy(dst, stored, row_bytes);
        ++disk_hits;
      } else {
        init_.Fill(keys[i], dst, dim_);
        ++misses;
      }
    }
  }
  pull_memory_hits_.fetch_add(memory_hits, std::memory_order_relaxed);
  pull_disk_hits_.fetch_add(disk_hits, std::memory_order_relaxed);
  pull_misses_.fetch_add(misses, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status Table::Push(absl::Span<const uint64_t> keys, const float* grads, int64_t clock) {
  thread_local Scratch scratch;
  BucketByStripe(keys, &scratch);
  if (!bounded()) {
    for (int si = 0; si < kStripes; ++si) {
      if (scratch.bounds[si] == scratch.bounds[si + 1]) continue;
      Stripe& s = stripes_[si];
      absl::MutexLock lock(&s.mu);
      VisitStripeLocked(s, scratch, si, grads, /*pushing=*/true, [&](uint32_t i) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        const int64_t id = FindLocked(s, scratch.hashes[i], keys[i]);
        float* row;
        if (id >= 0) {
          row = RowLocked(s, static_cast<uint32_t>(id));
          MarkDirtyLocked(s, static_cast<uint32_t>(id));
        } else {
          row = *InsertLocked(s, scratch.hashes[i], keys[i], clock);  // unbounded: never evicts, cannot fail
          InitRow(row, keys[i], clock);
        }
        float* values = row + kKeyFloats;
        optimizer_->Apply(grads + static_cast<size_t>(i) * dim_, values, values + dim_);
      });
    }
    return absl::OkStatus();
  }
  const uint32_t clock32 = static_cast<uint32_t>(std::clamp<int64_t>(clock, 0, UINT32_MAX));
  const bool has_cold = cold_.load(std::memory_order_acquire) != nullptr;
  thread_local std::vector<uint32_t> missing;
  thread_local std::vector<float> cold_rows;
  thread_local std::vector<uint8_t> found;
  thread_local std::vector<uint64_t> forget;  // expired rows found on disk and not admitted again
  const size_t floats = stored_floats();
  for (int si = 0; si < kStripes; ++si) {
    if (scratch.bounds[si] == scratch.bounds[si + 1]) continue;
    Stripe& s = stripes_[si];
    absl::MutexLock lock(&s.mu);
    if (ttl_ > 0 && clock % sweep_period_ == 0 && s.swept_at != clock) {
      KESTREL_RETURN_IF_ERROR(SweepLocked(s, clock));
      s.swept_at = clock;
    }
    // Pin the push's rows in memory (room made for new rows never evicts them) and find those to read from disk.
    auto unpin = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // s.mu is held
      for (uint32_t o = scratch.bounds[si]; o < scratch.bounds[si + 1]; ++o) {
        const uint32_t i = scratch.Position(o);
        const int64_t id = FindLocked(s, scratch.hashes[i], keys[i]);
        if (id >= 0) s.flags[id] &= ~kPinned;
      }
    };
    missing.clear();
    for (uint32_t o = scratch.bounds[si]; o < scratch.bounds[si + 1]; ++o) {
      const uint32_t i = scratch.Position(o);
      const int64_t id = FindLocked(s, scratch.hashes[i], keys[i]);
      if (id >= 0) {
        s.flags[id] |= kPinned;
      } else if (has_cold && s.disk_rows > 0) {
        missing.push_back(i);
      }
    }
    found.assign(missing.size(), 0);
    if (!missing.empty()) {
      absl::Status read = ReadCold(keys, missing, &cold_rows, &found);
      if (!read.ok()) {
        unpin();
        return read;
      }
    }
    forget.clear();
    size_t next_missing = 0;
    absl::Status status;
    for (uint32_t o = scratch.bounds[si]; o < scratch.bounds[si + 1] && status.ok(); ++o) {
      const uint32_t i = scratch.Position(o);
      const uint64_t key = keys[i];
      const int64_t id = FindLocked(s, scratch.hashes[i], key);
      float* row = nullptr;
      if (id >= 0) {
        row = RowLocked(s, static_cast<uint32_t>(id));
        if (ExpiredAt(row, clock)) {  // gone: a new row once admitted again
          ++s.stats.expired;
          if (!AdmitLocked(s, scratch.hashes[i])) {
            ++s.stats.not_admitted;
            continue;
          }
          ++s.stats.admitted;
          InitRow(row, key, clock);
        }
        MarkDirtyLocked(s, static_cast<uint32_t>(id));
      } else {
        const float* stored = nullptr;
        bool on_disk = false;
        if (next_missing < missing.size() && missing[next_missing] == i) {
          on_disk = found[next_missing];
          stored = cold_rows.data() + next_missing * floats;
          ++next_missing;
        }
        if (on_disk) --s.disk_rows;
        if (on_disk && !Expired(config_, absl::MakeConstSpan(stored, floats), clock)) {
          absl::StatusOr<float*> inserted = InsertLocked(s, scratch.hashes[i], key, clock);
          if (!inserted.ok()) {
            ++s.disk_rows;
            status = inserted.status();
            break;
          }
          row = *inserted;
          std::memcpy(row + kKeyFloats, stored, sizeof(float) * floats);
          s.flags[s.rows - 1] |= kStored;  // the store still holds its (now stale) copy
          ++s.stats.promoted;
        } else {
          if (on_disk) ++s.stats.expired;
          if (!AdmitLocked(s, scratch.hashes[i])) {
            ++s.stats.not_admitted;
            if (on_disk) forget.push_back(key);
            continue;
          }
          absl::StatusOr<float*> inserted = InsertLocked(s, scratch.hashes[i], key, clock);
          if (!inserted.ok()) {
            status = inserted.status();
            break;
          }
          row = *inserted;
          InitRow(row, key, clock);
          if (on_disk) s.flags[s.rows - 1] |= kStored;
          ++s.stats.admitted;
        }
      }
      float* values = row + kKeyFloats;
      optimizer_->Apply(grads + static_cast<size_t>(i) * dim_, values, values + dim_);
      const Meta m = GetMeta(row);
      SetMeta(row, Meta{clock32, m.count == UINT32_MAX ? m.count : m.count + 1});
    }
    unpin();
    KESTREL_RETURN_IF_ERROR(status);
    if (!forget.empty()) KESTREL_RETURN_IF_ERROR(cold_.load(std::memory_order_acquire)->Delete(config_.name(), forget));
    // More new rows than the stripe had room for (all pinned): back under the cap now.
    const uint32_t max_rows = max_rows_per_stripe_.load(std::memory_order_relaxed);
    if (max_rows > 0 && s.rows > max_rows) {
      KESTREL_RETURN_IF_ERROR(EvictLocked(s, max_rows - std::max<uint32_t>(1, max_rows / 16), clock));
    }
  }
  return absl::OkStatus();
}

uint64_t Table::num_rows() const {
  uint64_t rows = 0;
  for (int si = 0; si < kStripes; ++si) {
    absl::ReaderMutexLock lock(&stripes_[si].mu);
    rows += stripes_[si].rows + stripes_[si].disk_rows;
  }
  return rows;
}

uint64_t Table::memory_bytes() const {
  uint64_t bytes = 0;
  for (int si = 0; si < kStripes; ++si) {
    const Stripe& s = stripes_[si];
    absl::ReaderMutexLock lock(&s.mu);
    bytes += s.index.capacity() * sizeof(uint32_t);
    bytes += s.chunks.size() * ((uint64_t{1} << chunk_shift_) * row_floats_ * sizeof(float));
    bytes += s.chunks.capacity() * sizeof(std::unique_ptr<float[]>);
    bytes += s.flags.capacity();
    bytes += s.tombstones.capacity() * sizeof(uint64_t);
    bytes += s.sketch.capacity();
  }
  return bytes;
}

uint64_t Table::raw_bytes() const {
  uint64_t rows = 0;
  for (int si = 0; si < kStripes; ++si) {
    absl::ReaderMutexLock lock(&stripes_[si].mu);
    rows += stripes_[si].rows;
  }
  return rows * (sizeof(float) * row_floats_);
}

uint64_t Table::StripeBytes(uint64_t rows) const {
  const uint64_t chunk_rows = uint64_t{1} << chunk_shift_;
  const uint64_t chunks = (rows + chunk_rows - 1) / chunk_rows + 1;  // RemoveOneLocked keeps one spare
  uint64_t index = 16;
  while (rows * 4 > index * 3) index *= 2;
  return chunks * (chunk_rows * row_floats_ * sizeof(float) + sizeof(std::unique_ptr<float[]>)) +
         index * sizeof(uint32_t) + rows;
}

void Table::SetMemoryBudget(uint64_t bytes) {
  memory_budget_.store(bytes, std::memory_order_relaxed);
  if (!bounded() || bytes == 0) {
    max_rows_per_stripe_.store(0, std::memory_order_relaxed);
    return;
  }
  const uint64_t sketch = uint64_t{kSketchDepth} * sketch_width_ * kStripes;
  const uint64_t per_stripe = bytes > sketch ? (bytes - sketch) / kStripes : 0;
  // The most rows whose stripe fits per_stripe (at least 1: a table always takes the row being pushed).
  uint64_t lo = 1, hi = uint64_t{1} << 31;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    if (StripeBytes(mid) <= per_stripe) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  max_rows_per_stripe_.store(static_cast<uint32_t>(std::max<uint64_t>(lo, 16)), std::memory_order_relaxed);
}

void Table::SetColdTier(ColdTier* tier) { cold_.store(bounded() ? tier : nullptr, std::memory_order_release); }

TableTierStats Table::tier_stats() const {
  TableTierStats total;
  for (int si = 0; si < kStripes; ++si) {
    const Stripe& s = stripes_[si];
    absl::ReaderMutexLock lock(&s.mu);
    total.admitted += s.stats.admitted;
    total.not_admitted += s.stats.not_admitted;
    total.expired += s.stats.expired;
    total.capacity_dropped += s.stats.capacity_dropped;
    total.spilled += s.stats.spilled;
    total.promoted += s.stats.promoted;
    total.disk_rows += s.disk_rows;
  }
  total.pull_memory_hits = pull_memory_hits_.load(std::memory_order_relaxed);
  total.pull_disk_hits = pull_disk_hits_.load(std::memory_order_relaxed);
  total.pull_misses = pull_misses_.load(std::memory_order_relaxed);
  total.memory_budget = memory_budget_.load(std::memory_order_relaxed);
  return total;
}

void Table::ForEachRow(const std::function<void(uint64_t, const float*, const float*)>& fn) const {
  for (int si = 0; si < kStripes; ++si) {
    const Stripe& s = stripes_[si];
    absl::ReaderMutexLock lock(&s.mu);
    for (uint32_t row = 0; row < s.rows; ++row) {
      const float* r = RowLocked(s, row);
      fn(RowKey(r), r + kKeyFloats, r + kKeyFloats + dim_);
    }
  }
}

absl::Status Table::ForEachDirtyRow(
    const std::function<absl::Status(uint64_t, absl::Span<const float>)>& fn) const {
  return VisitRows(/*dirty_only=*/true, fn);
}

absl::Status Table::ForEachStoredRow(
    const std::function<absl::Status(uint64_t, absl::Span<const float>)>& fn) const {
  return VisitRows(/*dirty_only=*/false, fn);
}

absl::Status Table::VisitRows(bool dirty_only,
                              const std::function<absl::Status(uint64_t, absl::Span<const float>)>& fn) const {
  const size_t floats = stored_floats();
  std::vector<std::pair<uint64_t, uint32_t>> dirty;  // (key, row id): visited in key order
  for (int si = 0; si < kStripes; ++si) {
    const Stripe& s = stripes_[si];
    absl::ReaderMutexLock lock(&s.mu);
    if (dirty_only && s.num_dirty == 0) continue;
    dirty.clear();
    dirty.reserve(dirty_only ? s.num_dirty : s.rows);
    for (uint32_t id = 0; id < s.rows; ++id) {
      if (!dirty_only || (s.flags[id] & kDirty)) dirty.emplace_back(RowKey(RowLocked(s, id)), id);
    }
    // Stripes are consecutive key slices, so sorting each one gives key order overall: a sorted store (RocksDB)
    // takes rows in key order about three times faster than in insertion order.
    std::sort(dirty.begin(), dirty.end());
    for (const auto& [key, id] : dirty) {
      absl::Status status = fn(key, absl::MakeConstSpan(RowLocked(s, id) + kKeyFloats, floats));
      if (!status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

absl::Status Table::ForEachTombstone(const std::function<absl::Status(uint64_t)>& fn) const {
  std::vector<uint64_t> keys;
  for (int si = 0; si < kStripes; ++si) {
    const Stripe& s = stripes_[si];
    absl::ReaderMutexLock lock(&s.mu);
    keys.assign(s.tombstones.begin(), s.tombstones.end());
    std::sort(keys.begin(), keys.end());
    for (uint64_t key : keys) KESTREL_RETURN_IF_ERROR(fn(key));
  }
  return absl::OkStatus();
}

uint64_t Table::num_dirty() const {
  uint64_t n = 0;
  for (int si = 0; si < kStripes; ++si) {
    absl::ReaderMutexLock lock(&stripes_[si].mu);
    n += stripes_[si].num_dirty;
  }
  return n;
}

void Table::ClearDirty() {
  for (int si = 0; si < kStripes; ++si) {
    Stripe& s = stripes_[si];
    absl::MutexLock lock(&s.mu);
    std::fill(s.flags.begin(), s.flags.end(), kStored);
    s.num_dirty = 0;
    std::vector<uint64_t>().swap(s.tombstones);
    s.sketch_dirty = false;
  }
}

void Table::MarkAllDirty() {
  for (int si = 0; si < kStripes; ++si) {
    Stripe& s = stripes_[si];
    absl::MutexLock lock(&s.mu);
    std::fill(s.flags.begin(), s.flags.end(), kDirty);
    s.num_dirty = s.rows;
    s.sketch_dirty = sketch_width_ > 0;
  }
}

void Table::Clear() {
  for (int si = 0; si < kStripes; ++si) {
    Stripe& s = stripes_[si];
    absl::MutexLock lock(&s.mu);
    std::vector<uint32_t>().swap(s.index);
    std::vector<std::unique_ptr<float[]>>().swap(s.chunks);
    std::vector<uint8_t>().swap(s.flags);
    std::vector<uint64_t>().swap(s.tombstones);
    std::fill(s.sketch.begin(), s.sketch.end(), 0);
    s.sketch_increments = 0;
    s.sketch_dirty = false;
    s.swept_at = -1;
    s.disk_rows = 0;
    s.rows = 0;
    s.num_dirty = 0;
  }
}

absl::Status Table::LoadRow(uint64_t key, absl::Span<const float> row) {
  if (row.size() != static_cast<size_t>(stored_floats())) {
    return absl::InvalidArgumentError(absl::StrFormat("table '%s': a stored row has %d floats, expected %d",
                                                      config_.name(), row.size(), stored_floats()));
  }
  Stripe& s = stripes_[StripeOf(key)];
  absl::MutexLock lock(&s.mu);
  const uint64_t hash = Mix64(key);
  const int64_t id = FindLocked(s, hash, key);
  float* r;
  if (id >= 0) {
    r = RowLocked(s, static_cast<uint32_t>(id));
    MarkDirtyLocked(s, static_cast<uint32_t>(id));
  } else {
    KESTREL_ASSIGN_OR_RETURN(r, InsertLocked(s, hash, key, /*clock=*/0));  // every float is overwritten below
  }
  std::memcpy(r + kKeyFloats, row.data(), sizeof(float) * row.size());
  return absl::OkStatus();
}

absl::StatusOr<int> Table::StoredFloats(const TableConfig& config) {
  KESTREL_RETURN_IF_ERROR(CheckShape(config));
  KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, Optimizer::Create(config.optimizer(), config.dim()));
  return config.dim() + optimizer->slot_floats() + (config.has_capacity() ? kMetaFloats : 0);
}

bool Table::Expired(const TableConfig& config, absl::Span<const float> stored_row, int64_t clock) {
  const int64_t ttl = config.capacity().ttl_clocks();
  if (!config.has_capacity() || ttl <= 0 || stored_row.size() < static_cast<size_t>(kMetaFloats)) return false;
  uint32_t last;
  std::memcpy(&last, stored_row.data() + stored_row.size() - kMetaFloats, sizeof(last));
  return clock - static_cast<int64_t>(last) > ttl;
}

bool Table::sketch_dirty() const {
  for (int si = 0; si < kStripes; ++si) {
    absl::ReaderMutexLock lock(&stripes_[si].mu);
    if (stripes_[si].sketch_dirty) return true;
  }
  return false;
}

std::optional<AdmissionSketchState> Table::SketchState() const {
  if (sketch_width_ == 0) return std::nullopt;
  AdmissionSketchState state;
  state.set_key_lo(key_lo_);
  state.set_key_hi(key_hi_);
  state.set_depth(kSketchDepth);
  state.set_width(sketch_width_);
  for (int si = 0; si < kStripes; ++si) {
    const Stripe& s = stripes_[si];
    absl::ReaderMutexLock lock(&s.mu);
    AdmissionSketchState::Stripe* out = state.add_stripes();
    out->set_counters(std::string(s.sketch.begin(), s.sketch.end()));
    out->set_increments(s.sketch_increments);
  }
  return state;
}

absl::Status Table::LoadSketchState(const AdmissionSketchState& state) {
  const size_t counters = size_t{kSketchDepth} * sketch_width_;
  if (sketch_width_ == 0 || state.key_lo() != key_lo_ || state.key_hi() != key_hi_ ||
      state.depth() != kSketchDepth || state.width() != sketch_width_ || state.stripes_size() != kStripes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "table '%s': the admission sketch was written for another shape or key span", config_.name()));
  }
  for (const auto& stripe : state.stripes()) {
    if (stripe.counters().size() != counters || stripe.increments() >= sketch_width_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("table '%s': a malformed admission sketch stripe", config_.name()));
    }
  }
  for (int si = 0; si < kStripes; ++si) {
    Stripe& s = stripes_[si];
    absl::MutexLock lock(&s.mu);
    const std::string& c = state.stripes(si).counters();
    s.sketch.assign(c.begin(), c.end());
    s.sketch_increments = state.stripes(si).increments();
    s.sketch_dirty = true;
  }
  return absl::OkStatus();
}

uint64_t Table::Fingerprint() const { return HashCombine(Hash64(config_.SerializeAsString()), RowsFingerprint()); }

uint64_t Table::RowsFingerprint() const {
  uint64_t sum = 0;
  const size_t bytes = sizeof(float) * stored_floats();
  ForEachRow([&](uint64_t key, const float* values, const float*) {
    // values, slots and meta are contiguous.
    sum += HashCombine(key, Hash64(absl::string_view(reinterpret_cast<const char*>(values), bytes)));
  });
  return sum;
}

}  // namespace kestrel
