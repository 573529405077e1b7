// LoadExport: an export (export/export_format.h), full or a delta with its base chain, loaded for scoring
// (kestrel_predict, the Python scoring entry point).
#ifndef KESTREL_EXPORT_LOAD_EXPORT_H_
#define KESTREL_EXPORT_LOAD_EXPORT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/checkpoint.pb.h"
#include "server/shard.h"

namespace kestrel {

// An export loaded into one in-process shard (Partition::Uniform(1), the export's job id), every table
// configured for serving (no optimizer state, no capacity policy). Files are checked against MODEL (size,
// CRC-32C) first: DataLoss naming a damaged one. A delta is loaded with its base chain (each base found at
// its MODEL's base_dir, relative to the delta's directory unless absolute, and checked the same way), its
// sparse rows streamed from the chain: it then answers exactly as a full export of its checkpoint would.
// FailedPrecondition when a base directory holds another export than the one the delta was made against, or
// the chain is longer than kMaxDeltaChain.
struct LoadedExport {
  ExportedModel model;
  uint32_t model_crc32c = 0;  // of its whole MODEL file (what a delta's base_model_crc32c pins)
  std::unique_ptr<Shard> shard;
};
[[nodiscard]] absl::StatusOr<LoadedExport> LoadExport(const std::string& dir);

}  // namespace kestrel

#endif  // KESTREL_EXPORT_LOAD_EXPORT_H_
