// Table: the lock stripes, Pull's and Push's one loop over them, the checkpoint views (see table.h).
#include "server/table.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/hash.h"
#include "server/checkpoint_row_codec.h"
#include "common/status.h"

namespace kestrel {
namespace {

constexpr int kKeyFloats = RowArena::kKeyFloats;

// Counts the retained copies a stripe's arena gains while it lives (one request's work under the stripe's lock)
// in the shard's CutMemory.
class RetainedDelta {
 public:
  RetainedDelta(const RowArena& rows, CutMemory* memory)
      : rows_(rows), memory_(memory), before_(memory != nullptr ? rows.retained_bytes() : 0) {}
  ~RetainedDelta() {
    if (memory_ == nullptr) return;
    const uint64_t after = rows_.retained_bytes();
    if (after > before_) memory_->Add(after - before_);
  }

 private:
  const RowArena& rows_;
  CutMemory* const memory_;
  const uint64_t before_;
};

bool ValidTableName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  }
  return true;
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
  KESTREL_RETURN_IF_ERROR(RowValues::Check(config));
  KESTREL_RETURN_IF_ERROR(CheckCheckpointCodec(config));
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
    if (c.admit_to_disk() && (c.max_disk_bytes() == 0 || c.admit_after() <= 1)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "table '%s': capacity.admit_to_disk needs a disk tier (max_disk_bytes > 0) and admit_after > 1",
          config.name()));
    }
    if (c.sketch_bytes() > (uint64_t{1} << 30)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "table '%s': capacity.sketch_bytes must be at most 1 GiB, got %d", config.name(), c.sketch_bytes()));
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

Table::Table(const TableConfig& config, KeyRange span, Initializer init, std::unique_ptr<Optimizer> optimizer)
    : config_(config),
      key_stripes_(span),
      dim_(config.dim()),
      values_(config),
      row_floats_(kKeyFloats + values_.words() + optimizer->slot_floats() + (config.has_capacity() ? kMetaFloats : 0)),
      init_(init),
      optimizer_(std::move(optimizer)),
      policy_(config, row_floats_),
      stripes_(new Stripe[kStripes]) {
  for (int si = 0; si < kStripes; ++si) {
    absl::MutexLock lock(&stripes_[si].mu);
    stripes_[si].rows = RowArena(row_floats_);
    if (policy_.sketch_width() > 0) stripes_[si].bounded.sketch = AdmissionSketch(policy_.sketch_width());
  }
}

namespace {

// dim fp32 values of the row being updated (compact storage), per thread.
float* ScratchValues() {
  thread_local std::vector<float> scratch(Table::kMaxDim);
  return scratch.data();
}

}  // namespace

void Table::InitRow(float* row, uint64_t key) const {
  float* values = row + kKeyFloats;
  float* slots = values + values_.words();
  if (!values_.compact()) {
    init_.Fill(key, values, dim_);
    optimizer_->InitSlots(values, slots);
    return;
  }
  float* w = ScratchValues();
  InitialValues(key, w);
  optimizer_->InitSlots(w, slots);
  values_.Encode(w, values, /*noise=*/0);  // exact: already rounded
}

void Table::ApplyGradient(uint64_t key, const float* g, float* row, int64_t clock) const {
  float* values = row + kKeyFloats;
  float* slots = values + values_.words();
  if (!values_.compact()) {
    optimizer_->Apply(g, values, slots);
    return;
  }
  float* w = ScratchValues();
  values_.Decode(values, w);
  optimizer_->Apply(g, w, slots);
  values_.Encode(w, values, values_.Noise(key, clock));
}

template <typename Work>
absl::Status Table::ForEachRequestStripe(const StripedKeys& request, size_t keys, Work work) const {
  if (stripe_pool_ == nullptr || bounded() || keys < kSpreadKeys) {
    for (int si = 0; si < kStripes; ++si) {
      if (!request.empty(si)) KESTREL_RETURN_IF_ERROR(work(si));
    }
    return absl::OkStatus();
  }
  // Groups of contiguous stripes holding about keys / groups keys each: group g ends at the first stripe where
  // the keys so far reach (g + 1) * keys / groups.
  const int groups = stripe_pool_->size() + 1;
  std::vector<int> ends(groups, kStripes);
  size_t so_far = 0;
  for (int si = 0, g = 0; si < kStripes && g < groups - 1; ++si) {
    so_far += request.Stripe(si).end - request.Stripe(si).begin;
    while (g < groups - 1 && so_far * groups >= static_cast<size_t>(g + 1) * keys) ends[g++] = si + 1;
  }
  std::vector<absl::Status> statuses(groups);
  auto run_group = [&](int g) {
    for (int si = g == 0 ? 0 : ends[g - 1]; si < ends[g]; ++si) {
      if (request.empty(si)) continue;
      statuses[g] = work(si);
      if (!statuses[g].ok()) return;
    }
  };
  absl::BlockingCounter done(groups - 1);
  for (int g = 1; g < groups; ++g) {
    stripe_pool_->Schedule([&run_group, &done, g] {
      run_group(g);
      done.DecrementCount();
    });
  }
  run_group(0);
  done.Wait();
  for (const absl::Status& status : statuses) KESTREL_RETURN_IF_ERROR(status);
  return absl::OkStatus();
}

