// Shard: one range group — the key ranges of one server (its owner) of every sparse and dense table, held by
// that server or, in a replicated job, as a backup by another (server/hosted_shards.h) — and the validation of
// every request against them. "Shard" means only this: a server process is a server (--rank), and a worker's
// part of the training lines is its part (worker/data/record_reader.h).
//
// The Shard is the server's core and knows nothing of the network (server/ps_service.h adapts it to gRPC).
// Every request is validated completely before anything is written, so a rejected request leaves the
// shard's state unchanged: unknown table (NotFound), wrong job (FailedPrecondition), wrong dimension,
// mismatched key/value counts, unsorted or duplicate keys, keys outside this shard's ranges, non-finite
// or too large gradients (common/gradients.h), dense block indices out of range, too many keys, or an
// answer above max_response_bytes (InvalidArgument); too many tables (ResourceExhausted). In BSP mode
// (ShardOptions::bsp_workers) a push is validated whole, then buffered until its clock is complete; otherwise
// a worker's push whose request id was already applied (a retry) is acknowledged without applying it again.
// In BSP the shard also keeps the previous values of the rows the last applied clock changed: a worker's pull
// for iteration c that arrives after clock c was applied (only a replacement of a worker that died after
// pushing c does that) is answered with the rows as they were before c, so the replacement recomputes
// exactly the gradients its predecessor pushed, and its repeated pushes are recognized as repeats.
//
// Checkpoints. Exclusive() runs a function while no request is being served (every request holds a shared
// lock on the shard's state for its validation and table work), so a checkpoint sees one consistent cut.
// Restore() replaces the whole state with a checkpoint's rows, and from then on refuses (Aborted) worker
// requests stamped with a generation older than the restore's: they belong to the timeline rolled back.
// The Shard knows nothing of files: server/shard_store.h moves rows between it and RocksDB.
//
// The Shard validates and applies; each other concept is a room of its own that it owns: its tables and their
// memory budgets (server/table_registry.h), the checks of keys, blocks and gradients (server/request_checks.h),
// the job id and worker generations (server/job_fence.h), a failed disk tier (server/tier_health.h), BSP's
// previous rows (server/bsp_undo.h), BSP aggregation (server/bsp_aggregator.h), server-enforced clocks
// (server/read_gate.h) and push idempotence (server/recent_requests.h).
//
// Thread-safe: any number of threads may call any method. Tables, once created, live as long as the Shard;
// the table registry is read without locks (an immutable map published through an atomic pointer).
#ifndef KESTREL_SERVER_SHARD_H_
#define KESTREL_SERVER_SHARD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/partition.h"
#include "common/thread_pool.h"
#include "proto/table.pb.h"
#include "server/bsp_aggregator.h"
#include "server/bsp_undo.h"
#include "server/cut_memory.h"
#include "server/job_fence.h"
#include "server/read_gate.h"
#include "server/recent_requests.h"
#include "server/request_checks.h"
#include "server/table.h"
#include "server/table_registry.h"
#include "server/tier_health.h"

