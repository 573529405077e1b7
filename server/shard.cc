#include "server/shard.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/hash.h"
#include "common/limits.h"
#include "common/packed.h"
#include "common/status.h"

namespace kestrel {
namespace {

// Names from requests are echoed in errors only this long, so a huge bogus name cannot blow up a status.
std::string Clip(absl::string_view s) {
  constexpr size_t kMax = 80;
  return s.size() <= kMax ? std::string(s) : absl::StrCat(s.substr(0, kMax), "...");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Shard>> Shard::Create(const ShardOptions& options, Partition partition) {
  if (options.owner < 0 || options.owner >= partition.num_servers()) {
    return absl::InvalidArgumentError(absl::StrFormat("shard index %d is not a server of a %d-server partition",
                                                      options.owner, partition.num_servers()));
  }
  if (options.job_id.empty()) return absl::InvalidArgumentError("shard needs a non-empty job id");
  if (options.bsp_workers < 0) return absl::InvalidArgumentError("bsp_workers must be >= 0");
  return std::unique_ptr<Shard>(new Shard(options, std::move(partition)));
}

Shard::Shard(const ShardOptions& options, Partition partition)
    : options_(options),
      bsp_workers_(options.bsp_workers),
      partition_(std::move(partition)),
      ranges_(partition_.RangesOf(options.owner)),
      checks_(partition_, options.owner, ranges_, options.max_keys_per_request),
      cut_memory_(options.max_cut_retained_bytes),
      tables_(options.owner, KeyRange{ranges_.front().first, ranges_.back().last}, options.max_tables,
              options.memory_budget_bytes, &cut_memory_, options.stripe_pool),
      tier_(options.owner),
      fence_(options.job_id, options.owner),
      read_gate_(options.bsp_workers > 0, options.bsp_workers),
      recent_requests_(RecentRequests::kDefaultWindow, options.max_push_workers) {}

absl::Status Shard::Count(absl::Status status) const {
  if (!status.ok()) rejected_requests_.fetch_add(1, std::memory_order_relaxed);
  return status;
}

absl::Status Shard::CheckJob(const RequestContext& ctx) const {
  return fence_.Check(ctx.job_id, ctx.worker_rank, ctx.generation);
}

void Shard::SetJobView(uint64_t job_generation, std::vector<uint64_t> worker_generations) {
  if (!worker_generations.empty()) {
    recent_requests_.SetMaxWorkers(worker_generations.size());
    read_gate_.SetWorkers(static_cast<int>(worker_generations.size()));
  }
  fence_.SetView(job_generation, std::move(worker_generations));
}

void Shard::SetGenerationListener(std::function<void()> listener) { fence_.SetListener(std::move(listener)); }

absl::Status Shard::CheckRestoreGeneration(uint64_t min_worker_generation, absl::Duration wait) const {
  return fence_.CheckRestoreGeneration(min_worker_generation, wait);
}

absl::StatusOr<bool> Shard::CreateTable(const RequestContext& ctx, const TableConfig& config) {
  KESTREL_RETURN_IF_ERROR(Count(CheckJob(ctx)));
  absl::ReaderMutexLock state(&state_mu_);
  if (!restore_error_.empty()) return Count(absl::FailedPreconditionError(restore_error_));
  return Count(tables_.Add(config));
}

std::vector<TableConfig> Shard::DescribeTables() const { return tables_.Describe(); }

const Table* Shard::FindTable(absl::string_view name) const { return tables_.Find(name); }

absl::StatusOr<Table*> Shard::LookupTable(const RequestContext& ctx, absl::string_view name,
                                          TableConfig::Kind kind, int expected_dim) const {
  KESTREL_RETURN_IF_ERROR(CheckJob(ctx));
  Table* table = tables_.Find(name);
  if (table == nullptr) {
    return absl::NotFoundError(absl::StrFormat("table '%s' does not exist on shard %d", Clip(name), owner()));
  }
  if (table->config().kind() != kind) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "table '%s' is %s: use %s", name, kind == TableConfig::DENSE ? "sparse" : "dense",
        kind == TableConfig::DENSE ? "Pull/Push" : "PullDense/PushDense"));
  }
  if (expected_dim != 0 && expected_dim != table->dim()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table '%s' has dim %d, request says %d", name, table->dim(), expected_dim));
  }
  return table;
}

