#include "server/request_checks.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/gradients.h"
#include "common/status.h"

namespace kestrel {
namespace {

std::string RangesToString(const std::vector<KeyRange>& ranges) {
  constexpr size_t kMaxListed = 4;
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranges.size() && i < kMaxListed; ++i) parts.push_back(ranges[i].ToString());
  std::string out = absl::StrJoin(parts, " ");
  if (ranges.size() > kMaxListed) absl::StrAppend(&out, " and ", ranges.size() - kMaxListed, " more");
  return out;
}

}  // namespace

absl::Status RequestChecks::CheckKeys(absl::Span<const uint64_t> keys, bool sorted, const char* what) const {
  if (keys.size() > max_keys_) {
    return absl::InvalidArgumentError(absl::StrFormat("%d %s in one request exceed the limit of %d: split it",
                                                      keys.size(), what, max_keys_));
  }
  // Sorted keys walk the partition's (sorted) ranges alongside; others look each key up.
  const std::vector<KeyRange>& ranges = partition_.ranges();
  const std::vector<int>& owners = partition_.owners();
  size_t r = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    int key_owner;
    if (sorted) {
      if (i > 0 && keys[i] <= keys[i - 1]) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s must be strictly increasing (sorted, no duplicates): %s[%d] = 0x%x follows %s[%d] = 0x%x", what,
            what, i, keys[i], what, i - 1, keys[i - 1]));
      }
      while (keys[i] > ranges[r].last) ++r;
      key_owner = owners[r];
    } else {
      key_owner = partition_.OwnerOf(keys[i]);
    }
    if (key_owner != owner_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "key 0x%016x (%s[%d]) is outside shard %d's key ranges %s; it belongs to shard %d", keys[i], what, i,
          owner_, RangesToString(ranges_), key_owner));
    }
  }
  return absl::OkStatus();
}

absl::Status RequestChecks::CheckGrads(const Table& table, absl::Span<const uint64_t> keys,
                                       absl::Span<const float> grads) const {
  const size_t dim = table.dim();
  if (grads.size() != keys.size() * dim) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table '%s' has dim %d: %d keys need %d gradient values, got %d", table.config().name(),
                        dim, keys.size(), keys.size() * dim, grads.size()));
  }
  const int64_t bad = FirstBadGradient(grads);
  if (bad < 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "bad gradient %g for key 0x%016x element %d of table '%s': gradients must be finite with |g| <= %g",
      grads[bad], keys[bad / dim], bad % dim, table.config().name(), kMaxGradientMagnitude));
}

absl::Status RequestChecks::BlockKeys(const Table& table, absl::Span<const uint64_t> blocks,
                                      std::vector<uint64_t>* keys) const {
  const uint64_t num_blocks = table.num_blocks();
  keys->resize(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i > 0 && blocks[i] <= blocks[i - 1]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "dense blocks must be strictly increasing: block %d follows block %d", blocks[i], blocks[i - 1]));
    }
    if (blocks[i] >= num_blocks) {
      return absl::InvalidArgumentError(absl::StrFormat("dense table '%s' has %d blocks; block %d does not exist",
                                                        table.config().name(), num_blocks, blocks[i]));
    }
    (*keys)[i] = Partition::DenseBlockKey(table.config().name(), blocks[i]);
  }
  return CheckKeys(*keys, /*sorted=*/false, "dense block keys");
}

absl::StatusOr<absl::Span<const uint64_t>> RequestChecks::CheckedKeys(const Table& table,
                                                                      absl::Span<const uint64_t> ids) const {
  if (table.config().kind() == TableConfig::SPARSE) {
    KESTREL_RETURN_IF_ERROR(CheckKeys(ids, /*sorted=*/true, "keys"));
    return ids;
  }
  thread_local std::vector<uint64_t> block_keys;
  KESTREL_RETURN_IF_ERROR(BlockKeys(table, ids, &block_keys));
  return absl::MakeConstSpan(block_keys);
}

}  // namespace kestrel
