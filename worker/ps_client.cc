#include "worker/ps_client.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/random/random.h"
#include "absl/time/clock.h"
#include "common/gradients.h"
#include "common/half.h"
#include "common/key_batch.h"
#include "common/limits.h"
#include "common/packed.h"
#include "common/status.h"

namespace kestrel {
namespace {

// One request of a call: rows [first_row, first_row + rows) of the call's server-grouped id list.
struct Rpc {
  int owner = 0;   // the range group (its owner server)
  int server = 0;  // where the current attempt goes: the group's primary
  int seq = 0;  // index among this call's requests to the same server
  size_t first_row = 0;
  size_t rows = 0;
  float* pull_into = nullptr;        // kPull: where the rows land
  const void* push_from = nullptr;   // pushes: where the encoded gradient rows are read from
  size_t push_bytes = 0;
  std::vector<uint16_t> wire;        // pushes of a half type: the encoded rows
  PullRequest pull_request;
  PullResponse pull_response;
  PushRequest push_request;
  PushResponse push_response;
  absl::Status status;
};

// Buffers one call reuses from earlier calls: request/response strings keep their capacity.
struct CallBuffers {
  std::vector<float> rows;        // dense blocks: pulled values or gradients
  std::vector<uint64_t> ids;      // dense block ids grouped by server
  std::vector<size_t> offsets;    // server s's ids are [offsets[s], offsets[s+1])
  std::vector<std::unique_ptr<Rpc>> rpcs;
};

// Buffers of the raw-keys forms: the KeyBatch built from the keys, and its unique rows.
struct RawKeysBuffers {
  KeyBatch batch;
  std::vector<float> rows;
};

// A free list of T, each lent to one call at a time, so calls reuse earlier calls' buffers. Thread-safe.
template <typename T>
class BufferPool {
 public:
  // Borrows a T (a new one when none is free) for its lifetime.
  class Lease {
   public:
    explicit Lease(BufferPool* pool) : pool_(pool) {
      absl::MutexLock lock(&pool_->mu_);
      if (pool_->free_.empty()) {
        item_ = std::make_unique<T>();
      } else {
        item_ = std::move(pool_->free_.back());
        pool_->free_.pop_back();
      }
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() {
      absl::MutexLock lock(&pool_->mu_);
      pool_->free_.push_back(std::move(item_));
    }
    T& operator*() const { return *item_; }

   private:
    BufferPool* const pool_;
    std::unique_ptr<T> item_;
  };

 private:
  absl::Mutex mu_;
  std::vector<std::unique_ptr<T>> free_ ABSL_GUARDED_BY(mu_);
};

// One pool for every client's raw-keys calls (a decorator's nested call takes a buffer of its own).
BufferPool<RawKeysBuffers>& RawKeysPool() {
  static auto* pool = new BufferPool<RawKeysBuffers>();
  return *pool;
}

// InvalidArgument unless one call can carry `keys` keys of `dim` floats.
absl::Status CheckShape(size_t keys, int dim) {
  if (dim < 1) return absl::InvalidArgumentError(absl::StrCat("dim must be >= 1, got ", dim));
  if (keys >= UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(keys, " keys in one call: split it below 2^32"));
  }
  return absl::OkStatus();
}

// The raw-keys forms' common part: checks the call, builds `keys` into leased buffers (room for the unique rows
// unless the batch is the keys themselves) and runs `call` with them.
template <typename Call>
absl::Status WithRawKeys(absl::Span<const uint64_t> keys, int dim, const Partition& partition, Call call) {
  KESTREL_RETURN_IF_ERROR(CheckShape(keys.size(), dim));
  BufferPool<RawKeysBuffers>::Lease lease(&RawKeysPool());
  RawKeysBuffers& b = *lease;
  b.batch.Build(keys, partition);
  if (!b.batch.identity()) b.rows.resize(b.batch.num_unique() * dim);
  return call(b);
}

// Counts outstanding calls; Wait() returns when all have called Done().
class Completion {
 public:
  explicit Completion(int pending) : pending_(pending) {}
  void Done() {
    absl::MutexLock lock(&mu_);
    --pending_;
  }
  void Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* pending) { return *pending == 0; }, &pending_));
  }

 private:
  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_);
};

absl::Status OnServer(int server, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("server ", server, ": ", status.message()));
}

bool IsPush(PsMethod m) { return m == PsMethod::kPush || m == PsMethod::kPushDense; }

class RoutedPsClient final : public PsClient {
 public:
  RoutedPsClient(const PsClientOptions& options, Partition partition, std::unique_ptr<PsTransport> transport)
      : options_(options),
        partition_(std::move(partition)),
        replicated_(partition_.replicas() > 1 && options.routing != nullptr),
        transport_(std::move(transport)) {}

  absl::Status CreateTable(const TableConfig& config) override {
    CreateTableRequest request;
    FillHeader(request.mutable_header(), /*clock=*/0);
    *request.mutable_config() = config;
    std::vector<CreateTableResponse> responses;
    KESTREL_RETURN_IF_ERROR(Broadcast(PsMethod::kCreateTable, request, &responses));
    absl::MutexLock lock(&configs_mu_);
    configs_[config.name()] = config;
    return absl::OkStatus();
  }