absl::Status Shard::Pull(const RequestContext& ctx, absl::string_view name, absl::Span<const uint64_t> keys,
                         int expected_dim, std::string* values) {
  return Count(Read(ctx, name, TableConfig::SPARSE, keys, expected_dim,
                    [values](size_t floats) { return ResizePacked<float>(values, floats); }));
}

absl::Status Shard::Pull(const RequestContext& ctx, absl::string_view name, absl::Span<const uint64_t> keys,
                         int expected_dim, absl::FunctionRef<float*(size_t floats)> alloc) {
  return Count(Read(ctx, name, TableConfig::SPARSE, keys, expected_dim, alloc));
}

absl::Status Shard::PullDense(const RequestContext& ctx, absl::string_view name, absl::Span<const uint64_t> blocks,
                              int expected_dim, std::string* values) {
  return Count(Read(ctx, name, TableConfig::DENSE, blocks, expected_dim,
                    [values](size_t floats) { return ResizePacked<float>(values, floats); }));
}

absl::Status Shard::Push(const RequestContext& ctx, absl::string_view name, absl::Span<const uint64_t> keys,
                         absl::Span<const float> grads, int expected_dim) {
  return Count(Write(ctx, name, TableConfig::SPARSE, keys, grads, expected_dim));
}

absl::Status Shard::PushDense(const RequestContext& ctx, absl::string_view name, absl::Span<const uint64_t> blocks,
                              absl::Span<const float> grads, int expected_dim) {
  return Count(Write(ctx, name, TableConfig::DENSE, blocks, grads, expected_dim));
}

