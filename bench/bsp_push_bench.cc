// The cost of BSP aggregation on a server: Shard::Push of 1e5 keys x 16 floats applied on arrival (SSP/ASP)
// against BSP with 1 and 2 workers (buffer every part, combine the clock in rank order, apply once), in one
// run. Items = keys pushed by all workers.
//
//   bench/run_micro_bench.sh bsp_push_bench        (writes bench/results/bsp_push_bench.md)
#include <algorithm>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/partition.h"
#include "server/shard.h"

namespace kestrel {
namespace {

constexpr int kKeys = 100000;
constexpr int kDim = 16;

std::unique_ptr<Shard> MakeShard(int bsp_workers) {
  ShardOptions options;
  options.job_id = "bench";
  options.bsp_workers = bsp_workers;
  auto shard = *Shard::Create(options, *Partition::Uniform(1));
  TableConfig c;
  c.set_name("emb");
  c.set_dim(kDim);
  c.mutable_optimizer()->set_type(OptimizerConfig::SGD);
  RequestContext ctx;
  ctx.job_id = "bench";
  (void)shard->CreateTable(ctx, c).ok();
  return shard;
}

std::vector<uint64_t> Keys(uint64_t salt) {
  std::vector<uint64_t> keys(kKeys);
  for (int i = 0; i < kKeys; ++i) keys[i] = Partition::FeatureKey(salt * 1000003 + i);
  std::sort(keys.begin(), keys.end());
  return keys;
}

// workers == 0: plain pushes; otherwise BSP with that many workers, each pushing every clock.
void BM_ShardPush(benchmark::State& state) {
  const int workers = static_cast<int>(state.range(0));
  auto shard = MakeShard(workers);
  std::vector<std::vector<uint64_t>> keys;
  for (int w = 0; w < std::max(1, workers); ++w) keys.push_back(Keys(w % 2));  // overlapping key sets
  const std::vector<float> grads(static_cast<size_t>(kKeys) * kDim, 0.01f);
  int64_t clock = 0;
  for (auto _ : state) {
    for (int w = 0; w < std::max(1, workers); ++w) {
      RequestContext ctx;
      ctx.job_id = "bench";
      ctx.worker_rank = workers == 0 ? -1 : w;
      ctx.clock = clock;
      if (!shard->Push(ctx, "emb", keys[w], grads, kDim).ok()) state.SkipWithError("push failed");
    }
    ++clock;
  }
  state.SetItemsProcessed(state.iterations() * std::max(1, workers) * int64_t{kKeys});
}

BENCHMARK(BM_ShardPush)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kestrel

BENCHMARK_MAIN();
