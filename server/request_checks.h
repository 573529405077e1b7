// RequestChecks: the checks of a request's keys, dense blocks and gradients against one shard's key ranges and
// limits, made before anything is applied (server/shard.h validates every request whole).
//
// Keys: at most max_keys_per_request, every one owned by the shard's server under the partition, and for sparse
// tables strictly increasing (sorted, no duplicates). Dense blocks: strictly increasing block indices below the
// table's block count, mapped to their block keys (Partition::DenseBlockKey), which the server must own.
// Gradients: one row of the table's dim per key, all finite with |g| <= kMaxGradientMagnitude
// (common/gradients.h). Every refusal is InvalidArgument naming the offending element.
#ifndef KESTREL_SERVER_REQUEST_CHECKS_H_
#define KESTREL_SERVER_REQUEST_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/partition.h"
#include "server/table.h"

namespace kestrel {

// Owned by its Shard; does not own `partition` or `ranges`, which must outlive it. Immutable, so thread-safe;
// CheckedKeys answers dense block keys in a buffer of the calling thread's.
class RequestChecks {
 public:
  // Checks keys against the ranges `partition` gives server `owner` (`ranges`: those ranges, for errors), and
  // counts against `max_keys_per_request`.
  RequestChecks(const Partition& partition, int owner, const std::vector<KeyRange>& ranges,
                size_t max_keys_per_request)
      : partition_(partition), owner_(owner), ranges_(ranges), max_keys_(max_keys_per_request) {}

  RequestChecks(const RequestChecks&) = delete;
  RequestChecks& operator=(const RequestChecks&) = delete;

  // Checks count, order (when `sorted` is required) and ownership of `keys`; `what` names them in errors.
  [[nodiscard]] absl::Status CheckKeys(absl::Span<const uint64_t> keys, bool sorted, const char* what) const;
  // `grads` holds one finite, not too large gradient row of `table`'s dim per key of `keys`.
  [[nodiscard]] absl::Status CheckGrads(const Table& table, absl::Span<const uint64_t> keys, absl::Span<const float> grads) const;
  // Maps block indices of dense `table` to block keys in `keys` after checking them.
  [[nodiscard]] absl::Status BlockKeys(const Table& table, absl::Span<const uint64_t> blocks, std::vector<uint64_t>* keys) const;
  // The table's keys for `ids` after checking them: sparse keys as they are, dense block indices mapped to
  // block keys (valid until the calling thread's next call).
  [[nodiscard]] absl::StatusOr<absl::Span<const uint64_t>> CheckedKeys(const Table& table, absl::Span<const uint64_t> ids) const;

 private:
  const Partition& partition_;
  const int owner_;
  const std::vector<KeyRange>& ranges_;  // owner_'s
  const size_t max_keys_;
};

}  // namespace kestrel

#endif  // KESTREL_SERVER_REQUEST_CHECKS_H_
