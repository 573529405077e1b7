// KeyBatch::Build (sort + dedup + split by owner, done once per batch on every worker) on training-like
// batches, against the previous algorithm (std::sort of (key, position) pairs), in one run.
//
//   bench/run_micro_bench.sh key_batch_bench        (writes bench/results/key_batch_bench.md)
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/key_batch.h"
#include "common/partition.h"

namespace kestrel {
namespace {

// A batch of `samples` x 26 categorical fields with Zipf-like value popularity (like Criteo): many repeats.
std::vector<uint64_t> TrainingBatch(int samples) {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> keys;
  keys.reserve(samples * 26);
  for (int s = 0; s < samples; ++s) {
    for (uint32_t field = 0; field < 26; ++field) {
      // Zipf-ish: value = floor(exp(u * ln(1e6))) favours small values.
      const double u = std::uniform_real_distribution<double>(0, 1)(rng);
      const uint64_t value = static_cast<uint64_t>(std::exp(u * std::log(1e6)));
      keys.push_back(Partition::FieldFeatureKey(field, value));
    }
  }
  return keys;
}

// The previous KeyBatch sort: std::sort of (key, position) pairs, then dedup.
void StdSortDedup(const std::vector<uint64_t>& keys, std::vector<std::pair<uint64_t, uint32_t>>* sorted,
                  std::vector<uint64_t>* unique, std::vector<uint32_t>* inverse) {
  sorted->resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) (*sorted)[i] = {keys[i], static_cast<uint32_t>(i)};
  std::sort(sorted->begin(), sorted->end());
  unique->clear();
  inverse->resize(keys.size());
  for (const auto& [key, pos] : *sorted) {
    if (unique->empty() || unique->back() != key) unique->push_back(key);
    (*inverse)[pos] = static_cast<uint32_t>(unique->size() - 1);
  }
}

void BM_KeyBatchBuild(benchmark::State& state) {
  const auto keys = TrainingBatch(static_cast<int>(state.range(0)));
  const Partition partition = *Partition::Uniform(4);
  KeyBatch batch;
  for (auto _ : state) {
    batch.Build(keys, partition);
    benchmark::DoNotOptimize(batch.unique_keys().data());
  }
  state.SetItemsProcessed(state.iterations() * keys.size());
  state.counters["unique_fraction"] = static_cast<double>(batch.num_unique()) / keys.size();
}

void BM_PreviousStdSort(benchmark::State& state) {
  const auto keys = TrainingBatch(static_cast<int>(state.range(0)));
  std::vector<std::pair<uint64_t, uint32_t>> sorted;
  std::vector<uint64_t> unique;
  std::vector<uint32_t> inverse;
  for (auto _ : state) {
    StdSortDedup(keys, &sorted, &unique, &inverse);
    benchmark::DoNotOptimize(unique.data());
  }
  state.SetItemsProcessed(state.iterations() * keys.size());
}

BENCHMARK(BM_KeyBatchBuild)->Arg(512)->Arg(4096)->Arg(32768)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PreviousStdSort)->Arg(512)->Arg(4096)->Arg(32768)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kestrel

BENCHMARK_MAIN();
