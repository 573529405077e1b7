// Export: a committed checkpoint (or in-process servers' tables) written as a serving artifact, full or as a delta
// against an earlier export. The artifact's format is export/export_format.h's; export/load_export.h loads it.
//
// Thread-compatible functions.
#ifndef KESTREL_EXPORT_EXPORT_H_
#define KESTREL_EXPORT_EXPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/checkpoint.pb.h"
#include "proto/job.pb.h"
#include "server/shard.h"

namespace kestrel {

struct ExportOptions {
  // Checkpoint root to read (required).
  std::string checkpoint_dir;
  // Checkpoint name, e.g. "ckpt-00000007". Default: "" = the latest committed one.
  std::string checkpoint;
  // The job config the checkpoint was trained with (model and data format; required).
  JobConfig job;
  // Where to write the export; created, and must not hold a MODEL yet (required).
  std::string out_dir;
  // An earlier export of the same job (a directory holding MODEL: full or a delta) to export a delta against:
  // the export then holds only what changed since it (see the file comment). It is verified first (MODEL's
  // checksum, every file of it and of its base chain): a damaged one is DataLoss, one of another job or with
  // other tables or table configs is InvalidArgument naming the difference, and nothing is written then.
  // MODEL records its path relative to out_dir (absolute when they share no root), so exports moved together
  // keep finding their bases.
  // Default: "" = a full export.
  std::string base_export;
};

// Whether `out_dir` may receive an export: AlreadyExists when it holds one (a MODEL) already. Check it before
// work whose result is to be exported (ExportCheckpoint and ExportServers check it again).
[[nodiscard]] absl::Status CheckExportTarget(const std::string& out_dir);

// Exports the tables of in-process servers (inprocess/local_trainer.h: kestrel_worker --local) as a full export of
// their state at `clock`, trained with `job`: the servers checkpoint their tables into a scratch checkpoint root,
// <out_dir>/.checkpoint (removed again, also on failure), which is exported as ExportCheckpoint does. `servers`:
// every server of one partition, the one of rank s at index s. Errors as ExportCheckpoint's.
[[nodiscard]] absl::StatusOr<ExportedModel> ExportServers(const std::vector<Shard*>& servers, const JobConfig& job, int64_t clock,
                                            const std::string& out_dir);

// Verifies every server's part of the checkpoint (and the base export, for a delta), then streams each table
// into the export (the servers' rows merged in key order, and for a delta merged with the base's rows in the
// same pass; memory holds one row per server and per base file, or one dense tensor), whatever the size of the
// tables. MODEL is written last: an export without one does not exist. Returns its MODEL.
[[nodiscard]] absl::StatusOr<ExportedModel> ExportCheckpoint(const ExportOptions& options);


}  // namespace kestrel

#endif  // KESTREL_EXPORT_EXPORT_H_
