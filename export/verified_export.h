// VerifiedExport: an export directory read and checked whole — MODEL's checksum, every table's shape and files,
// and for a delta its chain of bases — before anything reads its rows or writes a delta against it.
#ifndef KESTREL_EXPORT_VERIFIED_EXPORT_H_
#define KESTREL_EXPORT_VERIFIED_EXPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/checkpoint.pb.h"
#include "proto/table.pb.h"

namespace kestrel {

// An export whose MODEL and files have been checked (VerifyExport), with its base chain when it is a delta.
struct VerifiedExport {
  std::string dir;
  ExportedModel model;
  uint32_t model_crc32c = 0;             // of the whole MODEL file
  std::unique_ptr<VerifiedExport> base;  // deltas: the verified base
};

// Reads and checks the export in `dir`: MODEL's checksum line, every table's shape and files (sizes and
// CRC-32C), and for a delta its base, recursively: the base must be the very export the delta was made
// against (its MODEL's CRC-32C; FailedPrecondition otherwise) and agree with it (job, tables, checkpoint).
// `depth`: the deltas above this export in the chain being resolved (at most kMaxDeltaChain in all).
[[nodiscard]] absl::StatusOr<std::unique_ptr<VerifiedExport>> VerifyExport(const std::string& dir, int depth);

// What base_dir an export in `out_dir` records for the base `base_export` (both as given, relative to the
// working directory): the base relative to out_dir (so a tree of exports can move as a whole), or absolute
// when they share no root. Symbolic links are resolved first, so the relative path names the same directory.
std::string BaseDirFor(const std::string& out_dir, const std::string& base_export);

// How `base` differs from what a delta of job `job_id` with `tables` needs of its base (the same job, the same
// tables with the same configs), in words; "" when it does not.
std::string BaseDifference(const ExportedModel& base, const std::string& job_id,
                           const std::vector<TableConfig>& tables);

}  // namespace kestrel

#endif  // KESTREL_EXPORT_VERIFIED_EXPORT_H_