namespace kestrel {

// Who sent a request. Mirrors proto RequestHeader without tying the core to protobuf messages.
struct RequestContext {
  absl::string_view job_id;
  int32_t worker_rank = -1;  // -1: a tool, not a worker
  int64_t clock = 0;
  uint64_t request_id = 0;
  // Workers: the generation the scheduler answered this worker's registration (or rejoin) with; checked exactly
  // once the shard has heard from the scheduler (SetJobView), unchecked before.
  uint64_t generation = 0;
  // BSP pushes: this request is part `part` of `parts` the worker sends this shard for (table, clock).
  int part = 0;
  int parts = 1;
};

struct ShardOptions {
  // Requests must name this job. Default: "kestrel".
  std::string job_id = "kestrel";
  // The server whose key ranges this Shard (a range group) holds: its own, or a backup of another's. Default: 0.
  int owner = 0;
  // Largest number of keys (or dense blocks) in one request. Default: 4194304 (4Mi).
  size_t max_keys_per_request = size_t{1} << 22;
  // Largest pull answer, in bytes of values: larger pulls are refused before anything is allocated (the gRPC
  // edge sets it from its message limit). Default: 64 MiB - 4 KiB.
  size_t max_response_bytes = (size_t{64} << 20) - 4096;
  // Most tables a shard holds. Default: 1024.
  size_t max_tables = 1024;
  // 0: pushes are applied on arrival (SSP, ASP). N > 0: BSP with N workers: each clock's pushes from workers
  // 0..N-1 are combined in rank order, averaged (summed for OptimizerConfig::ASSIGN tables) and applied once
  // all have arrived (server/bsp_aggregator.h); a duplicate part is applied once. Default: 0.
  int bsp_workers = 0;
  // SSP/ASP: the workers whose recent push ids the shard remembers (so a retried push is applied once), each
  // up to RecentRequests' window. Once the shard hears from the scheduler, the job's worker count replaces it;
  // a push from a worker beyond it is refused (ResourceExhausted) rather than forgetting another's. Default: 256.
  size_t max_push_workers = 256;
  // Bytes of memory the shard's bounded tables (those with a CapacityPolicy) may hold together, shared in
  // proportion to their row sizes; a table's own max_memory_bytes caps its share. 0: only the tables' own
  // budgets. Default: 0.
  uint64_t memory_budget_bytes = 0;
  // Bytes of row copies a pending copy-on-write checkpoint cut may keep before pushes wait (server/cut_memory.h);
  // 0: no bound. Default: CutMemory::kDefaultBound (512 MiB).
  uint64_t max_cut_retained_bytes = CutMemory::kDefaultBound;
  // Threads that share a large pull or push of an unbounded table with the caller's, stripe by stripe
  // (Table::set_stripe_pool: the same result as one thread). For a process where one caller's requests are the
  // load, such as kestrel_worker --local's in-process servers; a gRPC server's requests already run on many
  // handler threads. Not owned; must outlive the shard. Default: null (the caller's thread alone).
  ThreadPool* stripe_pool = nullptr;
};


struct TableStats {
  TableConfig config;
  uint64_t rows = 0;
  uint64_t memory_bytes = 0;
  uint64_t raw_bytes = 0;
  TableTierStats tier;
};

struct ShardStats {
  uint64_t pull_requests = 0;
  uint64_t push_requests = 0;
  uint64_t keys_pulled = 0;
  uint64_t keys_pushed = 0;
  uint64_t rejected_requests = 0;
  std::vector<TableStats> tables;  // sorted by name
};

class Shard {
 public:
  // Fails when options.owner is not a server of `partition`.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Shard>> Create(const ShardOptions& options, Partition partition);

  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  int owner() const { return options_.owner; }
  const Partition& partition() const { return partition_; }
  const std::string& job_id() const { return options_.job_id; }
  // The key ranges this shard owns.
  const std::vector<KeyRange>& ranges() const { return ranges_; }

  // Creates a table. Idempotent: returns false (and OK) when an identical table exists, AlreadyExists when a
  // table of that name exists with a different config.
  [[nodiscard]] absl::StatusOr<bool> CreateTable(const RequestContext& ctx, const TableConfig& config);
  // Configs of all tables, sorted by name.
  std::vector<TableConfig> DescribeTables() const;

  // Sparse rows. `keys` strictly increasing and owned by this shard; `expected_dim` 0 or the table's dim.
  // Pull resizes `values` to keys.size() * dim floats (packed little-endian) and fills it in key order.
  [[nodiscard]] absl::Status Pull(const RequestContext& ctx, absl::string_view table, absl::Span<const uint64_t> keys,
                    int expected_dim, std::string* values);
  // The same, writing the rows wherever `alloc(floats)` says once the request is validated (the gRPC edge
  // uses it to write rows straight into the response buffer). `alloc` is not called on error.
  [[nodiscard]] absl::Status Pull(const RequestContext& ctx, absl::string_view table, absl::Span<const uint64_t> keys,
                    int expected_dim, absl::FunctionRef<float*(size_t floats)> alloc);
  // One gradient row per key, keys.size() * dim floats; all finite.
  [[nodiscard]] absl::Status Push(const RequestContext& ctx, absl::string_view table, absl::Span<const uint64_t> keys,
                    absl::Span<const float> grads, int expected_dim);