  const Partition& partition() const override { return partition_; }

  absl::Status Pull(absl::string_view table, const KeyBatch& keys, int dim, float* rows,
                    const CallClock& clock) override {
    KESTREL_RETURN_IF_ERROR(CheckBatch(keys, dim));
    CallLease lease(&pool_);
    CallBuffers& b = *lease;
    return Execute(PsMethod::kPull, table, PullType(table), dim, keys.unique_keys(), BatchOffsets(keys, &b),
                   nullptr, rows, clock, &b);
  }

  absl::Status Push(absl::string_view table, const KeyBatch& keys, int dim, const float* grads,
                    const CallClock& clock) override {
    KESTREL_RETURN_IF_ERROR(CheckBatch(keys, dim));
    // Refuse bad gradients before anything is sent, so no server applies part of a batch it should not.
    KESTREL_RETURN_IF_ERROR(CheckGradients(table, absl::MakeConstSpan(grads, keys.num_unique() * dim), dim,
                                           [&](size_t row) { return keys.unique_keys()[row]; }));
    CallLease lease(&pool_);
    CallBuffers& b = *lease;
    return Execute(PsMethod::kPush, table, WireType(table), dim, keys.unique_keys(), BatchOffsets(keys, &b), grads,
                   nullptr, clock, &b);
  }

  absl::Status PullDense(absl::string_view table, absl::Span<float> out, const CallClock& clock) override {
    KESTREL_ASSIGN_OR_RETURN(TableConfig config, DenseConfig(table, out.size(), clock.clock));
    const int dim = config.dim();
    CallLease lease(&pool_);
    CallBuffers& b = *lease;
    GroupBlocks(config, &b);
    b.rows.resize(b.ids.size() * dim);
    KESTREL_RETURN_IF_ERROR(Execute(PsMethod::kPullDense, table, config.wire_type(), dim, b.ids, b.offsets, nullptr,
                                    b.rows.data(), clock, &b));
    for (size_t i = 0; i < b.ids.size(); ++i) {
      const size_t begin = b.ids[i] * dim;
      const size_t n = std::min<size_t>(dim, out.size() - begin);
      std::memcpy(out.data() + begin, b.rows.data() + i * dim, n * sizeof(float));
    }
    return absl::OkStatus();
  }

  absl::Status PushDense(absl::string_view table, absl::Span<const float> grads, const CallClock& clock) override {
    if (grads.empty()) {  // nothing to push: BSP servers get an empty part each, others nothing
      CallLease lease(&pool_);
      CallBuffers& b = *lease;
      b.ids.clear();
      b.offsets.assign(partition_.num_servers() + 1, 0);
      return Execute(PsMethod::kPushDense, table, WireType(table), /*dim=*/0, b.ids, b.offsets, nullptr, nullptr,
                     clock, &b);
    }
    KESTREL_ASSIGN_OR_RETURN(TableConfig config, DenseConfig(table, grads.size(), clock.clock));
    KESTREL_RETURN_IF_ERROR(CheckGradients(table, grads, config.dim(), [](size_t block) { return block; }));
    const int dim = config.dim();
    CallLease lease(&pool_);
    CallBuffers& b = *lease;
    GroupBlocks(config, &b);
    b.rows.assign(b.ids.size() * dim, 0.0f);  // the last block's padding gets zero gradients
    for (size_t i = 0; i < b.ids.size(); ++i) {
      const size_t begin = b.ids[i] * dim;
      const size_t n = std::min<size_t>(dim, grads.size() - begin);
      std::memcpy(b.rows.data() + i * dim, grads.data() + begin, n * sizeof(float));
    }
    return Execute(PsMethod::kPushDense, table, config.wire_type(), dim, b.ids, b.offsets, b.rows.data(), nullptr,
                   clock, &b);
  }

