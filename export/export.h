// Export: a committed checkpoint made into a serving artifact, and that artifact loaded for scoring.
//
// An export directory holds:
//   MODEL            text-format ExportedModel (proto/checkpoint.proto) + checksum line: the job config the
//                    model was trained with, the checkpoint and clock, and every table's config and file
//   <table>.rows     sparse tables: one record per stored row, sorted by key (strictly increasing): the key
//                    (8 bytes) then dim float32 values, little-endian
//   <table>.dense    dense tables: dense_size float32 values, little-endian
// Only values are exported (optimizer state is training state), and only live rows (a bounded table's rows
// expired at the checkpoint's clock are not). A key absent from a .rows file has its table's initial value,
// computed from the exported config's initializer and seed: exactly what the training servers answer for a key
// never pushed, so scoring an export reproduces the trainer's own evaluation.
//
// Delta exports (ExportOptions::base_export). A delta holds what changed between its base, an earlier export
// of the same job (full, or itself a delta), and its checkpoint:
//   <table>.rows     sparse tables: only the rows that are new or whose values differ (bitwise) from the
//                    base's, in the same format
//   <table>.deleted  sparse tables: the keys the base holds and the checkpoint no longer does (expired, evicted
//                    or dropped), sorted (strictly increasing), 8 bytes little-endian each
//   <table>.dense    dense tables: whole, as in a full export
// MODEL names the base (base_dir, base_checkpoint) and pins it: base_model_crc32c is the CRC-32C of the base's
// whole MODEL file. Applying a delta to the state S of its base (the rows that export holds, chain resolved):
// first check that S came from the MODEL with that CRC-32C, then remove every key of <table>.deleted from S and
// store every row of <table>.rows (replacing S's), and replace every dense table. The result is exactly the
// state a full export of the delta's checkpoint holds, so a serving copy that applies each delta to the state
// the previous one left never keeps a row training dropped. Chains are resolved by following base_dir, at most
// kMaxDeltaChain deltas deep: start a new chain with a full export before that.
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
absl::Status CheckExportTarget(const std::string& out_dir);

// Exports the tables of in-process servers (inprocess/local_trainer.h: kestrel_worker --local) as a full export of
// their state at `clock`, trained with `job`: the servers checkpoint their tables into a scratch checkpoint root,
// <out_dir>/.checkpoint (removed again, also on failure), which is exported as ExportCheckpoint does. `servers`:
// every server of one partition, the one of rank s at index s. Errors as ExportCheckpoint's.
absl::StatusOr<ExportedModel> ExportServers(const std::vector<Shard*>& servers, const JobConfig& job, int64_t clock,
                                            const std::string& out_dir);

// The most delta exports a chain may stack on its full export (LoadExport and deltas of deltas resolve it).
inline constexpr int kMaxDeltaChain = 64;

// Verifies every server's part of the checkpoint (and the base export, for a delta), then streams each table
// into the export (the servers' rows merged in key order, and for a delta merged with the base's rows in the
// same pass; memory holds one row per server and per base file, or one dense tensor), whatever the size of the
// tables. MODEL is written last: an export without one does not exist. Returns its MODEL.
absl::StatusOr<ExportedModel> ExportCheckpoint(const ExportOptions& options);

// An export loaded into one in-process shard (Partition::Uniform(1), the export's job id), every table
// configured for serving (no optimizer state, no capacity policy). Files are checked against MODEL (size,
// CRC-32C) first: DataLoss naming a damaged one. A delta is loaded with its base chain (each base found at
// its MODEL's base_dir, relative to the delta's directory unless absolute, and checked the same way), its
// sparse rows streamed from the chain: it then answers exactly as a full export of its checkpoint would.
// FailedPrecondition when a base directory holds another export than the one the delta was made against, or
// the chain is longer than kMaxDeltaChain.
struct LoadedExport {
  ExportedModel model;
  std::unique_ptr<Shard> shard;
};
absl::StatusOr<LoadedExport> LoadExport(const std::string& dir);

}  // namespace kestrel

#endif  // KESTREL_EXPORT_EXPORT_H_
