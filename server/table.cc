#include "server/table.h"

#include <algorithm>
#include <cctype>
#include <cstring>

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
  if (config.kind() == TableConfig::DENSE &&
      (config.dense_size() == 0 || config.dense_size() > kMaxDenseSize)) {
    return absl::InvalidArgumentError(absl::StrFormat("dense table '%s' needs dense_size in [1, %d], got %d",
                                                      config.name(), kMaxDenseSize, config.dense_size()));
  }
  if (config.kind() == TableConfig::SPARSE && config.dense_size() != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sparse table '%s' must not set dense_size", config.name()));
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

Table::Table(const TableConfig& config, KeyRange span, Initializer init, std::unique_ptr<Optimizer> optimizer)
    : config_(config),
      key_lo_(span.first),
      stripe_shift_(StripeShift(span.last - span.first)),
      dim_(config.dim()),
      row_floats_(kKeyFloats + config.dim() + optimizer->slot_floats()),
      chunk_shift_(ChunkShift(row_floats_)),
      chunk_mask_((uint32_t{1} << chunk_shift_) - 1),
      init_(init),
      optimizer_(std::move(optimizer)),
      stripes_(new Stripe[kStripes]) {}

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

float* Table::FindOrCreateLocked(Stripe& s, uint64_t hash, uint64_t key, bool initialize) {
  // Keep the index at most 3/4 full.
  if ((static_cast<size_t>(s.rows) + 1) * 4 > s.index.size() * 3) GrowIndexLocked(s);
  const size_t mask = s.index.size() - 1;
  size_t i = hash & mask;
  for (;; i = (i + 1) & mask) {
    const uint32_t slot = s.index[i];
    if (slot == 0) break;
    const uint32_t id = slot - 1;
    float* row = RowLocked(s, id);
    if (RowKey(row) == key) {
      s.num_dirty += s.dirty[id] ^ 1;
      s.dirty[id] = 1;
      return row;
    }
  }
  const uint32_t id = s.rows++;
  s.dirty.push_back(1);
  ++s.num_dirty;
  if ((id >> chunk_shift_) == s.chunks.size()) {
    s.chunks.emplace_back(new float[(size_t{1} << chunk_shift_) * row_floats_]);
  }
  s.index[i] = id + 1;
  float* row = RowLocked(s, id);
  std::memcpy(row, &key, sizeof(key));
  if (initialize) {
    float* values = row + kKeyFloats;
    init_.Fill(key, values, dim_);
    optimizer_->InitSlots(values, values + dim_);
  }
  return row;
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

void Table::Pull(absl::Span<const uint64_t> keys, float* out) const {
  thread_local Scratch scratch;
  BucketByStripe(keys, &scratch);
  const size_t row_bytes = sizeof(float) * dim_;
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
}

void Table::Push(absl::Span<const uint64_t> keys, const float* grads) {
  thread_local Scratch scratch;
  BucketByStripe(keys, &scratch);
  for (int si = 0; si < kStripes; ++si) {
    if (scratch.bounds[si] == scratch.bounds[si + 1]) continue;
    Stripe& s = stripes_[si];
    absl::MutexLock lock(&s.mu);
    VisitStripeLocked(s, scratch, si, grads, /*pushing=*/true, [&](uint32_t i) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      float* values = FindOrCreateLocked(s, scratch.hashes[i], keys[i]) + kKeyFloats;
      optimizer_->Apply(grads + static_cast<size_t>(i) * dim_, values, values + dim_);
    });
  }
}

uint64_t Table::num_rows() const {
  uint64_t rows = 0;
  for (int si = 0; si < kStripes; ++si) {
    absl::ReaderMutexLock lock(&stripes_[si].mu);
    rows += stripes_[si].rows;
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
    bytes += s.dirty.capacity();
  }
  return bytes;
}

uint64_t Table::raw_bytes() const { return num_rows() * (sizeof(float) * row_floats_); }

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
  const size_t floats = stored_floats();
  std::vector<std::pair<uint64_t, uint32_t>> dirty;  // (key, row id): visited in key order
  for (int si = 0; si < kStripes; ++si) {
    const Stripe& s = stripes_[si];
    absl::ReaderMutexLock lock(&s.mu);
    if (s.num_dirty == 0) continue;
    dirty.clear();
    dirty.reserve(s.num_dirty);
    for (uint32_t id = 0; id < s.rows; ++id) {
      if (s.dirty[id]) dirty.emplace_back(RowKey(RowLocked(s, id)), id);
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
    std::fill(s.dirty.begin(), s.dirty.end(), 0);
    s.num_dirty = 0;
  }
}

void Table::MarkAllDirty() {
  for (int si = 0; si < kStripes; ++si) {
    Stripe& s = stripes_[si];
    absl::MutexLock lock(&s.mu);
    std::fill(s.dirty.begin(), s.dirty.end(), 1);
    s.num_dirty = s.rows;
  }
}

void Table::Clear() {
  for (int si = 0; si < kStripes; ++si) {
    Stripe& s = stripes_[si];
    absl::MutexLock lock(&s.mu);
    std::vector<uint32_t>().swap(s.index);
    std::vector<std::unique_ptr<float[]>>().swap(s.chunks);
    std::vector<uint8_t>().swap(s.dirty);
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
  float* r = FindOrCreateLocked(s, Mix64(key), key, /*initialize=*/false);  // every float is overwritten
  std::memcpy(r + kKeyFloats, row.data(), sizeof(float) * row.size());
  return absl::OkStatus();
}

uint64_t Table::Fingerprint() const { return HashCombine(Hash64(config_.SerializeAsString()), RowsFingerprint()); }

uint64_t Table::RowsFingerprint() const {
  uint64_t sum = 0;
  const size_t bytes = sizeof(float) * (dim_ + slot_floats());
  ForEachRow([&](uint64_t key, const float* values, const float*) {
    // values and slots are contiguous.
    sum += HashCombine(key, Hash64(absl::string_view(reinterpret_cast<const char*>(values), bytes)));
  });
  return sum;
}

}  // namespace kestrel