template <typename Visit>
void Table::VisitStripeLocked(const Stripe& s, StripeKeys request, const float* request_rows, bool pushing,
                              Visit visit) const {
  const uint32_t begin = request.begin, end = request.end;
  // Rows are scattered in memory, and so are the request's own rows (visited in stripe order): fetch the
  // index slot kSlotAhead keys ahead and the table row and request row kRowAhead keys ahead, so the work
  // below mostly hits the cache. A push writes table rows and reads request rows; a pull the reverse.
  for (uint32_t o = begin; o < std::min(end, begin + kSlotAhead); ++o) {
    s.rows.PrefetchSlot(request.hashes[request.Position(o)]);
  }
  for (uint32_t o = begin; o < end; ++o) {
    if (o + kSlotAhead < end) s.rows.PrefetchSlot(request.hashes[request.Position(o + kSlotAhead)]);
    if (o + kRowAhead < end) {
      const uint32_t ahead = request.Position(o + kRowAhead);
      s.rows.PrefetchRow(request.hashes[ahead], /*for_write=*/pushing);
      PrefetchSpan(request_rows + static_cast<size_t>(ahead) * dim_, sizeof(float) * dim_, /*for_write=*/!pushing);
    }
    if (!visit(request.Position(o))) return;
  }
}

absl::Status Table::Pull(absl::Span<const uint64_t> keys, float* out, int64_t clock) const {
  thread_local StripedKeys request;
  request.Group(keys, key_stripes_);
  return bounded() ? PullWith<BoundedPull>(keys, request, out, clock)
                   : PullWith<UnboundedPull>(keys, request, out, clock);
}

template <typename Hooks>
absl::Status Table::PullWith(absl::Span<const uint64_t> keys, const StripedKeys& request, float* out,
                             int64_t clock) const {
  const size_t row_bytes = sizeof(float) * dim_;
  Hooks hooks(policy_, clock);
  // Spread (ForEachRequestStripe) only for unbounded tables, whose hooks hold nothing.
  KESTREL_RETURN_IF_ERROR(ForEachRequestStripe(request, keys.size(), [&](int si) {
    const Stripe& s = stripes_[si];
    absl::ReaderMutexLock lock(&s.mu);
    hooks.BeginStripe(s.bounded);
    const StripeKeys stripe_keys = request.Stripe(si);
    VisitStripeLocked(s, stripe_keys, out, /*pushing=*/false, [&](uint32_t i) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      const int64_t id = s.rows.Find(stripe_keys.hashes[i], keys[i]);
      float* dst = out + static_cast<size_t>(i) * dim_;
      if (id >= 0) {
        const float* row = s.rows.row(static_cast<uint32_t>(id));
        if (hooks.Live(row)) {
          if (values_.compact()) {
            values_.Decode(row + kKeyFloats, dst);
          } else {
            std::memcpy(dst, row + kKeyFloats, row_bytes);
          }
          hooks.Hit();
          return true;
        }
      } else if (hooks.Defer(i)) {
        return true;
      }
      InitialValues(keys[i], dst);
      hooks.Miss();
      return true;
    });
    return absl::OkStatus();
  }));
  return hooks.Finish(keys, out, values_, init_);
}

absl::Status Table::Push(absl::Span<const uint64_t> keys, const float* grads, int64_t clock) {
  thread_local StripedKeys request;
  request.Group(keys, key_stripes_);
  return bounded() ? PushWith<BoundedPush>(keys, request, grads, clock)
                   : PushWith<UnboundedPush>(keys, request, grads, clock);
}

