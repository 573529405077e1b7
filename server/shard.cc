#include "server/shard.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/gradients.h"
#include "common/limits.h"
#include "common/hash.h"
#include "common/packed.h"
#include "common/status.h"
#include "google/protobuf/util/message_differencer.h"

namespace kestrel {
namespace {

std::string RangesToString(const std::vector<KeyRange>& ranges) {
  constexpr size_t kMaxListed = 4;
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranges.size() && i < kMaxListed; ++i) parts.push_back(ranges[i].ToString());
  std::string out = absl::StrJoin(parts, " ");
  if (ranges.size() > kMaxListed) absl::StrAppend(&out, " and ", ranges.size() - kMaxListed, " more");
  return out;
}

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
      cut_memory_(options.max_cut_retained_bytes),
      read_gate_(options.bsp_workers > 0, options.bsp_workers),
      recent_requests_(RecentRequests::kDefaultWindow, options.max_push_workers) {
  absl::MutexLock lock(&mu_);
  table_maps_.push_back(std::make_unique<TableMap>());
  tables_.store(table_maps_.back().get(), std::memory_order_release);
}

absl::Status Shard::Count(absl::Status status) const {
  if (!status.ok()) rejected_requests_.fetch_add(1, std::memory_order_relaxed);
  return status;
}

absl::Status Shard::CheckJob(const RequestContext& ctx) const {
  if (ctx.worker_rank >= kMaxWorkers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("worker rank %d is not below %d", ctx.worker_rank, kMaxWorkers));
  }
  if (ctx.job_id != options_.job_id) {
    // Neither job id is echoed: a caller probing for the job's name learns nothing.
    return absl::FailedPreconditionError(
        absl::StrFormat("the request's job id is not the one shard %d serves (check --job_id)", owner()));
  }
  if (ctx.worker_rank < 0) return absl::OkStatus();
  const uint64_t rolled_back_before = min_worker_generation_.load(std::memory_order_acquire);
  if (ctx.generation < rolled_back_before) {
    return absl::AbortedError(absl::StrFormat(
        "request of generation %d from worker rank %d reached shard %d after the job rolled back to a checkpoint "
        "at generation %d: resume from the checkpoint",
        ctx.generation, ctx.worker_rank, owner(), rolled_back_before));
  }
  const std::shared_ptr<const JobView> view = std::atomic_load(&job_view_);
  if (view == nullptr) return absl::OkStatus();  // no scheduler (yet): unchecked
  if (static_cast<size_t>(ctx.worker_rank) >= view->worker_generations.size()) {
    // A worker a rescale added, before this shard heard of it (kMaxWorkers bounds the rank): ask, and retry.
    TellGenerationListener();
    return absl::UnavailableError(absl::StrFormat(
        "worker rank %d is not one of the job's %d workers this shard knows of (a rescale may have added it): retry",
        ctx.worker_rank, view->worker_generations.size()));
  }
  const uint64_t expected = view->worker_generations[ctx.worker_rank];
  if (ctx.generation < expected) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "request of generation %d from worker rank %d reached shard %d, but that rank's requests carry generation "
        "%d since it registered again: the sender was superseded",
        ctx.generation, ctx.worker_rank, owner(), expected));
  }
  if (ctx.generation > expected) {
    TellGenerationListener();
    return absl::UnavailableError(absl::StrFormat(
        "request of generation %d from worker rank %d reached shard %d, which knows generation %d for that rank: "
        "it has not heard of the newer one from the scheduler yet; retry",
        ctx.generation, ctx.worker_rank, owner(), expected));
  }
  return absl::OkStatus();
}

void Shard::SetJobView(uint64_t job_generation, std::vector<uint64_t> worker_generations) {
  if (!worker_generations.empty()) {
    recent_requests_.SetMaxWorkers(worker_generations.size());
    read_gate_.SetWorkers(static_cast<int>(worker_generations.size()));
  }
  auto view = std::make_shared<JobView>();
  view->job_generation = job_generation;
  view->worker_generations = std::move(worker_generations);
  std::atomic_store(&job_view_, std::shared_ptr<const JobView>(std::move(view)));
  absl::MutexLock lock(&view_mu_);
  job_generation_ = std::max(job_generation_, job_generation);
}

void Shard::SetGenerationListener(std::function<void()> listener) {
  absl::MutexLock lock(&view_mu_);
  generation_listener_ = std::move(listener);
}