  absl::Status Step(absl::Span<const StepPart> parts, const CallClock& push, const CallClock& pull) override {
    if (replicated_) return PsClient::Step(parts, push, pull);  // Steps are not forwarded to backups
    if (parts.size() > static_cast<size_t>(kMaxStepTables)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("a step of %d tables: at most %d", parts.size(), kMaxStepTables));
    }
    const int servers = partition_.num_servers();
    // Per part: where each server's keys (or dense blocks) start, and the dense blocks' padded rows.
    struct Plan {
      std::vector<size_t> push_offsets, pull_offsets;
      CallBuffers push_blocks, pull_blocks;
      ValueType push_type = VALUE_TYPE_FLOAT32, pull_type = VALUE_TYPE_FLOAT32;
      int dim = 0;
    };
    std::vector<Plan> plans(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      const StepPart& p = parts[i];
      Plan& plan = plans[i];
      plan.push_type = WireType(p.table);
      plan.pull_type = PullType(p.table);
      plan.dim = p.dim;
      if (p.dense) {
        if ((p.push && p.push_floats > 0) || p.pull) {
          KESTREL_ASSIGN_OR_RETURN(TableConfig config,
                                   DenseConfig(p.table, p.push && p.push_floats > 0 ? p.push_floats : p.pull_floats,
                                               push.clock));
          plan.dim = config.dim();
          if (p.push && p.push_floats > 0) {
            KESTREL_RETURN_IF_ERROR(CheckGradients(p.table, absl::MakeConstSpan(p.grads, p.push_floats), plan.dim,
                                                   [](size_t block) { return block; }));
            GroupBlocks(config, &plan.push_blocks);
            CallBuffers& b = plan.push_blocks;
            b.rows.assign(b.ids.size() * plan.dim, 0.0f);  // the last block's padding gets zero gradients
            for (size_t k = 0; k < b.ids.size(); ++k) {
              const size_t begin = b.ids[k] * plan.dim;
              const size_t n = std::min<size_t>(plan.dim, p.push_floats - begin);
              std::memcpy(b.rows.data() + k * plan.dim, p.grads + begin, n * sizeof(float));
            }
          } else {
            plan.push_blocks.ids.clear();
            plan.push_blocks.offsets.assign(servers + 1, 0);
          }
          if (p.pull) {
            GroupBlocks(config, &plan.pull_blocks);
            plan.pull_blocks.rows.resize(plan.pull_blocks.ids.size() * plan.dim);
          }
        } else {
          plan.push_blocks.ids.clear();
          plan.push_blocks.offsets.assign(servers + 1, 0);
        }
      } else {
        if (p.push) {
          KESTREL_RETURN_IF_ERROR(CheckBatch(*p.push_keys, p.dim));
          KESTREL_RETURN_IF_ERROR(
              CheckGradients(p.table, absl::MakeConstSpan(p.grads, p.push_keys->num_unique() * p.dim), p.dim,
                             [&](size_t row) { return p.push_keys->unique_keys()[row]; }));
          CallBuffers b;
          plan.push_offsets = BatchOffsets(*p.push_keys, &b);
        }
        if (p.pull) {
          KESTREL_RETURN_IF_ERROR(CheckBatch(*p.pull_keys, p.dim));
          CallBuffers b;
          plan.pull_offsets = BatchOffsets(*p.pull_keys, &b);
        }
      }
    }
    // One request per server, every part in it (table i's push is request id + i on the server, see
    // HandleStepPushes: the ids are reserved), keys and gradients encoded straight into it; the answers' rows
    // land straight in the caller's rows (dense: the padded blocks).
    std::vector<std::shared_ptr<const std::string>> requests(servers);
    std::vector<std::vector<StepRead>> reads(servers);
    size_t largest = 0;  // the largest request or answer, in bytes
    for (int s = 0; s < servers; ++s) {
      RequestHeader header;
      FillHeader(&header, push.clock);
      next_request_id_.fetch_add(kMaxStepTables - 1, std::memory_order_relaxed);
      if (pull.wait_clock.has_value()) header.set_wait_clock(*pull.wait_clock);
      std::vector<StepTableWrite> tables(parts.size());
      size_t answer = 0;
      for (size_t i = 0; i < parts.size(); ++i) {
        const StepPart& p = parts[i];
        const Plan& plan = plans[i];
        StepTableWrite& t = tables[i];
        t.table = p.table;
        t.dense = p.dense;
        t.dim = plan.dim;
        if (p.push) {
          t.push = true;
          t.push_type = plan.push_type;
          const uint64_t* ids = p.dense ? plan.push_blocks.ids.data() : p.push_keys->unique_keys().data();
          const float* rows = p.dense ? plan.push_blocks.rows.data() : p.grads;
          const std::vector<size_t>& offsets = p.dense ? plan.push_blocks.offsets : plan.push_offsets;
          t.push_keys = absl::MakeConstSpan(ids + offsets[s], offsets[s + 1] - offsets[s]);
          t.grads = rows == nullptr ? nullptr : rows + offsets[s] * plan.dim;
        }
        if (p.pull) {
          t.pull = true;
          t.pull_type = plan.pull_type;
          const uint64_t* ids = p.dense ? plan.pull_blocks.ids.data() : p.pull_keys->unique_keys().data();
          const std::vector<size_t>& offsets = p.dense ? plan.pull_blocks.offsets : plan.pull_offsets;
          t.pull_keys = absl::MakeConstSpan(ids + offsets[s], offsets[s + 1] - offsets[s]);
          float* out = (p.dense ? plans[i].pull_blocks.rows.data() : p.rows) + offsets[s] * plan.dim;
          reads[s].push_back({out, t.pull_keys.size() * plan.dim, plan.pull_type});
          answer += t.pull_keys.size() * plan.dim * BytesPerValue(plan.pull_type);
        }
      }
      KESTREL_ASSIGN_OR_RETURN(std::string bytes, WriteStepRequest(header, pull.clock, tables));
      largest = std::max({largest, bytes.size(), answer});
      requests[s] = std::make_shared<const std::string>(std::move(bytes));
    }
    // Past half the message limit the separate calls, which split their requests, carry the step instead.
    if (largest > static_cast<size_t>(options_.max_message_bytes) / 2) return PsClient::Step(parts, push, pull);
    std::vector<absl::Status> statuses(servers);
    Completion all(servers);
    for (int s = 0; s < servers; ++s) {
      StepOwner(s, requests[s], reads[s], [&, s](absl::Status status) {
        statuses[s] = std::move(status);
        all.Done();
      });
    }
    all.Wait();
    for (int s = 0; s < servers; ++s) {
      if (absl::IsUnavailable(statuses[s])) {
        statuses[s] = WithRetries(s, pull.wait_clock.has_value(), [&](std::function<void(absl::Status)> done) {
          StepOwner(s, requests[s], reads[s], std::move(done));
        });
      }
      KESTREL_RETURN_IF_ERROR(OnServer(s, statuses[s]));
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      const StepPart& p = parts[i];
      if (!p.dense || !p.pull) continue;
      const CallBuffers& b = plans[i].pull_blocks;
      for (size_t k = 0; k < b.ids.size(); ++k) {
        const size_t begin = b.ids[k] * plans[i].dim;
        const size_t n = std::min<size_t>(plans[i].dim, p.pull_floats - begin);
        std::memcpy(p.rows + begin, b.rows.data() + k * plans[i].dim, n * sizeof(float));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<StatsResponse>> Stats() override {
    StatsRequest request;
    FillHeader(request.mutable_header(), /*clock=*/0);
    std::vector<StatsResponse> responses;
    KESTREL_RETURN_IF_ERROR(Broadcast(PsMethod::kStats, request, &responses));
    return responses;
  }

  void SetGeneration(uint64_t generation) override { generation_.store(generation, std::memory_order_relaxed); }

 private:
  using CallLease = BufferPool<CallBuffers>::Lease;

  // InvalidArgument naming the first NaN/Inf/too-large gradient (common/gradients.h); `id_of(row)` names
  // the row's key (or dense block).
  static absl::Status CheckGradients(absl::string_view table, absl::Span<const float> grads, int dim,
                                     const std::function<uint64_t(size_t)>& id_of) {
    const int64_t bad = FirstBadGradient(grads);
    if (bad < 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrFormat(
        "bad gradient %g for key/block 0x%016x element %d of table '%s': gradients must be finite with |g| <= %g; "
        "nothing was sent",
        grads[bad], id_of(bad / dim), bad % dim, table, kMaxGradientMagnitude));
  }

  // CheckShape, and a batch built for this client's servers.
  absl::Status CheckBatch(const KeyBatch& keys, int dim) const {
    KESTREL_RETURN_IF_ERROR(CheckShape(keys.num_keys(), dim));
    if (keys.num_servers() != partition_.num_servers()) {
      return absl::InvalidArgumentError(absl::StrFormat("a key batch split over %d servers, the client has %d",
                                                        keys.num_servers(), partition_.num_servers()));
    }
    return absl::OkStatus();
  }

  void FillHeader(RequestHeader* header, int64_t clock) {
    header->set_job_id(options_.job_id);
    header->set_worker_rank(options_.worker_rank);
    header->set_clock(clock);
    header->set_generation(generation_.load(std::memory_order_relaxed));
    header->set_request_id(next_request_id_.fetch_add(1, std::memory_order_relaxed));
  }

  // The server that serves `owner`'s ranges now (-1: every copy is out of service; the job rolls back).
  int ServerFor(int owner) const { return replicated_ ? options_.routing->Current()->PrimaryOfOwner(owner) : owner; }

  // Names the range group in a replicated job's requests.
  void SetOwner(RequestHeader* header, int owner) const {
    if (replicated_) header->set_owner(owner);
  }

  // Whether a request that failed with `status` on attempt `attempt` (0-based) of a call begun at `start` is
  // tried again: UNAVAILABLE, within max_retries or, in a replicated job, within failover_timeout.
  // A read waiting for its clocks (`waiting`) is asked again within read_wait_timeout.
  bool ShouldRetry(const absl::Status& status, int attempt, absl::Time start, bool waiting = false) const {
    if (!absl::IsUnavailable(status)) return false;
    if (attempt < options_.max_retries) return true;
    if (waiting && absl::Now() - start < options_.read_wait_timeout &&
        !(options_.give_up != nullptr && options_.give_up())) {
      return true;
    }
    return replicated_ && absl::Now() - start < options_.failover_timeout &&
           !(options_.give_up != nullptr && options_.give_up());
  }
  absl::Duration Backoff(int attempt) const {
    return std::min(options_.retry_backoff * (1 << std::min(attempt, 10)),
                    std::max(options_.retry_backoff, absl::Milliseconds(500)));
  }

  // Starts one attempt of `method` on `owner`'s primary.
  void CallOwner(int owner, PsMethod method, const google::protobuf::Message& request,
                 google::protobuf::Message* response, std::function<void(absl::Status)> done) {
    const int server = ServerFor(owner);
    if (server < 0) {
      return done(absl::UnavailableError(
          absl::StrFormat("every copy of the ranges of server %d is out of service: the job rolls back", owner)));
    }
    transport_->Call(server, method, request, response, options_.rpc_deadline, std::move(done));
  }

  // Starts one attempt of a Step (a serialized StepRequest) on `owner`'s primary.
  void StepOwner(int owner, std::shared_ptr<const std::string> request, absl::Span<const StepRead> reads,
                 std::function<void(absl::Status)> done) {
    const int server = ServerFor(owner);
    if (server < 0) {
      return done(absl::UnavailableError(
          absl::StrFormat("every copy of the ranges of server %d is out of service: the job rolls back", owner)));
    }
    transport_->Step(server, std::move(request), reads, options_.rpc_deadline, std::move(done));
  }

  // Where each server's keys start in keys.unique_keys(), and their end.
  const std::vector<size_t>& BatchOffsets(const KeyBatch& keys, CallBuffers* b) {
    b->offsets.resize(partition_.num_servers() + 1);
    for (int s = 0; s <= partition_.num_servers(); ++s) {
      b->offsets[s] = s < partition_.num_servers() ? keys.offset_of(s) : keys.num_unique();
    }
    return b->offsets;
  }

  // The block ids of a dense table, grouped by owning server, increasing within each server.
  void GroupBlocks(const TableConfig& config, CallBuffers* b) {
    const uint64_t num_blocks = Partition::DenseBlockCount(config.dense_size(), config.dim());
    const int servers = partition_.num_servers();
    b->offsets.assign(servers + 1, 0);
    b->ids.resize(num_blocks);
    std::vector<int> owner(num_blocks);
    for (uint64_t k = 0; k < num_blocks; ++k) {
      owner[k] = partition_.OwnerOf(Partition::DenseBlockKey(config.name(), k));
      ++b->offsets[owner[k] + 1];
    }
    for (int s = 0; s < servers; ++s) b->offsets[s + 1] += b->offsets[s];
    std::vector<size_t> next(b->offsets.begin(), b->offsets.end() - 1);
    for (uint64_t k = 0; k < num_blocks; ++k) b->ids[next[owner[k]]++] = k;
  }

  // How `table`'s values travel: its config's wire_type (fp32 for a table this client has not seen); pulls of
  // a table stored in two bytes in that type (PullWireType).
  ValueType WireType(absl::string_view table) {
    absl::MutexLock lock(&configs_mu_);
    auto it = configs_.find(table);
    return it == configs_.end() ? VALUE_TYPE_FLOAT32 : it->second.wire_type();
  }
  ValueType PullType(absl::string_view table) {
    absl::MutexLock lock(&configs_mu_);
    auto it = configs_.find(table);
    return it == configs_.end() ? VALUE_TYPE_FLOAT32 : PullWireType(it->second);
  }

  absl::StatusOr<TableConfig> DenseConfig(absl::string_view table, size_t size, int64_t clock) {
    {
      absl::MutexLock lock(&configs_mu_);
      auto it = configs_.find(table);
      if (it == configs_.end()) {
        // Learn the table from server 0 below.
      } else if (it->second.kind() != TableConfig::DENSE) {
        return absl::InvalidArgumentError(absl::StrCat("table '", table, "' is not dense"));
      } else if (it->second.dense_size() != size) {
        return absl::InvalidArgumentError(absl::StrFormat("dense table '%s' has %d floats, the buffer %d",
                                                          table, it->second.dense_size(), size));
      } else {
        return it->second;
      }
    }
    KESTREL_RETURN_IF_ERROR(RefreshConfigs(clock));
    absl::MutexLock lock(&configs_mu_);
    auto it = configs_.find(table);
    if (it == configs_.end()) return absl::NotFoundError(absl::StrCat("table '", table, "' does not exist"));
    if (it->second.kind() != TableConfig::DENSE || it->second.dense_size() != size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "table '%s' is not a dense table of %d floats", table, size));
    }
    return it->second;
  }

