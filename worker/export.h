// Export: a committed checkpoint made into a serving artifact, and that artifact loaded for scoring.
//
// An export directory holds:
//   MODEL            text-format ExportedModel (proto/checkpoint.proto) + checksum line: the job config the
//                    model was trained with, the checkpoint and clock, and every table's config and file
//   <table>.rows     sparse tables: one record per stored row, sorted by key: the key (8 bytes) then dim
//                    float32 values, little-endian
//   <table>.dense    dense tables: dense_size float32 values, little-endian
// Only values are exported (optimizer state is training state). A key absent from a .rows file has its
// table's initial value, computed from the exported config's initializer and seed: exactly what the training
// servers answer for a key never pushed, so scoring an export reproduces the trainer's own evaluation.
//
// Thread-compatible functions.
#ifndef KESTREL_WORKER_EXPORT_H_
#define KESTREL_WORKER_EXPORT_H_

#include <memory>
#include <string>

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
};

// Verifies every server's part of the checkpoint, then streams each table into the export (the servers'
// rows merged in key order; memory holds one row per server, or one dense tensor), whatever the size of the
// tables. Returns its MODEL.
absl::StatusOr<ExportedModel> ExportCheckpoint(const ExportOptions& options);

// An export loaded into one in-process shard (Partition::Uniform(1), job id "serve"), every table configured
// for serving (no optimizer state). Files are checked against MODEL (size, CRC-32C) first.
struct LoadedExport {
  ExportedModel model;
  std::unique_ptr<Shard> shard;
};
absl::StatusOr<LoadedExport> LoadExport(const std::string& dir);

}  // namespace kestrel

#endif  // KESTREL_WORKER_EXPORT_H_