template <typename Hooks>
absl::Status Table::PushWith(absl::Span<const uint64_t> keys, const StripedKeys& request, const float* grads,
                             int64_t clock) {
  const size_t stored_bytes = sizeof(float) * stored_floats();
  if (cut_memory_ != nullptr) cut_memory_->AwaitRoom();  // before any lock: the writer frees copies under them
  Hooks hooks(policy_, clock);
  // Spread (ForEachRequestStripe) only for unbounded tables, whose hooks hold nothing.
  return ForEachRequestStripe(request, keys.size(), [&](int si) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Stripe& s = stripes_[si];
    absl::MutexLock lock(&s.mu);
    RetainedDelta retained(s.rows, cut_memory_);
    const StripeKeys stripe_keys = request.Stripe(si);
    KESTREL_RETURN_IF_ERROR(hooks.BeginStripe(s.rows, s.bounded, keys, stripe_keys));
    VisitStripeLocked(s, stripe_keys, grads, /*pushing=*/true, [&](uint32_t i) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      const uint64_t key = keys[i];
      const uint64_t hash = stripe_keys.hashes[i];
      const int64_t id = s.rows.Find(hash, key);
      float* row;
      if (id >= 0) {
        row = s.rows.row(static_cast<uint32_t>(id));
        if (hooks.Expired(row)) {  // gone: a new row once admitted again
          if (!hooks.Readmit(hash)) return true;
          s.rows.Preserve(static_cast<uint32_t>(id));
          InitRow(row, key);
          hooks.Fresh(row);
        }
        s.rows.MarkDirty(static_cast<uint32_t>(id));
      } else {
        const NewRow fresh = hooks.Absent(i, hash, key);
        if (!fresh.admitted) {
          if (fresh.to_disk) StageOnDisk(key, grads + static_cast<size_t>(i) * dim_, fresh, hooks, clock);
          return true;
        }
        if (!hooks.MakeRoom()) {
          hooks.InsertFailed(fresh);
          return false;
        }
        const uint32_t new_id = s.rows.Insert(hash, key);
        row = s.rows.row(new_id);
        if (fresh.stored != nullptr) {
          std::memcpy(row + kKeyFloats, fresh.stored, stored_bytes);
        } else {
          InitRow(row, key);
          hooks.Fresh(row);
        }
        hooks.Inserted(new_id, fresh);
      }
      ApplyGradient(key, grads + static_cast<size_t>(i) * dim_, row, clock);
      hooks.Pushed(row);
      return true;
    });
    return hooks.EndStripe();
  });
}

template <typename Hooks>
void Table::StageOnDisk(uint64_t key, const float* g, const NewRow& fresh, Hooks& hooks, int64_t clock) const {
  thread_local std::vector<float> scratch;
  scratch.resize(row_floats_);
  float* row = scratch.data();
  std::memcpy(row, &key, sizeof(key));
  if (fresh.stored != nullptr) {
    std::memcpy(row + kKeyFloats, fresh.stored, sizeof(float) * stored_floats());
  } else {
    InitRow(row, key);
    hooks.Fresh(row);
  }
  ApplyGradient(key, g, row, clock);
  hooks.Pushed(row);
  hooks.Stage(key, row + kKeyFloats);
}

uint64_t Table::num_rows() const {
  uint64_t rows = 0;
  for (int si = 0; si < kStripes; ++si) {
    absl::ReaderMutexLock lock(&stripes_[si].mu);
    rows += stripes_[si].rows.size() + stripes_[si].bounded.disk_rows;
  }
  return rows;
}

uint64_t Table::memory_bytes() const {
  uint64_t bytes = 0;
  for (int si = 0; si < kStripes; ++si) {
    const Stripe& s = stripes_[si];
    absl::ReaderMutexLock lock(&s.mu);
    bytes += s.rows.memory_bytes() + s.bounded.memory_bytes();
  }
  return bytes;
}

uint64_t Table::raw_bytes() const {
  uint64_t rows = 0;
  for (int si = 0; si < kStripes; ++si) {
    absl::ReaderMutexLock lock(&stripes_[si].mu);
    rows += stripes_[si].rows.size();
  }
  return rows * (sizeof(float) * row_floats_);
}

TableTierStats Table::tier_stats() const {
  TableTierStats total;
  for (int si = 0; si < kStripes; ++si) {
    const Stripe& s = stripes_[si];
    absl::ReaderMutexLock lock(&s.mu);
    const TableTierStats& stats = s.bounded.stats;
    total.admitted += stats.admitted;
    total.not_admitted += stats.not_admitted;
    total.staged += stats.staged;
    total.expired += stats.expired;
    total.capacity_dropped += stats.capacity_dropped;
    total.spilled += stats.spilled;
    total.promoted += stats.promoted;
    total.disk_rows += s.bounded.disk_rows;
  }
  policy_.AddPullStats(&total);
  total.memory_budget = policy_.memory_budget();
  return total;
}