absl::Status Shard::Read(const RequestContext& ctx, absl::string_view name, TableConfig::Kind kind,
                         absl::Span<const uint64_t> ids, int expected_dim,
                         absl::FunctionRef<float*(size_t floats)> alloc) {
  absl::ReaderMutexLock state(&state_mu_);
  if (!restore_error_.empty()) return absl::FailedPreconditionError(restore_error_);
  KESTREL_RETURN_IF_ERROR(tier_.Check());
  KESTREL_ASSIGN_OR_RETURN(Table * table, LookupTable(ctx, name, kind, expected_dim));
  KESTREL_ASSIGN_OR_RETURN(absl::Span<const uint64_t> keys, checks_.CheckedKeys(*table, ids));
  const size_t floats = keys.size() * static_cast<size_t>(table->dim());
  if (floats > options_.max_response_bytes / sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pulling %d rows of dim %d from table '%s' would answer %d bytes, above the limit of %d: split the request",
        keys.size(), table->dim(), name, floats * sizeof(float), options_.max_response_bytes));
  }
  float* out = alloc(floats);
  if (bsp_workers_.load(std::memory_order_acquire) > 0 && ctx.worker_rank >= 0) {
    // A pull for a clock already applied here is answered with the rows as they were before it (see the class
    // comment).
    KESTREL_RETURN_IF_ERROR(undo_.Pull(*table, keys, ctx.clock, out));
  } else {
    KESTREL_RETURN_IF_ERROR(table->Pull(keys, out, ctx.clock));
  }
  pull_requests_.fetch_add(1, std::memory_order_relaxed);
  keys_pulled_.fetch_add(keys.size(), std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status Shard::Write(const RequestContext& ctx, absl::string_view name, TableConfig::Kind kind,
                          absl::Span<const uint64_t> ids, absl::Span<const float> grads, int expected_dim) {
  std::vector<ReadGate::Callback> released;
  absl::Status status = WriteLocked(ctx, name, kind, ids, grads, expected_dim, &released);
  for (ReadGate::Callback& read : released) read(absl::OkStatus());
  return status;
}

absl::StatusOr<std::pair<Table*, absl::Span<const uint64_t>>> Shard::CheckedWrite(
    const RequestContext& ctx, absl::string_view name, TableConfig::Kind kind, absl::Span<const uint64_t> ids,
    absl::Span<const float> grads, int expected_dim) const {
  if (!restore_error_.empty()) return absl::FailedPreconditionError(restore_error_);
  KESTREL_RETURN_IF_ERROR(tier_.Check());
  KESTREL_ASSIGN_OR_RETURN(Table * table, LookupTable(ctx, name, kind, expected_dim));
  KESTREL_ASSIGN_OR_RETURN(absl::Span<const uint64_t> keys, checks_.CheckedKeys(*table, ids));
  KESTREL_RETURN_IF_ERROR(checks_.CheckGrads(*table, keys, grads));
  if (const int bsp_workers = bsp_workers_.load(std::memory_order_acquire);
      bsp_workers > 0 && (ctx.worker_rank < 0 || ctx.worker_rank >= bsp_workers)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BSP push from worker rank %d: shard %d expects ranks in [0, %d)", ctx.worker_rank, owner(), bsp_workers));
  }
  return std::make_pair(table, keys);
}

absl::Status Shard::CheckPush(const RequestContext& ctx, absl::string_view name, TableConfig::Kind kind,
                              absl::Span<const uint64_t> ids, absl::Span<const float> grads, int expected_dim) const {
  absl::ReaderMutexLock state(&state_mu_);
  return Count(CheckedWrite(ctx, name, kind, ids, grads, expected_dim).status());
}

absl::Status Shard::WriteLocked(const RequestContext& ctx, absl::string_view name, TableConfig::Kind kind,
                                absl::Span<const uint64_t> ids, absl::Span<const float> grads, int expected_dim,
                                std::vector<ReadGate::Callback>* released) {
  absl::ReaderMutexLock state(&state_mu_);
  KESTREL_ASSIGN_OR_RETURN(auto checked, CheckedWrite(ctx, name, kind, ids, grads, expected_dim));
  Table* const table = checked.first;
  const absl::Span<const uint64_t> keys = checked.second;
  // Everything is validated: the update below cannot fail part-way.
  if (bsp_workers_.load(std::memory_order_acquire) > 0) {
    BspAggregator::Part part;
    part.worker = ctx.worker_rank;
    part.clock = ctx.clock;
    part.index = ctx.part;
    part.count = ctx.parts;
    part.keys = keys;
    part.grads = grads;
    KESTREL_ASSIGN_OR_RETURN(std::optional<BspAggregator::Batch> batch, AggregatorFor(*table)->Add(part));
    if (batch.has_value()) KESTREL_RETURN_IF_ERROR(ApplyBsp(*table, *batch, released));
  } else if (ctx.worker_rank < 0 || ctx.request_id == 0) {
    KESTREL_RETURN_IF_ERROR(tier_.Failed(table->Push(keys, grads.data(), ctx.clock)));  // tools: no idempotence
  } else {
    switch (recent_requests_.Begin(ctx.worker_rank, ctx.request_id)) {
      case RecentRequests::Seen::kNew: {
        absl::Status applied = table->Push(keys, grads.data(), ctx.clock);
        // On failure the push stays "in flight": the shard refuses everything until a restore anyway.
        KESTREL_RETURN_IF_ERROR(tier_.Failed(applied));
        recent_requests_.Applied(ctx.worker_rank, ctx.request_id);
        read_gate_.Pushed(name, ctx.worker_rank, ctx.clock, ctx.part, ctx.parts, released);
        break;
      }
      case RecentRequests::Seen::kInFlight:  // the original is being applied: do not acknowledge yet
        return absl::UnavailableError(
            absl::StrFormat("push %d of worker %d is being applied; retry", ctx.request_id, ctx.worker_rank));
      case RecentRequests::Seen::kApplied:  // a retry of a push already applied
        read_gate_.Pushed(name, ctx.worker_rank, ctx.clock, ctx.part, ctx.parts, released);
        break;
      case RecentRequests::Seen::kNoRoom:
        return absl::ResourceExhaustedError(absl::StrFormat(
            "shard %d remembers the pushes of %d workers (the job's; without a scheduler --max_push_workers): "
            "worker %d is one too many",
            owner(), recent_requests_.max_workers(), ctx.worker_rank));
    }
  }
  push_requests_.fetch_add(1, std::memory_order_relaxed);
  keys_pushed_.fetch_add(keys.size(), std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status Shard::TierFailed(absl::Status status) { return tier_.Failed(std::move(status)); }

void Shard::SetFailureListener(std::function<void(const absl::Status&)> listener) {
  tier_.SetListener(std::move(listener));
}

void Shard::SetColdTier(ColdTier* tier) { tables_.SetColdTier(tier); }

absl::Status Shard::ApplyBsp(Table& table, const BspAggregator::Batch& batch,
                             std::vector<ReadGate::Callback>* released) {
  KESTREL_RETURN_IF_ERROR(undo_.Apply(table, batch, tier_));
  AggregatorFor(table)->Applied(batch.clock);
  read_gate_.Applied(table.config().name(), batch.clock, released);
  return absl::OkStatus();
}

absl::StatusOr<bool> Shard::AwaitClocks(const RequestContext& ctx, absl::string_view name, TableConfig::Kind kind,
                                        int64_t need, absl::Time deadline, ReadGate::Callback done) {
  {
    absl::ReaderMutexLock state(&state_mu_);
    if (!restore_error_.empty()) return absl::FailedPreconditionError(restore_error_);
    KESTREL_RETURN_IF_ERROR(LookupTable(ctx, name, kind, /*expected_dim=*/0).status());
  }
  if (ctx.worker_rank < 0) return true;  // tools read what is there
  return read_gate_.Await(name, need, deadline, std::move(done));
}

void Shard::StartClocksAt(int64_t clock) { read_gate_.Raise(clock); }

void Shard::RestartClocksAt(int64_t clock, int workers) {
  read_gate_.StartAt(clock, absl::AbortedError(absl::StrFormat(
                                "shard %d was rescaled while this read waited for its clock: rejoin", owner())));
  if (workers > 0) read_gate_.SetWorkers(workers);
}

std::pair<int64_t, int64_t> Shard::PushFrontier(const std::vector<int>& workers) {
  const bool bsp = bsp_workers_.load() > 0;
  absl::ReaderMutexLock state(&state_mu_);
  std::pair<int64_t, int64_t> frontier{std::numeric_limits<int64_t>::max(), -1};
  for (const Table* table : tables_.All()) {
    const std::string& name = table->config().name();
    for (int w : workers) {
      int64_t pushed = read_gate_.PushedBy(name, w);
      if (bsp && AggregatorFor(*table)->HasPushed(w, pushed)) ++pushed;  // only the clock being collected buffers
      frontier.first = std::min(frontier.first, pushed);
      frontier.second = std::max(frontier.second, pushed);
    }
  }
  return frontier;
}

absl::StatusOr<int> Shard::FenceWorkers(const std::vector<int>& workers, int64_t clock) {
  if (bsp_workers_.load() <= 0) return absl::FailedPreconditionError("only BSP servers buffer a clock's pushes");
  absl::ReaderMutexLock state(&state_mu_);
  int applied = 0;
  for (const Table* table : tables_.All()) {
    KESTREL_ASSIGN_OR_RETURN(BspAggregator::Fenced fenced, AggregatorFor(*table)->Fence(workers, clock));
    if (fenced == BspAggregator::Fenced::kApplied) ++applied;
  }
  return applied;
}

absl::StatusOr<int> Shard::CompleteClockWithout(int64_t clock) {
  if (bsp_workers_.load() <= 0) return absl::FailedPreconditionError("only BSP servers buffer a clock's pushes");
  std::vector<ReadGate::Callback> released;
  absl::StatusOr<int> completed = CompleteClockWithoutLocked(clock, &released);
  for (ReadGate::Callback& read : released) read(absl::OkStatus());
  return completed;
}

absl::StatusOr<int> Shard::CompleteClockWithoutLocked(int64_t clock, std::vector<ReadGate::Callback>* released) {
  absl::ReaderMutexLock state(&state_mu_);
  if (!restore_error_.empty()) return absl::FailedPreconditionError(restore_error_);
  int completed = 0;
  for (Table* table : tables_.All()) {
    KESTREL_ASSIGN_OR_RETURN(std::optional<BspAggregator::Batch> batch, AggregatorFor(*table)->CompleteWithout(clock));
    if (!batch.has_value()) continue;
    KESTREL_RETURN_IF_ERROR(ApplyBsp(*table, *batch, released));
    ++completed;
  }
  return completed;
}

absl::Status Shard::SetBspWorkers(int bsp_workers) {
  if ((bsp_workers > 0) != (bsp_workers_.load() > 0)) {
    return absl::InvalidArgumentError("a rescale changes BSP's worker count, not the consistency mode");
  }
  if (bsp_workers < 0 || bsp_workers > kMaxWorkers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("BSP worker count %d is not in [1, %d]", bsp_workers, kMaxWorkers));
  }
  absl::MutexLock state(&state_mu_);  // no request runs meanwhile
  absl::MutexLock lock(&bsp_mu_);
  for (const auto& [name, aggregator] : aggregators_) {
    if (aggregator->pending_clocks() > 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "table '%s' still collects a clock's pushes: BSP's worker count changes only at a clock boundary",
          Clip(name)));
    }
  }
  aggregators_.clear();  // made anew for the new count; nothing was pending
  undo_.Clear();  // a replacement's re-pull of the last clock is for the old layout's ranks
  bsp_workers_.store(bsp_workers, std::memory_order_release);
  return absl::OkStatus();
}