  absl::Status RefreshConfigs(int64_t clock) {
    DescribeTablesRequest request;
    FillHeader(request.mutable_header(), clock);
    SetOwner(request.mutable_header(), 0);
    DescribeTablesResponse response;
    KESTREL_RETURN_IF_ERROR(CallWithRetries(0, PsMethod::kDescribeTables, request, &response));
    absl::MutexLock lock(&configs_mu_);
    for (const TableDescription& t : response.tables()) configs_[t.config().name()] = t.config();
    return absl::OkStatus();
  }

  // One call to `owner`'s primary, retried on UNAVAILABLE (re-routed at every attempt).
  absl::Status CallWithRetries(int owner, PsMethod method, const google::protobuf::Message& request,
                               google::protobuf::Message* response, bool waiting = false) {
    return WithRetries(owner, waiting, [&](std::function<void(absl::Status)> done) {
      CallOwner(owner, method, request, response, std::move(done));
    });
  }

  // Attempts of `start` (one call to `owner`, answering its argument) until one is not to be retried.
  absl::Status WithRetries(int owner, bool waiting,
                           absl::FunctionRef<void(std::function<void(absl::Status)> done)> start) {
    absl::Status status;
    const absl::Time start_time = absl::Now();
    for (int attempt = 0;; ++attempt) {
      Completion done(1);
      start([&](absl::Status s) {
        status = std::move(s);
        done.Done();
      });
      done.Wait();
      if (!ShouldRetry(status, attempt, start_time, waiting)) return OnServer(owner, status);
      absl::SleepFor(Backoff(attempt));
    }
  }