  // Server-enforced clocks (server/read_gate.h): a worker's read of `table` (of `kind`) that must see every
  // worker's clocks < `need`. Checks the job, the generation and the table first (their errors, as Pull gives
  // them); then true when the read may run now, else `done` runs once it may (OK) or the wait ends (Aborted by a
  // restore, Unavailable at `deadline` or while kMaxWaitingReads reads wait).
  [[nodiscard]] absl::StatusOr<bool> AwaitClocks(const RequestContext& ctx, absl::string_view table, TableConfig::Kind kind,
                                   int64_t need, absl::Time deadline, ReadGate::Callback done);
  // Clocks < `clock` are complete on every table (the checkpoint a Restore loaded is of `clock`, or a rescale's
  // new layout starts there): releases the reads that waited for them.
  void StartClocksAt(int64_t clock);
  // A rescale's switch at the boundary `clock` (every worker held there, nothing waiting): the clocks start
  // afresh at `clock` for `workers` workers (0: the count stays), whatever ranks pushed before.
  void RestartClocksAt(int64_t clock, int workers);
  // Fails the reads waiting past their deadline (the server calls it periodically); returns how many.
  size_t ExpireWaits(absl::Time now) { return read_gate_.Expire(now); }
  // The clocks every worker's updates of `table` are complete through (ReadGate::Complete), and the lowest over
  // the tables.
  int64_t CompleteClocks(absl::string_view table) const { return read_gate_.Complete(table); }
  int64_t CompleteClocks() const { return read_gate_.CompleteAll(); }
  int64_t CompleteClocksOf(int worker) const { return read_gate_.CompleteFor(worker); }
  // Elastic jobs under server-enforced clocks (RescaleShard FRONTIER): the first clock some worker of `workers`
  // has not pushed completely to a table of this group, lowest and highest over the tables (BSP: the clock being
  // collected counts once its part is buffered). {INT64_MAX, -1} for a group without tables.
  std::pair<int64_t, int64_t> PushFrontier(const std::vector<int>& workers);
  // RescaleShard HOLD (common/held_reads.h): reads needing clocks >= `from` are answered "held at `at`" until
  // ReleaseReads(), a restore or a switch.
  void HoldReads(int64_t from, int64_t at) { read_gate_.HoldReads(from, at); }
  void ReleaseReads() { read_gate_.ReleaseReads(); }

  // Dense blocks, named by block index (strictly increasing, each < the table's block count, each owned by
  // this shard according to Partition::DenseBlockKey). Same layout as the sparse calls, one row per block.
  [[nodiscard]] absl::Status PullDense(const RequestContext& ctx, absl::string_view table, absl::Span<const uint64_t> blocks,
                         int expected_dim, std::string* values);
  [[nodiscard]] absl::Status PushDense(const RequestContext& ctx, absl::string_view table, absl::Span<const uint64_t> blocks,
                         absl::Span<const float> grads, int expected_dim);

  // Whether Push (SPARSE) or PushDense (DENSE) of these arguments would pass the checks made before anything is
  // applied (the table, dim, keys or blocks, gradients, a BSP rank), without applying it: a caller that applies
  // several pushes as one request (a Step) checks them all first. A refusal is counted.
  [[nodiscard]] absl::Status CheckPush(const RequestContext& ctx, absl::string_view table, TableConfig::Kind kind,
                         absl::Span<const uint64_t> ids, absl::Span<const float> grads, int expected_dim) const;

  // Counts `status` as a rejected request when it is an error (for rejections made before the Shard is
  // called, e.g. undecodable messages); returns it.
  [[nodiscard]] absl::Status Count(absl::Status status) const;
  template <typename T>
  [[nodiscard]] absl::StatusOr<T> Count(absl::StatusOr<T> value) const {
    if (!value.ok()) Count(value.status()).IgnoreError();  // counted; the caller returns `value`
    return value;
  }

  // FailedPrecondition when the request names another job than this shard's. Once the shard has heard from
  // the scheduler (SetJobView), a worker's request must carry exactly the generation the scheduler holds for
  // its rank: an older one comes from a superseded incarnation (a revived zombie: FailedPrecondition) or from
  // before a rollback (Aborted); a newer one is one this shard has not heard of yet (Unavailable: retry; the
  // generation listener is told, so the shard asks the scheduler at once); a rank beyond the job's workers is
  // InvalidArgument.
  [[nodiscard]] absl::Status CheckJob(const RequestContext& ctx) const;
  // What the scheduler's latest heartbeat answer said: the job generation and, by worker rank, the generation
  // each rank's requests carry. Until the first call, worker requests are not checked (a server without a
  // scheduler).
  void SetJobView(uint64_t job_generation, std::vector<uint64_t> worker_generations);
  // `listener` (may be null) runs, on a request thread, whenever a request or a restore carries a generation
  // this shard has not heard of: it must not block (the server asks its heartbeat thread to beat now).
  void SetGenerationListener(std::function<void()> listener);
  // A restore that would refuse worker generations below `min_worker_generation` must not be ahead of the
  // job: waits up to `wait` for the scheduler's view to reach it, then InvalidArgument (a bogus generation
  // would lock every worker out until the server restarts). A shard without a scheduler only takes 0.
  [[nodiscard]] absl::Status CheckRestoreGeneration(uint64_t min_worker_generation, absl::Duration wait) const;

