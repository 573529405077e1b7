// The export artifact's format: what an export directory holds, its file names and the checks of a table's
// entry in MODEL. export/export.h writes exports, export/verified_export.h checks them, export/load_export.h
// loads them.
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
#ifndef KESTREL_EXPORT_EXPORT_FORMAT_H_
#define KESTREL_EXPORT_EXPORT_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/checkpoint.pb.h"
#include "proto/table.pb.h"

namespace kestrel {

// The file naming an export: written last, so an export without one does not exist.
inline constexpr char kModelFile[] = "MODEL";
// A PyTorch model's part of an export (python/kestrel/training.py export): its builder's import path, the
// schema it was built for, and beside it its parameters. kestrel_predict scores built-in models only and refuses
// an export holding one; kestrel.torch.load scores it.
inline constexpr char kPythonModuleFile[] = "module.json";
// OK unless the export in `dir` holds a PyTorch model (kPythonModuleFile), which only kestrel.torch.load scores:
// then InvalidArgument saying so, for the built-in models' scorers (`tool`: kestrel_predict, kestrel_serve).
[[nodiscard]] absl::Status CheckBuiltInModel(const std::string& dir, absl::string_view tool);

// MODEL holds configs only: anything larger is not one (and is not read into memory).
inline constexpr uint64_t kMaxModelBytes = uint64_t{16} << 20;
// Longest base_dir a MODEL may name.
inline constexpr size_t kMaxBaseDirBytes = 4096;
// The most delta exports a chain may stack on its full export (LoadExport and deltas of deltas resolve it).
inline constexpr int kMaxDeltaChain = 64;

// The file holding a table's rows (sparse: <name>.rows) or tensor (dense: <name>.dense), and a delta's deleted
// keys of a sparse table (<name>.deleted).
std::string FileOf(const TableConfig& config);
std::string DeletedFileOf(const TableConfig& config);

// Bytes of a sparse row's values in a .rows file: the stored form (RowValues: fp32, or bf16/fp16 two to a word).
size_t ValueBytes(const TableConfig& config);

// A table of an export (from MODEL) and its files' sizes, checked before a file is opened or anything is
// allocated for it: a valid shape (Table::CheckShape: the name can only make a file name in the export's
// directory, dim and sizes bounded), the files named as the exporter names them, and sizes the shape explains.
// `delta`: the export is a delta, so a sparse table has a deleted-keys file (and no other table has one).
[[nodiscard]] absl::Status CheckExportedTable(const ExportedTable& t, bool delta);

}  // namespace kestrel

#endif  // KESTREL_EXPORT_EXPORT_FORMAT_H_