  // The same request to every range group's primary in parallel (naming the group in a replicated job),
  // retried on UNAVAILABLE.
  template <typename Request, typename Response>
  absl::Status Broadcast(PsMethod method, const Request& request, std::vector<Response>* responses) {
    const int n = partition_.num_servers();
    responses->assign(n, Response());
    std::vector<Request> requests(n, request);
    std::vector<absl::Status> statuses(n);
    // Each group's call runs its own retry loop; they proceed in parallel through the transport.
    Completion all(n);
    for (int s = 0; s < n; ++s) {
      SetOwner(requests[s].mutable_header(), s);
      CallOwner(s, method, requests[s], &(*responses)[s], [&, s](absl::Status status) {
        statuses[s] = std::move(status);
        all.Done();
      });
    }
    all.Wait();
    for (int s = 0; s < n; ++s) {
      if (absl::IsUnavailable(statuses[s])) statuses[s] = CallWithRetries(s, method, requests[s], &(*responses)[s]);
      KESTREL_RETURN_IF_ERROR(OnServer(s, statuses[s]));
    }
    return absl::OkStatus();
  }

  // Sends ids [offsets[s], offsets[s+1]) to server s, split into requests of at most max_request_bytes, all in
  // parallel, each carrying `call`'s clocks. Pushes send in_rows (one row of `dim` per id); pulls write out_rows.
  absl::Status Execute(PsMethod method, absl::string_view table, ValueType wire, int dim,
                       absl::Span<const uint64_t> ids, const std::vector<size_t>& offsets, const float* in_rows,
                       float* out_rows, const CallClock& call, CallBuffers* b) {
    const bool push = IsPush(method);
    const int64_t clock = call.clock;
    const bool waiting = !push && call.wait_clock.has_value();
    const size_t value_bytes = BytesPerValue(wire);
    if (value_bytes == 0) return absl::InvalidArgumentError(absl::StrCat("table '", table, "': unknown wire type"));
    const size_t row_bytes = sizeof(uint64_t) + value_bytes * static_cast<size_t>(dim);
    const size_t max_rows = std::max<size_t>(1, options_.max_request_bytes / row_bytes);
    size_t count = 0;
    for (int s = 0; s < partition_.num_servers(); ++s) {
      const size_t rows_here = offsets[s + 1] - offsets[s];
      // BSP servers need a part from every worker for every push, so an empty one goes where no key does; so
      // does a read waiting for its clocks (CallClock::wait_clock).
      const int parts = rows_here == 0 ? ((push && options_.bsp_pushes) || waiting ? 1 : 0)
                                       : static_cast<int>((rows_here + max_rows - 1) / max_rows);
      for (int seq = 0; seq < parts; ++seq) {
        const size_t first = offsets[s] + static_cast<size_t>(seq) * max_rows;
        if (count == b->rpcs.size()) b->rpcs.push_back(std::make_unique<Rpc>());
        Rpc& rpc = *b->rpcs[count++];
        rpc.owner = s;
        rpc.server = s;
        rpc.seq = seq;
        rpc.pull_into = nullptr;  // slots are reused across calls: reset every per-call field
        rpc.push_from = nullptr;
        rpc.first_row = first;
        rpc.rows = std::min(max_rows, offsets[s + 1] - first);
        auto id_bytes = absl::string_view(reinterpret_cast<const char*>(ids.data() + first),
                                          rpc.rows * sizeof(uint64_t));
        if (push) {
          FillHeader(rpc.push_request.mutable_header(), clock);
          SetOwner(rpc.push_request.mutable_header(), s);
          rpc.push_request.set_table(std::string(table));
          rpc.push_request.set_dim(dim);
          rpc.push_request.mutable_keys()->assign(id_bytes.data(), id_bytes.size());
          rpc.push_request.set_part(seq);
          rpc.push_request.set_parts(parts);
          rpc.push_request.set_value_type(wire);
          rpc.push_request.set_scale_exponent(0);
          const float* grads = in_rows + first * dim;
          const size_t n = rpc.rows * dim;
          rpc.push_bytes = n * value_bytes;
          if (rpc.rows == 0) {
            rpc.push_from = nullptr;
          } else if (wire == VALUE_TYPE_FLOAT32) {
            rpc.push_from = grads;  // sent from there, not copied
          } else {
            // Each request's own scale: its largest gradient decides, so one large row elsewhere in the call
            // does not flush this request's small gradients to zero.
            const int scale = wire == VALUE_TYPE_FLOAT16 ? Float16ScaleExponent(grads, n) : 0;
            rpc.push_request.set_scale_exponent(scale);
            rpc.wire.resize(n);
            KESTREL_RETURN_IF_ERROR(EncodeValues(wire, grads, n, scale, rpc.wire.data()));
            rpc.push_from = rpc.wire.data();
          }
        } else {
          FillHeader(rpc.pull_request.mutable_header(), clock);
          if (waiting) rpc.pull_request.mutable_header()->set_wait_clock(*call.wait_clock);
          SetOwner(rpc.pull_request.mutable_header(), s);
          rpc.pull_request.set_table(std::string(table));
          rpc.pull_request.set_dim(dim);
          rpc.pull_request.set_value_type(wire);
          rpc.pull_into = method == PsMethod::kPull ? out_rows + first * dim : nullptr;
          rpc.pull_request.mutable_keys()->assign(id_bytes.data(), id_bytes.size());
        }
      }
    }

    std::vector<Rpc*> rpcs;
    for (size_t i = 0; i < count; ++i) rpcs.push_back(b->rpcs[i].get());
    KESTREL_RETURN_IF_ERROR(Send(method, std::move(rpcs), waiting));

    if (push || method == PsMethod::kPull) return absl::OkStatus();  // kPull rows already landed (PullInto)
    for (size_t i = 0; i < count; ++i) {
      const Rpc& rpc = *b->rpcs[i];
      const std::string& values = rpc.pull_response.values();
      if (values.size() != rpc.rows * dim * value_bytes || rpc.pull_response.value_type() != wire) {
        return absl::DataLossError(absl::StrFormat(
            "server %d returned %d bytes of %s for %d rows of dim %d of table '%s' (expected %s)", rpc.server,
            values.size(), ValueType_Name(rpc.pull_response.value_type()), rpc.rows, dim, table,
            ValueType_Name(wire)));
      }
      KESTREL_RETURN_IF_ERROR(
          OnServer(rpc.server, DecodeValues(wire, values.data(), rpc.rows * dim, 0, out_rows + rpc.first_row * dim)));
    }
    return absl::OkStatus();
  }