void Table::ForEachRow(const std::function<void(uint64_t, const float*, const float*)>& fn) const {
  for (int si = 0; si < kStripes; ++si) {
    const Stripe& s = stripes_[si];
    absl::ReaderMutexLock lock(&s.mu);
    for (uint32_t id = 0; id < s.rows.size(); ++id) {
      const float* r = s.rows.row(id);
      fn(RowArena::KeyOf(r), r + kKeyFloats, r + kKeyFloats + values_.words());
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
    if (dirty_only && s.rows.num_dirty() == 0) continue;
    dirty.clear();
    dirty.reserve(dirty_only ? s.rows.num_dirty() : s.rows.size());
    for (uint32_t id = 0; id < s.rows.size(); ++id) {
      if (!dirty_only || (s.rows.flags(id) & RowArena::kDirty)) dirty.emplace_back(RowArena::KeyOf(s.rows.row(id)), id);
    }
    // Stripes are consecutive key slices, so sorting each one gives key order overall: a sorted store (RocksDB)
    // takes rows in key order about three times faster than in insertion order.
    std::sort(dirty.begin(), dirty.end());
    for (const auto& [key, id] : dirty) {
      absl::Status status = fn(key, absl::MakeConstSpan(s.rows.row(id) + kKeyFloats, floats));
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
    keys.assign(s.bounded.tombstones.begin(), s.bounded.tombstones.end());
    std::sort(keys.begin(), keys.end());
    for (uint64_t key : keys) KESTREL_RETURN_IF_ERROR(fn(key));
  }
  return absl::OkStatus();
}

std::optional<AdmissionSketchState> Table::BeginCut() {
  std::optional<AdmissionSketchState> sketch;
  if (sketch_dirty()) sketch = SketchState();
  for (int si = 0; si < kStripes; ++si) {
    Stripe& s = stripes_[si];
    absl::MutexLock lock(&s.mu);
    s.rows.BeginCut();
    s.bounded.cut_tombstones = s.bounded.tombstones.size();
    s.bounded.sketch.ClearDirty();
  }
  return sketch;
}

bool Table::cut_pending() const {
  for (int si = 0; si < kStripes; ++si) {
    absl::ReaderMutexLock lock(&stripes_[si].mu);
    if (stripes_[si].rows.cut_pending()) return true;
  }
  return false;
}

absl::Status Table::WriteCutStripe(int stripe, const std::function<absl::Status(uint64_t)>& tombstone,
                                   const std::function<absl::Status(uint64_t, absl::Span<const float>)>& row) {
  // The stripe's cut is copied out under its lock (a scan of its flags and a copy of its rows: pushes to the stripe
  // wait that long) and handed to the callbacks, in key order, after the lock is released.
  thread_local std::vector<uint64_t> tombstones;
  thread_local std::vector<float> rows;  // row_floats_ per row, key first
  thread_local std::vector<std::pair<uint64_t, size_t>> order;  // (key, offset in rows)
  tombstones.clear();
  rows.clear();
  {
    Stripe& s = stripes_[stripe];
    absl::MutexLock lock(&s.mu);
    if (!s.rows.cut_pending()) return absl::OkStatus();
    std::vector<uint64_t>& stripe_tombstones = s.bounded.tombstones;
    const auto cut_end = stripe_tombstones.begin() + s.bounded.cut_tombstones;
    tombstones.assign(stripe_tombstones.begin(), cut_end);
    rows.reserve(static_cast<size_t>(s.rows.num_dirty()) * row_floats_);
    s.rows.ForEachCutRow([&](const float* r) { rows.insert(rows.end(), r, r + row_floats_); });
    ReleaseRetainedLocked(s);
    s.rows.EndCut();
    stripe_tombstones.erase(stripe_tombstones.begin(), cut_end);
    s.bounded.cut_tombstones = 0;
  }
  std::sort(tombstones.begin(), tombstones.end());
  for (uint64_t key : tombstones) KESTREL_RETURN_IF_ERROR(tombstone(key));
  // In key order (a sorted store takes rows in key order faster), as ForEachDirtyRow.
  order.clear();
  for (size_t offset = 0; offset < rows.size(); offset += row_floats_) {
    order.emplace_back(RowArena::KeyOf(rows.data() + offset), offset);
  }
  std::sort(order.begin(), order.end());
  const size_t floats = stored_floats();
  for (const auto& [key, offset] : order) {
    KESTREL_RETURN_IF_ERROR(row(key, absl::MakeConstSpan(rows.data() + offset + kKeyFloats, floats)));
  }
  return absl::OkStatus();
}

void Table::ReleaseRetainedLocked(Stripe& s) {
  const uint64_t held = s.rows.retained_bytes();
  if (cut_memory_ != nullptr && held > 0) cut_memory_->Release(held);
}

uint64_t Table::num_dirty() const {
  uint64_t n = 0;
  for (int si = 0; si < kStripes; ++si) {
    absl::ReaderMutexLock lock(&stripes_[si].mu);
    n += stripes_[si].rows.num_dirty();
  }
  return n;
}

void Table::ClearDirty() {
  for (int si = 0; si < kStripes; ++si) {
    Stripe& s = stripes_[si];
    absl::MutexLock lock(&s.mu);
    s.rows.ClearDirty();
    s.bounded.ClearDirty();
  }
}

void Table::MarkAllDirty() {
  for (int si = 0; si < kStripes; ++si) {
    Stripe& s = stripes_[si];
    absl::MutexLock lock(&s.mu);
    ReleaseRetainedLocked(s);
    s.rows.MarkAllDirty();
    s.bounded.cut_tombstones = 0;
    s.bounded.sketch.MarkDirty();
  }
}

void Table::Clear() {
  for (int si = 0; si < kStripes; ++si) {
    Stripe& s = stripes_[si];
    absl::MutexLock lock(&s.mu);
    ReleaseRetainedLocked(s);
    s.rows.Clear();
    s.bounded.Clear();
  }
}

absl::Status Table::LoadRow(uint64_t key, absl::Span<const float> row) {
  if (row.size() != static_cast<size_t>(stored_floats())) {
    return absl::InvalidArgumentError(absl::StrFormat("table '%s': a stored row has %d floats, expected %d",
                                                      config_.name(), row.size(), stored_floats()));
  }
  Stripe& s = stripes_[key_stripes_.StripeOf(key)];
  absl::MutexLock lock(&s.mu);
  RetainedDelta retained(s.rows, cut_memory_);
  const uint64_t hash = Mix64(key);
  const int64_t found = s.rows.Find(hash, key);
  uint32_t id;
  if (found >= 0) {
    id = static_cast<uint32_t>(found);
    s.rows.MarkDirty(id);
  } else {
    KESTREL_RETURN_IF_ERROR(policy_.MakeRoomLocked(s.rows, s.bounded, /*clock=*/0));
    id = s.rows.Insert(hash, key);  // every float is overwritten below
  }
  std::memcpy(s.rows.row(id) + kKeyFloats, row.data(), sizeof(float) * row.size());
  return absl::OkStatus();
}

absl::StatusOr<int> Table::StoredFloats(const TableConfig& config) {
  KESTREL_RETURN_IF_ERROR(CheckShape(config));
  KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, Optimizer::Create(config.optimizer(), config.dim()));
  return RowValues::WordsFor(config) + optimizer->slot_floats() + (config.has_capacity() ? kMetaFloats : 0);
}

bool Table::sketch_dirty() const {
  for (int si = 0; si < kStripes; ++si) {
    absl::ReaderMutexLock lock(&stripes_[si].mu);
    if (stripes_[si].bounded.sketch.dirty()) return true;
  }
  return false;
}

std::optional<AdmissionSketchState> Table::SketchState() const {
  if (policy_.sketch_width() == 0) return std::nullopt;
  AdmissionSketchState state;
  state.set_key_lo(key_stripes_.key_lo());
  state.set_key_hi(key_stripes_.key_hi());
  state.set_depth(AdmissionSketch::kDepth);
  state.set_width(policy_.sketch_width());
  for (int si = 0; si < kStripes; ++si) {
    const Stripe& s = stripes_[si];
    absl::ReaderMutexLock lock(&s.mu);
    s.bounded.sketch.Save(state.add_stripes());
  }
  return state;
}

absl::Status Table::LoadSketchState(const AdmissionSketchState& state) {
  const uint32_t width = policy_.sketch_width();
  if (width == 0 || state.key_lo() != key_stripes_.key_lo() || state.key_hi() != key_stripes_.key_hi() ||
      state.depth() != AdmissionSketch::kDepth || state.width() != width || state.stripes_size() != kStripes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "table '%s': the admission sketch was written for another shape or key span", config_.name()));
  }
  for (const auto& stripe : state.stripes()) {
    if (!AdmissionSketch::Fits(stripe, width)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("table '%s': a malformed admission sketch stripe", config_.name()));
    }
  }
  for (int si = 0; si < kStripes; ++si) {
    Stripe& s = stripes_[si];
    absl::MutexLock lock(&s.mu);
    s.bounded.sketch.Load(state.stripes(si));
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