  // Runs `fn` with every table (sorted by name) while no request is in progress and none can start.
  // (Copy-on-write checkpoints begin their cut in it: Table::BeginCut.)
  [[nodiscard]] absl::Status Exclusive(absl::FunctionRef<absl::Status(const std::vector<Table*>& tables)> fn);

  // Receives one checkpointed row: returns whether this shard owns `key` and took the row.
  using RowSink = absl::FunctionRef<absl::StatusOr<bool>(absl::string_view table, uint64_t key,
                                                          absl::Span<const float> row)>;
  // Receives a checkpointed admission sketch: returns whether it was written for this shard's key span (and
  // was taken; other spans' are ignored, admission then starts afresh).
  using SketchSink =
      absl::FunctionRef<absl::StatusOr<bool>(absl::string_view table, const AdmissionSketchState& state)>;
  // Replaces the shard's state with a checkpoint's: creates the tables of `tables` that do not exist
  // (FailedPrecondition when one exists with another config), empties every table, drops buffered BSP pushes,
  // then lets `load` feed rows to the sink; rows of keys other shards own are ignored. From then on, worker
  // requests with a generation below `min_worker_generation` are refused (Aborted). If `load` fails, the shard
  // is left empty and refuses every request (FailedPrecondition) until a Restore succeeds.
  [[nodiscard]] absl::Status Restore(const std::vector<TableConfig>& tables, uint64_t min_worker_generation,
                       absl::FunctionRef<absl::Status(RowSink rows, SketchSink sketches)> load);

  // A rescale's new range group, built before it serves anything (server/rescale_participant.h): adds rows to it, one
  // stored row (stored_floats() floats, packed little-endian in `rows`) per key of `keys` (packed uint64 LE).
  // InvalidArgument for an unknown table, bytes that are not whole rows, or a key outside this shard's ranges;
  // the rows before the bad one are kept (the caller drops the whole group then). Returns the rows loaded.
  [[nodiscard]] absl::StatusOr<uint64_t> LoadRows(absl::string_view table, absl::string_view keys, absl::string_view rows);

  // Elastic jobs, BSP (server/bsp_aggregator.h Fence / CompleteWithout): BSP workers `workers` were removed while
  // clock `clock` was collected. FenceWorkers refuses their pushes of `clock` and later on every table and
  // answers how many tables had already applied `clock` with their parts (then it cannot be taken back).
  // CompleteClockWithout applies `clock` on every table from the other workers' parts, averaged over them, and
  // answers how many tables applied it now. FailedPrecondition outside BSP.
  [[nodiscard]] absl::StatusOr<int> FenceWorkers(const std::vector<int>& workers, int64_t clock);
  [[nodiscard]] absl::StatusOr<int> CompleteClockWithout(int64_t clock);
  // A rescale that changes only the worker count (the partition stays): BSP's worker count becomes
  // `bsp_workers` from the next clock on, in place. FailedPrecondition while a clock's pushes are being
  // collected (it must be called at a clock boundary); InvalidArgument for a count out of range or a change of
  // consistency mode (0 <-> > 0).
  [[nodiscard]] absl::Status SetBspWorkers(int bsp_workers);
  int bsp_workers() const { return bsp_workers_.load(std::memory_order_acquire); }

  // Where bounded tables with a disk budget put the rows they move out of memory (null: none, the default;
  // such tables then drop them). Must outlive the shard's use of it; set before serving.
  void SetColdTier(ColdTier* tier);
  // `listener` (may be null) runs once when a disk tier fails mid-push: the shard then refuses requests
  // (FailedPrecondition) until a Restore. The server's listener exits, so the scheduler recovers the job.
  void SetFailureListener(std::function<void(const absl::Status&)> listener);
  // Records a failed disk tier update (a push's, or the writes a checkpoint held back: ShardStore), returns the
  // error callers get from then on; OK stays OK.
  [[nodiscard]] absl::Status TierFailed(absl::Status status);