BspAggregator* Shard::AggregatorFor(const Table& table) {
  absl::MutexLock lock(&bsp_mu_);
  auto& aggregator = aggregators_[table.config().name()];
  if (aggregator == nullptr) {
    const BspAggregator::Combine combine = table.config().optimizer().type() == OptimizerConfig::ASSIGN
                                               ? BspAggregator::Combine::kSum
                                               : BspAggregator::Combine::kMean;
    aggregator =
        std::make_unique<BspAggregator>(bsp_workers_.load(std::memory_order_acquire), table.dim(), combine);
  }
  return aggregator.get();
}

absl::Status Shard::Exclusive(absl::FunctionRef<absl::Status(const std::vector<Table*>& tables)> fn) {
  absl::MutexLock state(&state_mu_);
  if (!restore_error_.empty()) return absl::FailedPreconditionError(restore_error_);
  return fn(tables_.All());
}

absl::Status Shard::Restore(const std::vector<TableConfig>& tables, uint64_t min_worker_generation,
                            absl::FunctionRef<absl::Status(RowSink rows, SketchSink sketches)> load) {
  absl::MutexLock state(&state_mu_);
  for (const TableConfig& config : tables) {
    absl::StatusOr<bool> added = tables_.Add(config);
    if (!added.ok()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "shard %d cannot restore table '%s': %s", owner(), config.name(), added.status().message()));
    }
  }
  {
    absl::MutexLock lock(&bsp_mu_);
    aggregators_.clear();  // buffered pushes belong to the timeline being rolled back
  }
  // So do the reads waiting for them; the restored clock is set by StartClocksAt.
  read_gate_.StartAt(0, absl::AbortedError(absl::StrFormat(
                            "shard %d was restored from a checkpoint while this read waited for its clock", owner())));
  undo_.Clear();
  const std::vector<Table*> all = tables_.All();
  for (Table* table : all) table->Clear();
  auto rows = [&](absl::string_view name, uint64_t key, absl::Span<const float> row) -> absl::StatusOr<bool> {
    Table* table = tables_.Find(name);
    if (table == nullptr) {
      return absl::DataLossError(absl::StrFormat("the checkpoint holds rows of table '%s', which its manifest lacks",
                                                 Clip(name)));
    }
    if (partition_.OwnerOf(key) != owner()) return false;
    KESTREL_RETURN_IF_ERROR(table->LoadRow(key, row));
    return true;
  };
  auto sketches = [&](absl::string_view name, const AdmissionSketchState& state) -> absl::StatusOr<bool> {
    Table* table = tables_.Find(name);
    if (table == nullptr) {
      return absl::DataLossError(
          absl::StrFormat("the checkpoint holds an admission sketch of table '%s', which its manifest lacks", Clip(name)));
    }
    // Written for another key span (another partition): admission counts start afresh.
    if (state.key_lo() != ranges_.front().first || state.key_hi() != ranges_.back().last) return false;
    KESTREL_RETURN_IF_ERROR(table->LoadSketchState(state));
    return true;
  };
  absl::Status loaded = load(rows, sketches);
  if (!loaded.ok()) {
    for (Table* table : all) table->Clear();
    restore_error_ = absl::StrFormat("shard %d failed to restore a checkpoint and holds no data: %s", owner(),
                                     loaded.message());
    return loaded;
  }
  restore_error_.clear();
  tier_.Reset();
  fence_.RaiseFloor(min_worker_generation);
  return absl::OkStatus();
}

