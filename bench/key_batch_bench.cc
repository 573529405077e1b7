// KeyBatch::Build (sort + dedup + split by owner, done once per batch on every worker) on training-like
// batches, against the two earlier algorithms (std::sort of all (key, position) pairs; the stable radix sort
// of all pairs, before the hash dedup that now sorts only the unique keys), in one run.
//
//   bench/run_micro_bench.sh key_batch_bench        (writes bench/results/key_batch_bench.md)
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/key_batch.h"
#include "common/partition.h"
#include "worker/data/datagen.h"

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

// The 26 categorical keys of `samples` rows of kestrel_datagen's training split at the realistic size
// (vocabularies up to 100k, Zipf 1.1: bench/run_train_bench.sh realistic).
std::vector<uint64_t> DatagenBatch(int samples) {
  DatagenOptions options;
  options.max_vocab = 100000;
  const PlantedModel model(options);
  std::vector<uint64_t> keys;
  keys.reserve(samples * 26);
  CriteoExample example;
  for (int s = 0; s < samples; ++s) {
    model.Draw(/*split=*/0, s, &example);
    for (uint32_t field = 0; field < 26; ++field) {
      keys.push_back(Partition::FieldFeatureKey(field, example.categories[field]));
    }
  }
  return keys;
}

// range(0) examples; range(1): 0 the Zipf-over-1e6 batch, 1 kestrel_datagen's.
std::vector<uint64_t> BatchOf(const benchmark::State& state) {
  const int samples = static_cast<int>(state.range(0));
  return state.range(1) == 0 ? TrainingBatch(samples) : DatagenBatch(samples);
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

// The radix-sort Build before the hash dedup: every (key, position) pair sorted, then dedup.
void RadixSortAllDedup(const std::vector<uint64_t>& keys, std::vector<std::pair<uint64_t, uint32_t>>* sorted,
                       std::vector<std::pair<uint64_t, uint32_t>>* scratch, std::vector<uint64_t>* unique,
                       std::vector<uint32_t>* inverse) {
  sorted->resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) (*sorted)[i] = {keys[i], static_cast<uint32_t>(i)};
  KeyBatch::SortByKey(sorted, scratch);
  unique->clear();
  inverse->resize(keys.size());
  for (const auto& [key, pos] : *sorted) {
    if (unique->empty() || unique->back() != key) unique->push_back(key);
    (*inverse)[pos] = static_cast<uint32_t>(unique->size() - 1);
  }
}

void BM_KeyBatchBuild(benchmark::State& state) {
  const auto keys = BatchOf(state);
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
  const auto keys = BatchOf(state);
  std::vector<std::pair<uint64_t, uint32_t>> sorted;
  std::vector<uint64_t> unique;
  std::vector<uint32_t> inverse;
  for (auto _ : state) {
    StdSortDedup(keys, &sorted, &unique, &inverse);
    benchmark::DoNotOptimize(unique.data());
  }
  state.SetItemsProcessed(state.iterations() * keys.size());
  state.counters["unique_fraction"] = static_cast<double>(unique.size()) / keys.size();
}

void BM_PreviousRadixSortAll(benchmark::State& state) {
  const auto keys = BatchOf(state);
  std::vector<std::pair<uint64_t, uint32_t>> sorted, scratch;
  std::vector<uint64_t> unique;
  std::vector<uint32_t> inverse;
  for (auto _ : state) {
    RadixSortAllDedup(keys, &sorted, &scratch, &unique, &inverse);
    benchmark::DoNotOptimize(unique.data());
  }
  state.SetItemsProcessed(state.iterations() * keys.size());
  state.counters["unique_fraction"] = static_cast<double>(unique.size()) / keys.size();
}

BENCHMARK(BM_KeyBatchBuild)->ArgsProduct({{512, 4096, 32768}, {0, 1}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PreviousRadixSortAll)->ArgsProduct({{512, 4096, 32768}, {0, 1}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PreviousStdSort)->ArgsProduct({{512, 4096, 32768}, {0, 1}})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kestrel

BENCHMARK_MAIN();
