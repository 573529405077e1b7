// RowCache: a PsClient that wraps another and answers training reads of sparse rows from a cache, bounded by the
// job's consistency mode.
//
// Under SSP(s) the scheduler lets iteration c start once the slowest worker has finished c - s iterations, and
// promises that every read at c sees all updates of iterations <= c - s - 1 of all workers. A row pulled when
// the worker knew the min clock to be m holds every update of iterations < m (a worker advances its clock only
// once all its pushes of the iteration are acknowledged). So that row may serve reads at any clock c with
// m >= c - s without asking a server: the promise holds for every read, cached or not (row_cache_test checks
// it). Hot keys (Zipf) then cost one pull per s clocks, a fresh key one pull. Under ASP the bound is a
// configurable number of the worker's own clocks (`bound`, freshness = the clock of the pull). BSP (s = 0)
// needs the latest rows, so a BSP worker has no cache.
//
// Only reads whose CallClock carries a CacheRead (the trainer's training reads) use the cache; other reads,
// dense tables and everything else go straight to the wrapped client, as do the sparse tables not registered
// (CreateTable through the cache registers them, AddTable one created elsewhere).
//
// The worker's own pushes are applied to its cached copies where the client can do so exactly: tables whose
// optimizer keeps no per-row state (SGD, ASSIGN; the server's own Optimizer code and defaults) and whose values
// travel as fp32 (a half-precision wire rounds them on the way). They are applied once the push is
// acknowledged, to the rows cached before the push began (a row pulled meanwhile may already hold it, and is
// left as pulled). Other optimizers keep per-row state on the servers (Adagrad's sums, FTRL's z and n), so a
// cached row of such a table shows this worker's own updates only from its next pull; the SSP promise above
// does not depend on them.
//
// Bounded: at most `max_rows` rows per table; a full table first drops the rows no read can use any more, then
// everything. Hits and misses are counted (hit_ratio in the worker's metrics).
//
// Thread-safe (one mutex per table, never held across a pull or push RPC). Does not own the wrapped PsClient,
// which must outlive it.
#ifndef KESTREL_WORKER_ROW_CACHE_H_
#define KESTREL_WORKER_ROW_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "proto/table.pb.h"
#include "common/optimizer.h"
#include "worker/ps_client.h"

namespace kestrel {

struct RowCacheOptions {
  // A cached row of freshness f serves reads at clock c while f >= c - bound (SSP: the staleness s). Default: 0.
  int64_t bound = 0;
  // Most rows kept per table. Default: 1M.
  size_t max_rows = size_t{1} << 20;
};

struct RowCacheStats {
  uint64_t hits = 0;    // keys answered from the cache
  uint64_t misses = 0;  // keys pulled from the servers
  uint64_t rows = 0;    // rows held now, over all tables
  double hit_ratio() const { return hits + misses == 0 ? 0 : static_cast<double>(hits) / (hits + misses); }
};

class RowCache final : public PsClient {
 public:
  RowCache(PsClient* client, RowCacheOptions options);

  // A sparse table whose rows may be cached (its dim and optimizer decide what a push does to them).
  void AddTable(const TableConfig& config);

  const Partition& partition() const override { return client_->partition(); }
  // Creates the table through the wrapped client, then registers it (AddTable).
  [[nodiscard]] absl::Status CreateTable(const TableConfig& config) override;
  // With clock.cache set, for a registered table: rows cached with freshness >= cache->read_clock - bound are
  // answered from the cache, the rest pulled (carrying clock.clock) and cached with freshness
  // cache->fresh_clock. Otherwise a pull through the wrapped client.
  [[nodiscard]] absl::Status Pull(absl::string_view table, const KeyBatch& keys, int dim, float* rows,
                    const CallClock& clock) override;
  // Pushes through the wrapped client, then applies the push to the cached rows where that is exact (SGD).
  [[nodiscard]] absl::Status Push(absl::string_view table, const KeyBatch& keys, int dim, const float* grads,
                    const CallClock& clock) override;
  [[nodiscard]] absl::Status PullDense(absl::string_view table, absl::Span<float> out, const CallClock& clock) override {
    return client_->PullDense(table, out, clock);
  }
  [[nodiscard]] absl::Status PushDense(absl::string_view table, absl::Span<const float> grads, const CallClock& clock) override {
    return client_->PushDense(table, grads, clock);
  }
  [[nodiscard]] absl::StatusOr<std::vector<StatsResponse>> Stats() override { return client_->Stats(); }
  void SetGeneration(uint64_t generation) override { client_->SetGeneration(generation); }
  using PsClient::Pull;  // the raw-keys forms
  using PsClient::Push;

  RowCacheStats stats() const;

 private:
  struct Entry {
    int64_t fresh = 0;
    uint64_t fetched = 0;  // TableCache::seq when the pull stored it
    uint32_t slot = 0;     // row index in `values`
  };
  struct TableCache {
    TableCache(const TableConfig& c, std::unique_ptr<Optimizer> o) : config(c), replay(std::move(o)) {}
    const TableConfig config;
    const std::unique_ptr<Optimizer> replay;  // the server's stateless optimizer, when own pushes can be replayed
    absl::Mutex mu;
    absl::flat_hash_map<uint64_t, Entry> index ABSL_GUARDED_BY(mu);
    std::vector<float> values ABSL_GUARDED_BY(mu);  // rows of config.dim() floats
    std::vector<uint32_t> free_slots ABSL_GUARDED_BY(mu);
    uint64_t seq ABSL_GUARDED_BY(mu) = 0;  // counts pushes begun and pulls stored
  };
  TableCache* Find(absl::string_view table) const;
  // Makes room for `incoming` rows: drops rows no read at `read_clock` or later can use, then everything.
  void MakeRoom(TableCache& t, size_t incoming, int64_t read_clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu);

  PsClient* const client_;
  const RowCacheOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<TableCache>> tables_ ABSL_GUARDED_BY(mu_);
  mutable absl::Mutex stats_mu_;
  uint64_t hits_ ABSL_GUARDED_BY(stats_mu_) = 0;
  uint64_t misses_ ABSL_GUARDED_BY(stats_mu_) = 0;
};

}  // namespace kestrel

#endif  // KESTREL_WORKER_ROW_CACHE_H_