  // Sends `pending` in waves of at most max_inflight_per_server requests per server, and retries reads that
  // failed with UNAVAILABLE.
  absl::Status Send(PsMethod method, std::vector<Rpc*> pending, bool waiting) {
    const bool push = IsPush(method);
    const int window = std::max(1, options_.max_inflight_per_server);
    const absl::Time start = absl::Now();
    for (int attempt = 0; !pending.empty(); ++attempt) {
      int waves = 0;
      for (Rpc* rpc : pending) waves = std::max(waves, rpc->seq / window + 1);
      for (int wave = 0; wave < waves; ++wave) {
        std::vector<Rpc*> batch;
        for (Rpc* rpc : pending) {
          if (rpc->seq / window == wave) batch.push_back(rpc);
        }
        Completion all(static_cast<int>(batch.size()));
        for (Rpc* rpc : batch) {
          auto on_done = [rpc, &all](absl::Status s) {
            rpc->status = std::move(s);
            all.Done();
          };
          rpc->server = ServerFor(rpc->owner);  // re-routed at every attempt
          if (rpc->server < 0) {
            on_done(absl::UnavailableError(absl::StrFormat(
                "every copy of the ranges of server %d is out of service: the job rolls back", rpc->owner)));
            rpc->server = rpc->owner;  // names the group in errors
            continue;
          }
          if (push) {
            transport_->PushFrom(rpc->server, method, rpc->push_request, rpc->push_from, rpc->push_bytes,
                                 options_.rpc_deadline, std::move(on_done));
            continue;
          }
          if (rpc->pull_into != nullptr) {
            transport_->PullInto(rpc->server, rpc->pull_request, rpc->pull_into,
                                 rpc->rows * rpc->pull_request.dim(), options_.rpc_deadline, std::move(on_done));
            continue;
          }
          google::protobuf::Message* response =
              push ? static_cast<google::protobuf::Message*>(&rpc->push_response) : &rpc->pull_response;
          const google::protobuf::Message& request =
              push ? static_cast<const google::protobuf::Message&>(rpc->push_request) : rpc->pull_request;
          transport_->Call(rpc->server, method, request, response, options_.rpc_deadline, std::move(on_done));
        }
        all.Wait();
        // Stop at the first failure that will not be retried: later waves must not be applied after it.
        for (Rpc* rpc : batch) {
          const bool will_retry = ShouldRetry(rpc->status, attempt, start, waiting);
          if (!rpc->status.ok() && !will_retry) return OnServer(rpc->server, rpc->status);
        }
      }
      std::vector<Rpc*> retry;
      for (Rpc* rpc : pending) {
        if (rpc->status.ok()) continue;
        if (ShouldRetry(rpc->status, attempt, start, waiting)) {
          retry.push_back(rpc);
        } else {
          return OnServer(rpc->server, rpc->status);
        }
      }
      pending.swap(retry);
      if (!pending.empty()) absl::SleepFor(Backoff(attempt));
    }
    return absl::OkStatus();
  }

