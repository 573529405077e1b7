// Partitioning: the one place in Kestrel that maps keys to servers.
//
// The 64-bit key space is cut into contiguous, non-overlapping ranges that tile it completely; each range
// belongs to one server, and a server may own several ranges. Feature ids are hashed into the key space with a
// bijection (FeatureKey), so ranges of equal width receive equal shares of the features and distinct features
// never collide. Dense tensors are split into blocks whose keys come from DenseBlockKey, so they are placed by
// exactly the same mechanism.
//
// Partition is an immutable value type: thread-safe for concurrent reads, cheap to copy.
#ifndef KESTREL_COMMON_PARTITION_H_
#define KESTREL_COMMON_PARTITION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/hash.h"

namespace kestrel {

// A closed key interval [first, last]. Closed so that the range ending at 2^64-1 needs no special case.
struct KeyRange {
  uint64_t first = 0;
  uint64_t last = 0;

  bool Contains(uint64_t key) const { return key >= first && key <= last; }
  // "[0x0000000000000000, 0x7fffffffffffffff]"
  std::string ToString() const;
  friend bool operator==(const KeyRange& a, const KeyRange& b) { return a.first == b.first && a.last == b.last; }
};

class Partition {
 public:
  // The key space cut into num_servers * ranges_per_server ranges of equal width (to within one key);
  // range r belongs to server r % num_servers, so with ranges_per_server > 1 each server holds
  // interleaved slices (useful for later resharding). num_servers in [1, 65536], ranges_per_server in
  // [1, 1024].
  static absl::StatusOr<Partition> Uniform(int num_servers, int ranges_per_server = 1);

  // Explicit ranges, e.g. "0x0-0x7fffffffffffffff:0,0x8000000000000000-0xffffffffffffffff:1": comma-separated
  // `first-last:server` items (hex or decimal). They must be sorted, tile the key space without gaps or
  // overlaps, and name every server in [0, max server] at least once.
  static absl::StatusOr<Partition> Parse(absl::string_view spec);

  // The form Parse accepts.
  std::string ToString() const;

  int num_servers() const { return num_servers_; }
  int num_ranges() const { return static_cast<int>(ranges_.size()); }
  const std::vector<KeyRange>& ranges() const { return ranges_; }
  const std::vector<int>& owners() const { return owners_; }

  // The server that owns `key`. O(1) for Uniform partitions, O(log ranges) otherwise.
  int OwnerOf(uint64_t key) const {
    if (uniform_) {
      const uint64_t r = static_cast<uint64_t>((static_cast<unsigned __int128>(key) * ranges_.size()) >> 64);
      return static_cast<int>(r % num_servers_);
    }
    return OwnerOfSlow(key);
  }

  // The ranges server `server` owns, in key order.
  std::vector<KeyRange> RangesOf(int server) const;

  // Stable fingerprint of the layout (servers, ranges, owners): equal partitions have equal fingerprints.
  uint64_t Fingerprint() const;

  // Maps an application feature id into the key space (a bijection: distinct ids never collide).
  static uint64_t FeatureKey(uint64_t feature_id) { return Mix64(feature_id); }
  // Maps (field, value) into the key space, e.g. Criteo's categorical field 3 with hashed value v. A bijection
  // of the value within each field; fields are separated by a hashed 64-bit field seed, so small values of
  // different fields (bucket 3 of field 4, bucket 5 of field 6) never meet (a plain `field ^ value` seed would
  // make them collide).
  static uint64_t FieldFeatureKey(uint32_t field, uint64_t value) {
    return Mix64(HashCombine(Mix64(0x6b657374ULL + field), value));
  }
  // Blocks of a dense tensor of `dense_size` floats cut into blocks of `dim` floats (the last one padded).
  static uint64_t DenseBlockCount(uint64_t dense_size, int dim) {
    const uint64_t d = static_cast<uint64_t>(dim);
    return dense_size / d + (dense_size % d != 0 ? 1 : 0);
  }
  // The key of block `block` of dense table `table`.
  static uint64_t DenseBlockKey(absl::string_view table, uint64_t block) {
    return Mix64(HashCombine(Hash64(table), block));
  }

 private:
  Partition(int num_servers, std::vector<KeyRange> ranges, std::vector<int> owners, bool uniform);
  int OwnerOfSlow(uint64_t key) const;

  int num_servers_ = 0;
  std::vector<KeyRange> ranges_;  // sorted, tiling [0, 2^64-1]
  std::vector<int> owners_;       // owners_[i] owns ranges_[i]
  bool uniform_ = false;          // ranges_ are the Uniform() cut, owners round-robin
};

}  // namespace kestrel

#endif  // KESTREL_COMMON_PARTITION_H_