void Shard::TellGenerationListener() const {
  absl::MutexLock lock(&view_mu_);
  if (generation_listener_) generation_listener_();
}

absl::Status Shard::CheckRestoreGeneration(uint64_t min_worker_generation, absl::Duration wait) const {
  if (min_worker_generation == 0) return absl::OkStatus();
  absl::MutexLock lock(&view_mu_);
  if (job_generation_ < min_worker_generation && generation_listener_) {  // without a scheduler, nothing to wait for
    generation_listener_();
    struct Reached {
      const Shard* shard;
      uint64_t generation;
    } reached{this, min_worker_generation};
    view_mu_.AwaitWithTimeout(absl::Condition(
                                  +[](Reached* r) ABSL_NO_THREAD_SAFETY_ANALYSIS {  // held: Await's contract
                                    return r->shard->job_generation_ >= r->generation;
                                  },
                                  &reached),
                              wait);
  }
  if (job_generation_ < min_worker_generation) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "min_worker_generation %d is ahead of the job's generation %d (as shard %d heard it from the scheduler%s)",
        min_worker_generation, job_generation_, owner(),
        generation_listener_ ? "" : "; it runs without one, so only 0 is valid"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Shard::CreateTable(const RequestContext& ctx, const TableConfig& config) {
  KESTREL_RETURN_IF_ERROR(Count(CheckJob(ctx)));
  absl::ReaderMutexLock state(&state_mu_);
  if (!restore_error_.empty()) return Count(absl::FailedPreconditionError(restore_error_));
  return Count(AddTable(config));
}

absl::StatusOr<bool> Shard::AddTable(const TableConfig& config) {
  auto table = Table::Create(config, KeyRange{ranges_.front().first, ranges_.back().last});
  if (!table.ok()) return table.status();
  absl::MutexLock lock(&mu_);
  const TableMap& current = *tables_.load(std::memory_order_acquire);
  auto it = current.find(config.name());
  if (it != current.end()) {
    if (google::protobuf::util::MessageDifferencer::Equals(it->second->config(), config)) return false;
    return absl::AlreadyExistsError(absl::StrFormat(
        "table '%s' already exists on shard %d with a different config", config.name(), owner()));
  }
  if (current.size() >= options_.max_tables) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "shard %d already holds %d tables, its limit (--max_tables)", owner(), current.size()));
  }
  auto next = std::make_unique<TableMap>(current);
  Table* added = table->get();
  (*next)[config.name()] = std::shared_ptr<Table>(std::move(table).value());
  if (config.capacity().max_disk_bytes() > 0) added->SetColdTier(cold_tier_);
  added->set_cut_memory(&cut_memory_);
  ApplyBudgetsLocked(*next);
  table_maps_.push_back(std::move(next));
  tables_.store(table_maps_.back().get(), std::memory_order_release);
  return true;
}

std::vector<TableConfig> Shard::DescribeTables() const {
  std::vector<TableConfig> out;
  for (const auto& [name, table] : *tables_.load(std::memory_order_acquire)) out.push_back(table->config());
  std::sort(out.begin(), out.end(), [](const TableConfig& a, const TableConfig& b) { return a.name() < b.name(); });
  return out;
}

const Table* Shard::FindTable(absl::string_view name) const {
  const TableMap& tables = *tables_.load(std::memory_order_acquire);
  auto it = tables.find(name);
  return it == tables.end() ? nullptr : it->second.get();
}

absl::StatusOr<Table*> Shard::LookupTable(const RequestContext& ctx, absl::string_view name,
                                          TableConfig::Kind kind, int expected_dim) const {
  KESTREL_RETURN_IF_ERROR(CheckJob(ctx));
  const TableMap& tables = *tables_.load(std::memory_order_acquire);
  auto it = tables.find(name);
  if (it == tables.end()) {
    return absl::NotFoundError(absl::StrFormat("table '%s' does not exist on shard %d", Clip(name), owner()));
  }
  Table* table = it->second.get();
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

absl::Status Shard::CheckKeys(absl::Span<const uint64_t> keys, bool sorted, const char* what) const {
  if (keys.size() > options_.max_keys_per_request) {
    return absl::InvalidArgumentError(absl::StrFormat("%d %s in one request exceed the limit of %d: split it",
                                                      keys.size(), what, options_.max_keys_per_request));
  }
  // Sorted keys walk the partition's (sorted) ranges alongside; others look each key up.
  const std::vector<KeyRange>& ranges = partition_.ranges();
  const std::vector<int>& owners = partition_.owners();
  size_t r = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    int key_owner;
    if (sorted) {
      if (i > 0 && keys[i] <= keys[i - 1]) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s must be strictly increasing (sorted, no duplicates): %s[%d] = 0x%x follows %s[%d] = 0x%x", what,
            what, i, keys[i], what, i - 1, keys[i - 1]));
      }
      while (keys[i] > ranges[r].last) ++r;
      key_owner = owners[r];
    } else {
      key_owner = partition_.OwnerOf(keys[i]);
    }
    if (key_owner != owner()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "key 0x%016x (%s[%d]) is outside shard %d's key ranges %s; it belongs to shard %d", keys[i], what, i,
          owner(), RangesToString(ranges_), key_owner));
    }
  }
  return absl::OkStatus();
}

