// The row cache keeps the SSP promise for every read (property test against the scheduler's ClockTable and
// real Shards), answers hot keys from the cache, applies the worker's own SGD pushes, and stays bounded.
#include "worker/row_cache.h"

#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "scheduler/clock_table.h"
#include "server/shard.h"
#include "inprocess/local_ps_client.h"

namespace kestrel {
namespace {

constexpr int kDim = 4;

TableConfig SgdTable(const std::string& name) {
  TableConfig c;
  c.set_name(name);
  c.set_dim(kDim);
  c.mutable_initializer()->set_type(InitializerConfig::ZEROS);
  c.mutable_optimizer()->set_type(OptimizerConfig::SGD);
  c.mutable_optimizer()->set_learning_rate(1.0f);
  return c;
}

struct Cluster {
  Cluster() {
    partition = std::make_unique<Partition>(*Partition::Uniform(2));
    for (int s = 0; s < 2; ++s) {
      ShardOptions options;
      options.job_id = "job";
      options.owner = s;
      shards.push_back(*Shard::Create(options, *partition));
    }
  }
  std::unique_ptr<PsClient> Client() {
    PsClientOptions options;
    options.job_id = "job";
    std::vector<Shard*> raw;
    for (auto& s : shards) raw.push_back(s.get());
    return NewLocalPsClient(options, raw);
  }
  std::unique_ptr<Partition> partition;
  std::vector<std::unique_ptr<Shard>> shards;
};

// A training read at `clock` whose pulled rows get freshness `fresh` (the requests carry clock 0).
CallClock Read(int64_t clock, int64_t fresh) { return CallClock{0, CacheRead{clock, fresh}}; }

// Blocks until the ClockTable lets `rank` start `clock`.
absl::Status WaitToStart(ClockTable& clocks, int rank, int64_t clock) {
  absl::Notification done;
  absl::Status status;
  clocks.WaitToStart(rank, clock, [&](absl::Status s) {
    status = s;
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

struct Outcome {
  int64_t violations = 0;  // reads missing an update the SSP promise covers
  RowCacheStats stats;
};

// `workers` threads run `iterations` SSP(s) iterations each over the same keys, at random speeds: wait to start,
// read every key through their own RowCache (bound `cache_bound`), push -1 for every key (lr 1: a row's value
// counts the pushes applied), advance. A read at clock c must count every push of iterations <= c - s - 1 of
// every worker: at least workers * (c - s).
Outcome Simulate(int workers, int s, int64_t cache_bound, int iterations, uint64_t seed) {
  Cluster cluster;
  std::unique_ptr<PsClient> setup = cluster.Client();
  EXPECT_TRUE(setup->CreateTable(SgdTable("emb")).ok());
  std::unique_ptr<ClockTable> clocks = *ClockTable::Create(workers, ConsistencyPolicy::Ssp(s));
  std::vector<uint64_t> keys(40);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = Partition::FeatureKey(i);
  std::sort(keys.begin(), keys.end());
  std::atomic<int64_t> violations{0};
  std::vector<RowCacheStats> stats(workers);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      std::unique_ptr<PsClient> client = cluster.Client();
      RowCacheOptions options;
      options.bound = cache_bound;
      RowCache cache(client.get(), options);
      cache.AddTable(SgdTable("emb"));
      std::mt19937 rng(seed + w);
      std::vector<float> rows(keys.size() * kDim), ones(keys.size() * kDim, 1.0f);
      for (int64_t c = 0; c < iterations; ++c) {
        ASSERT_TRUE(WaitToStart(*clocks, w, c).ok());
        const int64_t fresh = clocks->MinClock();  // every push of iterations < fresh is applied
        ASSERT_TRUE(cache.Pull("emb", keys, kDim, rows.data(), Read(c, fresh)).ok());
        for (size_t i = 0; i < keys.size(); ++i) {
          // Own SGD pushes are applied to the cache as well, so a row may count more, never fewer.
          if (-rows[i * kDim] < static_cast<float>(workers) * (c - s)) ++violations;
        }
        if (rng() % 3 == 0) absl::SleepFor(absl::Microseconds(rng() % 2000));
        ASSERT_TRUE(cache.Push("emb", keys, kDim, ones.data()).ok());
        ASSERT_TRUE(clocks->Advance(w, c + 1).ok());
      }
      stats[w] = cache.stats();
    });
  }
  for (auto& t : threads) t.join();
  Outcome out;
  out.violations = violations.load();
  for (const RowCacheStats& st : stats) {
    out.stats.hits += st.hits;
    out.stats.misses += st.misses;
  }
  return out;
}

TEST(RowCacheTest, EveryReadKeepsTheSspPromise) {
  for (int s : {1, 2, 3}) {
    SCOPED_TRACE(s);
    const Outcome o = Simulate(/*workers=*/3, s, /*cache_bound=*/s, /*iterations=*/60, /*seed=*/11 * s);
    EXPECT_EQ(o.violations, 0);
    EXPECT_GT(o.stats.hits, 0u) << "the cache answered nothing: the property test would prove nothing";
    EXPECT_GT(o.stats.misses, 0u);
  }
}

// The same simulation with a cache that keeps rows longer than SSP allows does break the promise: the test above
// can fail.
TEST(RowCacheTest, ATooLooseBoundIsCaught) {
  const Outcome o = Simulate(/*workers=*/3, /*s=*/1, /*cache_bound=*/6, /*iterations=*/60, /*seed=*/5);
  EXPECT_GT(o.violations, 0);
}

TEST(RowCacheTest, HitsOwnPushesAndBounds) {
  Cluster cluster;
  std::unique_ptr<PsClient> client = cluster.Client();
  ASSERT_TRUE(client->CreateTable(SgdTable("emb")).ok());
  TableConfig adagrad = SgdTable("ada");
  adagrad.mutable_optimizer()->set_type(OptimizerConfig::ADAGRAD);
  ASSERT_TRUE(client->CreateTable(adagrad).ok());
  RowCacheOptions options;
  options.bound = 2;
  options.max_rows = 10;
  RowCache cache(client.get(), options);
  cache.AddTable(SgdTable("emb"));
  cache.AddTable(adagrad);
  std::vector<uint64_t> keys = {Partition::FeatureKey(1), Partition::FeatureKey(2)};
  std::sort(keys.begin(), keys.end());
  std::vector<float> rows(2 * kDim), grads(2 * kDim, 0.5f);
  ASSERT_TRUE(cache.Pull("emb", keys, kDim, rows.data(), Read(/*clock=*/0, /*fresh=*/0)).ok());
  EXPECT_EQ(cache.stats().misses, 2u);
  ASSERT_TRUE(cache.Push("emb", keys, kDim, grads.data()).ok());
  // Clock 2 with freshness 0 and bound 2: answered from the cache, which holds the own push (-0.5).
  ASSERT_TRUE(cache.Pull("emb", keys, kDim, rows.data(), Read(2, 0)).ok());
  EXPECT_EQ(cache.stats().hits, 2u);
  for (float v : rows) EXPECT_EQ(v, -0.5f);
  // Clock 3: too stale, pulled again (the server's value is the same).
  ASSERT_TRUE(cache.Pull("emb", keys, kDim, rows.data(), Read(3, 3)).ok());
  EXPECT_EQ(cache.stats().misses, 4u);
  for (float v : rows) EXPECT_EQ(v, -0.5f);
  // Adagrad rows are cached but own pushes cannot be replayed: the cached copy stays as pulled.
  ASSERT_TRUE(cache.Pull("ada", keys, kDim, rows.data(), Read(0, 0)).ok());
  ASSERT_TRUE(cache.Push("ada", keys, kDim, grads.data()).ok());
  ASSERT_TRUE(cache.Pull("ada", keys, kDim, rows.data(), Read(1, 0)).ok());
  for (float v : rows) EXPECT_EQ(v, 0.0f);
  // Bounded: 30 more keys through a 10-row cache.
  std::vector<uint64_t> many(30);
  for (size_t i = 0; i < many.size(); ++i) many[i] = Partition::FeatureKey(100 + i);
  std::sort(many.begin(), many.end());
  std::vector<float> out(many.size() * kDim);
  for (size_t i = 0; i < many.size(); i += 5) {
    ASSERT_TRUE(cache.Pull("emb", absl::MakeConstSpan(many).subspan(i, 5), kDim, out.data(), Read(10 + i, 10 + i)).ok());
    EXPECT_LE(cache.stats().rows, 10u + 2u) << "the 'ada' table holds 2";
  }
  // A table not registered passes through.
  ASSERT_TRUE(client->CreateTable(SgdTable("plain")).ok());
  ASSERT_TRUE(cache.Pull("plain", keys, kDim, rows.data(), Read(0, 0)).ok());
}

// As a PsClient: tables created through it are cached, reads without a CacheRead (evaluations) and dense tables
// go to the servers, and raw keys with duplicates are answered in their order.
TEST(RowCacheTest, WrapsAPsClient) {
  Cluster cluster;
  std::unique_ptr<PsClient> client = cluster.Client();
  RowCacheOptions options;
  options.bound = 1;
  RowCache cache(client.get(), options);
  PsClient& ps = cache;
  ASSERT_TRUE(ps.CreateTable(SgdTable("emb")).ok());
  TableConfig dense = SgdTable("dense");
  dense.set_kind(TableConfig::DENSE);
  dense.set_dense_size(6);
  ASSERT_TRUE(ps.CreateTable(dense).ok());
  std::vector<uint64_t> keys = {Partition::FeatureKey(3), Partition::FeatureKey(1), Partition::FeatureKey(3)};
  std::vector<float> rows(keys.size() * kDim, 1.0f);
  ASSERT_TRUE(ps.Pull("emb", keys, kDim, rows.data(), Read(0, 0)).ok());
  EXPECT_EQ(cache.stats().misses, 2u) << "the duplicate is one key";
  for (float v : rows) EXPECT_EQ(v, 0.0f);
  // Another worker's push: a training read within the bound still sees the cached rows, an evaluation does not.
  std::vector<float> grads(keys.size() * kDim, 1.0f);
  ASSERT_TRUE(client->Push("emb", keys, kDim, grads.data()).ok());
  ASSERT_TRUE(ps.Pull("emb", keys, kDim, rows.data(), Read(1, 0)).ok());
  EXPECT_EQ(cache.stats().hits, 2u);
  for (float v : rows) EXPECT_EQ(v, 0.0f);
  ASSERT_TRUE(ps.Pull("emb", keys, kDim, rows.data()).ok());
  EXPECT_EQ(cache.stats().hits + cache.stats().misses, 4u) << "an evaluation's read is not counted";
  EXPECT_EQ(rows[0], -2.0f) << "key 3's two gradients, summed";
  EXPECT_EQ(rows[kDim], -1.0f);
  std::vector<float> tensor(6, 0.5f);
  ASSERT_TRUE(ps.PushDense("dense", tensor, {}).ok());
  ASSERT_TRUE(ps.PullDense("dense", absl::MakeSpan(tensor), {}).ok());
  for (float v : tensor) EXPECT_EQ(v, -0.5f);
  EXPECT_EQ(&ps.partition(), &client->partition());
}

}  // namespace
}  // namespace kestrel