  const PsClientOptions options_;
  const Partition partition_;
  const bool replicated_;  // requests name their group and go to its primary (options_.routing)
  const std::unique_ptr<PsTransport> transport_;
  std::atomic<uint64_t> generation_{0};
  // Random high bits: a restarted worker's request ids never collide with its predecessor's (servers
  // deduplicate pushes by (worker, request id)).
  std::atomic<uint64_t> next_request_id_{absl::Uniform<uint64_t>(absl::BitGen(), 1, uint64_t{1} << 62)};

  BufferPool<CallBuffers> pool_;

  absl::Mutex configs_mu_;
  absl::flat_hash_map<std::string, TableConfig> configs_ ABSL_GUARDED_BY(configs_mu_);
};

}  // namespace

absl::Status PsClient::Pull(absl::string_view table, absl::Span<const uint64_t> keys, int dim, float* out,
                            const CallClock& clock) {
  return WithRawKeys(keys, dim, partition(), [&](RawKeysBuffers& b) -> absl::Status {
    if (b.batch.identity()) return Pull(table, b.batch, dim, out, clock);
    KESTREL_RETURN_IF_ERROR(Pull(table, b.batch, dim, b.rows.data(), clock));
    b.batch.Scatter(b.rows.data(), dim, out);
    return absl::OkStatus();
  });
}

