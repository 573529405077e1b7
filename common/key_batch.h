// KeyBatch: dedups and sorts a batch of keys and splits it by owning server.
//
// Workers hand it the raw keys of a mini-batch (any order, with duplicates). It produces the unique keys
// grouped by server (strictly increasing within each group, as the wire protocol requires), and the inverse
// index that maps every input position to its unique key, so pulled rows can be scattered back and the
// gradients of duplicate keys summed before a push.
//
// Thread-compatible: one KeyBatch per thread. Build() reuses the buffers of earlier batches.
#ifndef KESTREL_COMMON_KEY_BATCH_H_
#define KESTREL_COMMON_KEY_BATCH_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "common/partition.h"

namespace kestrel {

class KeyBatch {
 public:
  // Replaces the batch with `keys` split by `partition`. Supports up to 2^32 - 1 keys.
  void Build(absl::Span<const uint64_t> keys, const Partition& partition);

  size_t num_keys() const { return inverse_.size(); }
  size_t num_unique() const { return unique_.size(); }
  int num_servers() const { return static_cast<int>(offsets_.size()) - 1; }

  // All unique keys, grouped by server in server order; each group is strictly increasing.
  absl::Span<const uint64_t> unique_keys() const { return unique_; }
  // The unique keys owned by `server`, and where they start in unique_keys().
  absl::Span<const uint64_t> keys_of(int server) const {
    return absl::MakeConstSpan(unique_).subspan(offsets_[server], offsets_[server + 1] - offsets_[server]);
  }
  size_t offset_of(int server) const { return offsets_[server]; }
  // True when unique_keys() equals the input (it was strictly increasing and already grouped by server), so
  // rows can be exchanged with the caller's buffers without Scatter/Reduce.
  bool identity() const { return identity_; }
  // inverse()[i] is the position in unique_keys() of input key i.
  absl::Span<const uint32_t> inverse() const { return inverse_; }

  // out row i = unique_rows row inverse()[i]. unique_rows has num_unique() rows, out num_keys() rows.
  void Scatter(const float* unique_rows, int dim, float* out) const;
  // unique_grads row u = sum of the rows of `grads` whose key is unique key u, added in input order (so the
  // result is deterministic). grads has num_keys() rows, unique_grads num_unique() rows.
  void Reduce(const float* grads, int dim, float* unique_grads) const;

  // Sorts (key, position) pairs by key, equal keys by position (a stable radix sort for large batches,
  // std::sort of the pairs for small ones); `tmp` is scratch.
  static void SortByKey(std::vector<std::pair<uint64_t, uint32_t>>* a,
                        std::vector<std::pair<uint64_t, uint32_t>>* tmp);

 private:
  // Fill unique_ and inverse_ (sized n) from unsorted keys: a hash dedup, then a radix sort of the unique
  // keys; or a radix sort of every (key, position), then a dedup. Same result; the first is ~3x faster when
  // ~15% of the keys are unique (kestrel_datagen at batch 4096), ~1.2x slower when half are
  // (bench/results/key_batch_bench.md), so Build picks by the previous batch's unique fraction.
  void DedupThenSort(absl::Span<const uint64_t> keys);
  void SortThenDedup(absl::Span<const uint64_t> keys);

  std::vector<uint64_t> unique_;
  std::vector<uint32_t> inverse_;
  std::vector<size_t> offsets_;  // num_servers + 1 entries
  bool identity_ = false;
  bool hash_first_ = true;  // the previous batch had at most a third of its keys unique
  // Scratch reused across Build() calls.
  std::vector<std::pair<uint64_t, uint32_t>> sorted_;  // (unique key, first-seen id)
  struct DedupSlot {
    uint64_t key;
    uint32_t id;  // first-seen id + 1 (0: empty)
  };
  std::vector<DedupSlot> slots_;                       // the dedup table, at most half full
  size_t expected_unique_ = 0;                         // unique keys of the last hash-deduped batch (0: none yet)
  std::vector<uint32_t> rank_;                         // first-seen id -> place in unique_
  std::vector<std::pair<uint64_t, uint32_t>> sort_scratch_;
  std::vector<int> owner_;
  std::vector<uint32_t> new_pos_;
  std::vector<uint64_t> regrouped_;
};

}  // namespace kestrel

#endif  // KESTREL_COMMON_KEY_BATCH_H_
