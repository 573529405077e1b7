#include "common/key_batch.h"

#include <algorithm>
#include <cstring>

#include "common/hash.h"

namespace kestrel {
namespace {

constexpr int kDigitBits = 11;  // 6 passes cover 64 bits; a 2048-entry histogram stays in L1
constexpr size_t kRadixThreshold = 512;  // below this, std::sort wins

// Sorts (key, position) pairs by key: LSD radix sort (stable), skipping digits all keys share.
void RadixSort(std::vector<std::pair<uint64_t, uint32_t>>* a, std::vector<std::pair<uint64_t, uint32_t>>* tmp) {
  constexpr size_t kBuckets = size_t{1} << kDigitBits;
  const size_t n = a->size();
  tmp->resize(n);
  for (int shift = 0; shift < 64; shift += kDigitBits) {
    uint32_t count[kBuckets] = {0};
    for (const auto& e : *a) ++count[(e.first >> shift) & (kBuckets - 1)];
    if (count[((*a)[0].first >> shift) & (kBuckets - 1)] == n) continue;  // every key has this digit
    uint32_t sum = 0;
    for (size_t b = 0; b < kBuckets; ++b) {
      const uint32_t c = count[b];
      count[b] = sum;
      sum += c;
    }
    for (const auto& e : *a) (*tmp)[count[(e.first >> shift) & (kBuckets - 1)]++] = e;
    a->swap(*tmp);
  }
}

}  // namespace

void KeyBatch::SortByKey(std::vector<std::pair<uint64_t, uint32_t>>* a,
                         std::vector<std::pair<uint64_t, uint32_t>>* tmp) {
  if (a->size() < kRadixThreshold) {
    std::sort(a->begin(), a->end());
  } else {
    RadixSort(a, tmp);
  }
}

void KeyBatch::DedupThenSort(absl::Span<const uint64_t> keys) {
  const size_t n = keys.size();
  // Dedup first, with an open-addressing table over the batch (unique keys numbered in first-seen order),
  // then sort only the unique keys: CTR batches repeat most keys (the 26 categorical fields of 4096
  // kestrel_datagen rows hold ~6x fewer unique keys than keys), and the hash pass costs less than the radix
  // passes it saves. The table is sized for the unique keys of the previous batch (a quarter more; the first batch:
  // an eighth of its keys), not for every key, so it stays in the cache (a slot holds its key and its id: one
  // cache line per probe); it doubles when it would be more than half full.
  const size_t want = expected_unique_ == 0 ? n / 8 : std::min(n, expected_unique_ + expected_unique_ / 4 + 16);
  size_t capacity = 16;
  while (capacity < 2 * want) capacity <<= 1;
  slots_.assign(capacity, DedupSlot{0, 0});
  size_t mask = capacity - 1;
  sorted_.clear();
  for (size_t i = 0; i < n; ++i) {
    const uint64_t key = keys[i];
    for (size_t h = Mix64(key) & mask;; h = (h + 1) & mask) {
      DedupSlot& slot = slots_[h];
      if (slot.id == 0) {
        const uint32_t fresh = static_cast<uint32_t>(sorted_.size());
        slot = {key, fresh + 1};
        sorted_.push_back({key, fresh});
        inverse_[i] = fresh;
        if (2 * sorted_.size() > capacity) {  // more than half full: double it and insert every key again
          capacity <<= 1;
          mask = capacity - 1;
          slots_.assign(capacity, DedupSlot{0, 0});
          for (const auto& [k, id] : sorted_) {
            size_t g = Mix64(k) & mask;
            while (slots_[g].id != 0) g = (g + 1) & mask;
            slots_[g] = {k, id + 1};
          }
        }
        break;
      }
      if (slot.key == key) {
        inverse_[i] = slot.id - 1;
        break;
      }
    }
  }
  expected_unique_ = sorted_.size();
  SortByKey(&sorted_, &sort_scratch_);  // (unique key, first-seen id), by key
  const size_t u = sorted_.size();
  unique_.resize(u);
  rank_.resize(u);
  for (size_t p = 0; p < u; ++p) {
    unique_[p] = sorted_[p].first;
    rank_[sorted_[p].second] = static_cast<uint32_t>(p);
  }
  for (size_t i = 0; i < n; ++i) inverse_[i] = rank_[inverse_[i]];
}

void KeyBatch::SortThenDedup(absl::Span<const uint64_t> keys) {
  const size_t n = keys.size();
  sorted_.resize(n);
  for (size_t i = 0; i < n; ++i) sorted_[i] = {keys[i], static_cast<uint32_t>(i)};
  SortByKey(&sorted_, &sort_scratch_);
  for (size_t i = 0; i < n; ++i) {
    if (unique_.empty() || unique_.back() != sorted_[i].first) unique_.push_back(sorted_[i].first);
    inverse_[sorted_[i].second] = static_cast<uint32_t>(unique_.size() - 1);
  }
}

void KeyBatch::Build(absl::Span<const uint64_t> keys, const Partition& partition) {
  const size_t n = keys.size();
  unique_.clear();
  inverse_.resize(n);

  // 1. Sort and dedup. Batches that are already strictly increasing (common for tools and dense blocks)
  //    skip the sort.
  bool sorted_unique = true;
  for (size_t i = 1; i < n && sorted_unique; ++i) sorted_unique = keys[i - 1] < keys[i];
  if (sorted_unique) {
    unique_.assign(keys.begin(), keys.end());
    for (size_t i = 0; i < n; ++i) inverse_[i] = static_cast<uint32_t>(i);
  } else if (hash_first_) {
    DedupThenSort(keys);
  } else {
    SortThenDedup(keys);
  }
  // Which way suits the next batch: hashing pays when most keys repeat (see DedupThenSort).
  hash_first_ = n == 0 || unique_.size() * 3 <= n;

  // 2. Group by owner. For single-range-per-server partitions, sorted keys are already grouped.
  const int servers = partition.num_servers();
  const size_t u = unique_.size();
  offsets_.assign(servers + 1, 0);
  owner_.resize(u);
  bool grouped = true;
  // unique_ is sorted: walk the (sorted) ranges alongside it instead of looking each key up.
  const std::vector<KeyRange>& ranges = partition.ranges();
  const std::vector<int>& owners = partition.owners();
  size_t r = 0;
  for (size_t i = 0; i < u; ++i) {
    while (unique_[i] > ranges[r].last) ++r;
    owner_[i] = owners[r];
    ++offsets_[owner_[i] + 1];
    if (i > 0 && owner_[i] < owner_[i - 1]) grouped = false;
  }
  for (int s = 0; s < servers; ++s) offsets_[s + 1] += offsets_[s];
  identity_ = sorted_unique && grouped;
  if (grouped) return;

  // Stable counting sort by owner keeps each group increasing; remap the inverse index to the new places.
  std::vector<size_t> next(offsets_.begin(), offsets_.end() - 1);
  new_pos_.resize(u);
  regrouped_.resize(u);
  for (size_t i = 0; i < u; ++i) {
    const size_t p = next[owner_[i]]++;
    new_pos_[i] = static_cast<uint32_t>(p);
    regrouped_[p] = unique_[i];
  }
  unique_.swap(regrouped_);
  for (auto& v : inverse_) v = new_pos_[v];
}

void KeyBatch::Scatter(const float* unique_rows, int dim, float* out) const {
  const size_t row_bytes = sizeof(float) * dim;
  for (size_t i = 0; i < inverse_.size(); ++i) {
    std::memcpy(out + i * dim, unique_rows + static_cast<size_t>(inverse_[i]) * dim, row_bytes);
  }
}

void KeyBatch::Reduce(const float* grads, int dim, float* unique_grads) const {
  std::fill(unique_grads, unique_grads + unique_.size() * dim, 0.0f);
  for (size_t i = 0; i < inverse_.size(); ++i) {
    float* dst = unique_grads + static_cast<size_t>(inverse_[i]) * dim;
    const float* src = grads + i * dim;
    for (int j = 0; j < dim; ++j) dst[j] += src[j];
  }
}

}  // namespace kestrel