absl::Status PsClient::Push(absl::string_view table, absl::Span<const uint64_t> keys, int dim, const float* grads,
                            const CallClock& clock) {
  return WithRawKeys(keys, dim, partition(), [&](RawKeysBuffers& b) -> absl::Status {
    if (b.batch.identity()) return Push(table, b.batch, dim, grads, clock);
    b.batch.Reduce(grads, dim, b.rows.data());
    return Push(table, b.batch, dim, b.rows.data(), clock);
  });
}

void PsTransport::PullInto(int server, const PullRequest& request, float* out, size_t floats,
                           absl::Duration deadline, std::function<void(absl::Status)> done) {
  auto response = std::make_shared<PullResponse>();
  Call(server, PsMethod::kPull, request, response.get(), deadline,
       [response, out, floats, wire = request.value_type(), done = std::move(done)](absl::Status status) {
         const ValueType type = response->value_type();
         if (status.ok() && (type != wire || response->values().size() != floats * BytesPerValue(wire))) {
           status = absl::DataLossError(absl::StrFormat("PullResponse carries %d bytes of %s values, expected %d of %s",
                                                        response->values().size(), ValueType_Name(type), floats,
                                                        ValueType_Name(wire)));
         }
         if (status.ok()) status = DecodeValues(wire, response->values().data(), floats, 0, out);
         done(std::move(status));
       });
}

void PsTransport::PushFrom(int server, PsMethod method, const PushRequest& request, const void* values,
                           size_t bytes, absl::Duration deadline, std::function<void(absl::Status)> done) {
  struct State {
    PushRequest request;
    PushResponse response;
  };
  auto state = std::make_shared<State>();
  state->request = request;
  if (bytes > 0) state->request.mutable_values()->assign(static_cast<const char*>(values), bytes);
  Call(server, method, state->request, &state->response, deadline,
       [state, done = std::move(done)](absl::Status status) { done(std::move(status)); });
}

void PsTransport::Step(int server, std::shared_ptr<const std::string> request, absl::Span<const StepRead> reads,
                       absl::Duration deadline, std::function<void(absl::Status)> done) {
  struct State {
    StepRequest request;
    StepResponse response;
  };
  auto state = std::make_shared<State>();
  if (!state->request.ParseFromString(*request)) return done(absl::InvalidArgumentError("malformed StepRequest"));
  Call(server, PsMethod::kStep, state->request, &state->response, deadline,
       [state, reads, done = std::move(done)](absl::Status status) {
         if (status.ok()) {  // one decoding path: the answer's bytes, read as the gRPC transport reads them
           grpc::Slice bytes(state->response.SerializeAsString());
           status = ReadStepPulls(grpc::ByteBuffer(&bytes, 1), reads);
         }
         done(std::move(status));
       });
}

absl::Status PsClient::Step(absl::Span<const StepPart> parts, const CallClock& push, const CallClock& pull) {
  for (const StepPart& p : parts) {
    if (!p.push) continue;
    KESTREL_RETURN_IF_ERROR(p.dense ? PushDense(p.table, absl::MakeConstSpan(p.grads, p.push_floats), push)
                                    : Push(p.table, *p.push_keys, p.dim, p.grads, push));
  }
  for (const StepPart& p : parts) {
    if (!p.pull) continue;
    KESTREL_RETURN_IF_ERROR(p.dense ? PullDense(p.table, absl::MakeSpan(p.rows, p.pull_floats), pull)
                                    : Pull(p.table, *p.pull_keys, p.dim, p.rows, pull));
  }
  return absl::OkStatus();
}

std::unique_ptr<PsClient> NewPsClient(const PsClientOptions& options, Partition partition,
                                      std::unique_ptr<PsTransport> transport) {
  return std::make_unique<RoutedPsClient>(options, std::move(partition), std::move(transport));
}

}  // namespace kestrel