absl::Status Shard::CheckGrads(const Table& table, absl::Span<const uint64_t> keys,
                               absl::Span<const float> grads) const {
  const size_t dim = table.dim();
  if (grads.size() != keys.size() * dim) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table '%s' has dim %d: %d keys need %d gradient values, got %d", table.config().name(),
                        dim, keys.size(), keys.size() * dim, grads.size()));
  }
  const int64_t bad = FirstBadGradient(grads);
  if (bad < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "bad gradient %g for key 0x%016x element %d of table '%s': gradients must be finite with |g| <= %g",
      grads[bad], keys[bad / dim], bad % dim, table.config().name(), kMaxGradientMagnitude));
}

absl::Status Shard::BlockKeys(const Table& table, absl::Span<const uint64_t> blocks,
                              std::vector<uint64_t>* keys) const {
  const uint64_t num_blocks = table.num_blocks();
  keys->resize(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i > 0 && blocks[i] <= blocks[i - 1]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "dense blocks must be strictly increasing: block %d follows block %d", blocks[i], blocks[i - 1]));
    }
    if (blocks[i] >= num_blocks) {
      return absl::InvalidArgumentError(absl::StrFormat("dense table '%s' has %d blocks; block %d does not exist",
                                                        table.config().name(), num_blocks, blocks[i]));
    }
    (*keys)[i] = Partition::DenseBlockKey(table.config().name(), blocks[i]);
  }
  return CheckKeys(*keys, /*sorted=*/false, "dense block keys");
}