ShardStats Shard::Stats() const {
  ShardStats stats;
  stats.pull_requests = pull_requests_.load(std::memory_order_relaxed);
  stats.push_requests = push_requests_.load(std::memory_order_relaxed);
  stats.keys_pulled = keys_pulled_.load(std::memory_order_relaxed);
  stats.keys_pushed = keys_pushed_.load(std::memory_order_relaxed);
  stats.rejected_requests = rejected_requests_.load(std::memory_order_relaxed);
  for (const Table* table : tables_.All()) {
    stats.tables.push_back(
        {table->config(), table->num_rows(), table->memory_bytes(), table->raw_bytes(), table->tier_stats()});
  }
  return stats;
}

absl::StatusOr<uint64_t> Shard::LoadRows(absl::string_view table, absl::string_view keys, absl::string_view rows) {
  Table* t = tables_.Find(table);
  if (t == nullptr) return absl::InvalidArgumentError(absl::StrFormat("no table '%s' to load rows into", Clip(table)));
  const size_t floats = static_cast<size_t>(t->stored_floats());
  const size_t n = keys.size() / sizeof(uint64_t);
  if (keys.size() % sizeof(uint64_t) != 0 || rows.size() != n * floats * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rows of table '%s': %d bytes of keys and %d of rows are not whole rows of %d floats", Clip(table),
        keys.size(), rows.size(), floats));
  }
  std::vector<float> row(floats);  // the bytes may sit unaligned
  for (size_t i = 0; i < n; ++i) {
    uint64_t key;
    std::memcpy(&key, keys.data() + i * sizeof(key), sizeof(key));
    if (partition_.OwnerOf(key) != owner()) {
      return absl::InvalidArgumentError(absl::StrFormat("key 0x%016x of table '%s' is not in the ranges of server %d",
                                                        key, Clip(table), owner()));
    }
    std::memcpy(row.data(), rows.data() + i * floats * sizeof(float), floats * sizeof(float));
    KESTREL_RETURN_IF_ERROR(t->LoadRow(key, row));
  }
  return n;
}

uint64_t Shard::Fingerprint() const {
  uint64_t h = Hash64(options_.job_id);
  for (const Table* table : tables_.All()) {
    h = HashCombine(h, Hash64(table->config().name()));
    h = HashCombine(h, table->Fingerprint());
  }
  return h;
}

}  // namespace kestrel