  // The retained row copies of the tables' pending copy-on-write cut, and their bound (server/cut_memory.h).
  CutMemory& cut_memory() { return cut_memory_; }

  ShardStats Stats() const;
  // Fingerprint of all state (every table's config and rows): equal iff the shards hold the same data.
  uint64_t Fingerprint() const;
  // The table, or nullptr. The pointer stays valid for the Shard's lifetime.
  const Table* FindTable(absl::string_view name) const;

 private:
  Shard(const ShardOptions& options, Partition partition);

  [[nodiscard]] absl::StatusOr<Table*> LookupTable(const RequestContext& ctx, absl::string_view table,
                                     TableConfig::Kind kind, int expected_dim) const;
  // The checks of a write before anything is applied (CheckPush); its table and keys. Needs state_mu_ held.
  [[nodiscard]] absl::StatusOr<std::pair<Table*, absl::Span<const uint64_t>>> CheckedWrite(
      const RequestContext& ctx, absl::string_view name, TableConfig::Kind kind, absl::Span<const uint64_t> ids,
      absl::Span<const float> grads, int expected_dim) const ABSL_SHARED_LOCKS_REQUIRED(state_mu_);
  // Pull/PullDense and Push/PushDense after the kind-specific key checks.
  [[nodiscard]] absl::Status Read(const RequestContext& ctx, absl::string_view table, TableConfig::Kind kind,
                    absl::Span<const uint64_t> ids, int expected_dim,
                    absl::FunctionRef<float*(size_t floats)> alloc);
  [[nodiscard]] absl::Status Write(const RequestContext& ctx, absl::string_view table, TableConfig::Kind kind,
                     absl::Span<const uint64_t> ids, absl::Span<const float> grads, int expected_dim);

  // The BSP aggregator of `table` (created on first use).
  BspAggregator* AggregatorFor(const Table& table);
  // Applies a BSP clock's combined batch to `table` (keeping the rows' previous values: BspUndo), then tells the
  // aggregator.
  // The reads the clock allows (server/read_gate.h) are added to `released`, to run once state_mu_ is released.
  [[nodiscard]] absl::Status ApplyBsp(Table& table, const BspAggregator::Batch& batch, std::vector<ReadGate::Callback>* released)
      ABSL_SHARED_LOCKS_REQUIRED(state_mu_);
  [[nodiscard]] absl::StatusOr<int> CompleteClockWithoutLocked(int64_t clock, std::vector<ReadGate::Callback>* released);
  // Write() under state_mu_, handing the reads its push allows to `released`.
  [[nodiscard]] absl::Status WriteLocked(const RequestContext& ctx, absl::string_view table, TableConfig::Kind kind,
                           absl::Span<const uint64_t> ids, absl::Span<const float> grads, int expected_dim,
                           std::vector<ReadGate::Callback>* released);

  const ShardOptions options_;
  std::atomic<int> bsp_workers_;  // options_.bsp_workers until SetBspWorkers
  const Partition partition_;
  const std::vector<KeyRange> ranges_;
  const RequestChecks checks_;  // keys, blocks and gradients against partition_ and ranges_

  // Held shared by every request while it validates and touches tables; exclusively by Exclusive/Restore.
  mutable absl::Mutex state_mu_;
  std::string restore_error_ ABSL_GUARDED_BY(state_mu_);  // non-empty: the last Restore failed

  CutMemory cut_memory_;  // every table's retained copies
  TableRegistry tables_;  // after cut_memory_, which its tables use
  TierHealth tier_;
  JobFence fence_;
  ReadGate read_gate_;              // server-enforced clocks
  RecentRequests recent_requests_;  // SSP/ASP: pushes already applied, by (worker, request id)
  absl::Mutex bsp_mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<BspAggregator>> aggregators_ ABSL_GUARDED_BY(bsp_mu_);
  BspUndo undo_;  // BSP: the rows the last applied clock changed, as they were before it

  mutable std::atomic<uint64_t> pull_requests_{0}, push_requests_{0}, keys_pulled_{0}, keys_pushed_{0},
      rejected_requests_{0};
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_SHARD_H_