absl::StatusOr<absl::Span<const uint64_t>> Shard::CheckedKeys(const Table& table,
                                                              absl::Span<const uint64_t> ids) const {
  if (table.config().kind() == TableConfig::SPARSE) {
    KESTREL_RETURN_IF_ERROR(CheckKeys(ids, /*sorted=*/true, "keys"));
    return ids;
  }
  thread_local std::vector<uint64_t> block_keys;
  KESTREL_RETURN_IF_ERROR(BlockKeys(table, ids, &block_keys));
  return absl::MakeConstSpan(block_keys);
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
  KESTREL_RETURN_IF_ERROR(CheckTier());
  KESTREL_ASSIGN_OR_RETURN(Table * table, LookupTable(ctx, name, kind, expected_dim));
  KESTREL_ASSIGN_OR_RETURN(absl::Span<const uint64_t> keys, CheckedKeys(*table, ids));
  const size_t floats = keys.size() * static_cast<size_t>(table->dim());
  if (floats > options_.max_response_bytes / sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pulling %d rows of dim %d from table '%s' would answer %d bytes, above the limit of %d: split the request",
        keys.size(), table->dim(), name, floats * sizeof(float), options_.max_response_bytes));
  }
  float* out = alloc(floats);
  if (bsp_workers_.load(std::memory_order_acquire) > 0 && ctx.worker_rank >= 0) {
    absl::ReaderMutexLock lock(&undo_mu_);
    KESTREL_RETURN_IF_ERROR(table->Pull(keys, out, ctx.clock));
    // A pull for a clock already applied here: answer the rows as they were before it (see the class comment).
    auto it = undo_.find(name);
    if (it != undo_.end() && it->second.clock == ctx.clock) {
      const Undo& undo = it->second;
      const size_t dim = table->dim();
      size_t j = 0;
      for (size_t i = 0; i < keys.size(); ++i) {  // both sorted (dense block keys: look each up)
        if (table->config().kind() == TableConfig::DENSE) j = 0;
        while (j < undo.keys.size() && undo.keys[j] < keys[i]) ++j;
        if (j < undo.keys.size() && undo.keys[j] == keys[i]) {
          std::memcpy(out + i * dim, undo.values.data() + j * dim, sizeof(float) * dim);
        }
      }
    }
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
  KESTREL_RETURN_IF_ERROR(CheckTier());
  KESTREL_ASSIGN_OR_RETURN(Table * table, LookupTable(ctx, name, kind, expected_dim));
  KESTREL_ASSIGN_OR_RETURN(absl::Span<const uint64_t> keys, CheckedKeys(*table, ids));
  KESTREL_RETURN_IF_ERROR(CheckGrads(*table, keys, grads));
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
    KESTREL_RETURN_IF_ERROR(TierFailed(table->Push(keys, grads.data(), ctx.clock)));  // tools: no idempotence
  } else {
    switch (recent_requests_.Begin(ctx.worker_rank, ctx.request_id)) {
      case RecentRequests::Seen::kNew: {
        absl::Status applied = table->Push(keys, grads.data(), ctx.clock);
        // On failure the push stays "in flight": the shard refuses everything until a restore anyway.
        KESTREL_RETURN_IF_ERROR(TierFailed(applied));
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

absl::Status Shard::CheckTier() const {
  if (!tier_failed_.load(std::memory_order_acquire)) return absl::OkStatus();
  absl::MutexLock lock(&tier_mu_);
  return absl::FailedPreconditionError(tier_error_);
}

absl::Status Shard::TierFailed(absl::Status status) {
  if (status.ok()) return status;
  std::function<void(const absl::Status&)> listener;
  std::string error;
  {
    absl::MutexLock lock(&tier_mu_);
    if (!tier_failed_.load(std::memory_order_relaxed)) {
      tier_error_ = absl::StrFormat(
          "shard %d: its disk tier failed (%s): it may hold part of a push or lack rows moved out of memory, and "
          "refuses requests until it is restored from a checkpoint",
          owner(), status.ToString());
      tier_failed_.store(true, std::memory_order_release);
    }
    listener = failure_listener_;
    error = tier_error_;
  }
  if (listener) listener(status);
  return absl::FailedPreconditionError(error);
}

void Shard::SetFailureListener(std::function<void(const absl::Status&)> listener) {
  absl::MutexLock lock(&tier_mu_);
  failure_listener_ = std::move(listener);
}

void Shard::SetColdTier(ColdTier* tier) {
  absl::MutexLock lock(&mu_);
  cold_tier_ = tier;
  for (const auto& [name, table] : *tables_.load(std::memory_order_acquire)) {
    table->SetColdTier(table->config().capacity().max_disk_bytes() > 0 ? tier : nullptr);
  }
}

void Shard::ApplyBudgetsLocked(const TableMap& tables) {
  // The server's budget is shared by the bounded tables in proportion to their row sizes (so they hold about
  // as many rows each: a model's tables see the same keys); a table's own max_memory_bytes caps its share.
  uint64_t total_row_floats = 0;
  for (const auto& [name, table] : tables) {
    if (table->bounded()) total_row_floats += table->stored_floats() + 2;
  }
  for (const auto& [name, table] : tables) {
    if (!table->bounded()) continue;
    uint64_t budget = table->config().capacity().max_memory_bytes();
    if (options_.memory_budget_bytes > 0) {
      const uint64_t share = static_cast<uint64_t>(static_cast<long double>(options_.memory_budget_bytes) *
                                                   (table->stored_floats() + 2) / total_row_floats);
      budget = budget == 0 ? share : std::min(budget, share);
    }
    table->SetMemoryBudget(budget);
  }
}

absl::Status Shard::ApplyBsp(Table& table, const BspAggregator::Batch& batch,
                             std::vector<ReadGate::Callback>* released) {
  {
    absl::MutexLock lock(&undo_mu_);
    Undo& undo = undo_[table.config().name()];
    undo.clock = batch.clock;
    undo.keys = batch.keys;
    undo.values.resize(batch.keys.size() * static_cast<size_t>(table.dim()));
    absl::Status applied = table.Pull(undo.keys, undo.values.data(), batch.clock);
    if (applied.ok()) applied = table.Push(batch.keys, batch.grads.data(), batch.clock);
    KESTREL_RETURN_IF_ERROR(TierFailed(applied));
  }
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

absl::StatusOr<int> Shard::FenceWorkers(const std::vector<int>& workers, int64_t clock) {
  if (bsp_workers_.load() <= 0) return absl::FailedPreconditionError("only BSP servers buffer a clock's pushes");
  absl::ReaderMutexLock state(&state_mu_);
  int applied = 0;
  for (const TableConfig& config : DescribeTables()) {
    KESTREL_ASSIGN_OR_RETURN(BspAggregator::Fenced fenced,
                             AggregatorFor(*FindTable(config.name()))->Fence(workers, clock));
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
  for (const TableConfig& config : DescribeTables()) {
    Table* table = const_cast<Table*>(FindTable(config.name()));
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
  {
    absl::MutexLock undo(&undo_mu_);
    undo_.clear();  // a replacement's re-pull of the last clock is for the old layout's ranks
  }
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
  std::vector<Table*> tables;
  for (const TableConfig& config : DescribeTables()) tables.push_back(const_cast<Table*>(FindTable(config.name())));
  return fn(tables);
}

absl::Status Shard::Restore(const std::vector<TableConfig>& tables, uint64_t min_worker_generation,
                            absl::FunctionRef<absl::Status(RowSink rows, SketchSink sketches)> load) {
  absl::MutexLock state(&state_mu_);
  for (const TableConfig& config : tables) {
    absl::StatusOr<bool> added = AddTable(config);
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
  {
    absl::MutexLock lock(&undo_mu_);
    undo_.clear();
  }
  std::vector<Table*> all;
  for (const TableConfig& config : DescribeTables()) all.push_back(const_cast<Table*>(FindTable(config.name())));
  for (Table* table : all) table->Clear();
  const TableMap& map = *tables_.load(std::memory_order_acquire);
  auto rows = [&](absl::string_view name, uint64_t key, absl::Span<const float> row) -> absl::StatusOr<bool> {
    auto it = map.find(name);
    if (it == map.end()) {
      return absl::DataLossError(absl::StrFormat("the checkpoint holds rows of table '%s', which its manifest lacks",
                                                 Clip(name)));
    }
    if (partition_.OwnerOf(key) != owner()) return false;
    KESTREL_RETURN_IF_ERROR(it->second->LoadRow(key, row));
    return true;
  };
  auto sketches = [&](absl::string_view name, const AdmissionSketchState& state) -> absl::StatusOr<bool> {
    auto it = map.find(name);
    if (it == map.end()) {
      return absl::DataLossError(
          absl::StrFormat("the checkpoint holds an admission sketch of table '%s', which its manifest lacks", Clip(name)));
    }
    // Written for another key span (another partition): admission counts start afresh.
    if (state.key_lo() != ranges_.front().first || state.key_hi() != ranges_.back().last) return false;
    KESTREL_RETURN_IF_ERROR(it->second->LoadSketchState(state));
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
  {
    absl::MutexLock lock(&tier_mu_);
    tier_failed_.store(false, std::memory_order_release);
    tier_error_.clear();
  }
  uint64_t floor = min_worker_generation_.load();
  while (floor < min_worker_generation && !min_worker_generation_.compare_exchange_weak(floor, min_worker_generation)) {
  }
  return absl::OkStatus();
}

ShardStats Shard::Stats() const {
  ShardStats stats;
  stats.pull_requests = pull_requests_.load(std::memory_order_relaxed);
  stats.push_requests = push_requests_.load(std::memory_order_relaxed);
  stats.keys_pulled = keys_pulled_.load(std::memory_order_relaxed);
  stats.keys_pushed = keys_pushed_.load(std::memory_order_relaxed);
  stats.rejected_requests = rejected_requests_.load(std::memory_order_relaxed);
  for (const TableConfig& config : DescribeTables()) {
    const Table* table = FindTable(config.name());
    stats.tables.push_back(
        {config, table->num_rows(), table->memory_bytes(), table->raw_bytes(), table->tier_stats()});
  }
  return stats;
}

absl::StatusOr<uint64_t> Shard::LoadRows(absl::string_view table, absl::string_view keys, absl::string_view rows) {
  const Table* found = FindTable(table);
  if (found == nullptr) return absl::InvalidArgumentError(absl::StrFormat("no table '%s' to load rows into", Clip(table)));
  Table* t = const_cast<Table*>(found);
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
  for (const TableConfig& config : DescribeTables()) {
    h = HashCombine(h, Hash64(config.name()));
    h = HashCombine(h, FindTable(config.name())->Fingerprint());
  }
  return h;
}

}  // namespace kestrel
