#include "export/export.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint_layout.h"
#include "common/crc32c.h"
#include "common/logging.h"
#include "common/partition.h"
#include "common/status.h"
#include "export/checkpoint_rows.h"
#include "export/export_format.h"
#include "export/export_rows.h"
#include "export/verified_export.h"
#include "google/protobuf/text_format.h"
#include "server/checkpoint_table_reader.h"
#include "server/initializer.h"
#include "server/shard_store.h"
#include "server/table.h"
#include "worker/data/schema.h"
#include "worker/model.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

[[nodiscard]] absl::Status WriteBytes(std::ofstream& out, const void* data, size_t bytes, const std::string& path) {
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// Closes a file written by the exporter and returns its size and CRC-32C.
absl::StatusOr<FileCrc> Finish(std::ofstream& out, const std::string& path) {
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return Crc32cOfFile(path);
}

// Writes one table's files, streamed from every shard of the checkpoint (merged in key order); returns its
// entry for MODEL. `base` (null: a full export): a sparse table's .rows gets only the rows new or changed since
// the base, and its .deleted the keys the base holds and the checkpoint does not (one merge of the checkpoint
// and the base's rows). Only the current row of each shard and of each base file is in memory (dense tensors:
// the whole tensor).
[[nodiscard]] absl::StatusOr<ExportedTable> WriteTable(const CheckpointLayout& layout, const CheckpointManifest& manifest,
                                         const TableConfig& config, const std::string& dir,
                                         const VerifiedExport* base) {
  ExportedTable entry;
  *entry.mutable_config() = config;
  entry.set_file(FileOf(config));
  const std::string path = dir + "/" + entry.file();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::UnavailableError(absl::StrCat("cannot create ", path));
  const int dim = config.dim();
  if (config.kind() == TableConfig::DENSE) {  // small: written whole, in deltas too
    std::vector<std::unique_ptr<CheckpointTableReader>> readers;
    for (int s = 0; s < manifest.shards_size(); ++s) {
      KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointTableReader> reader,
                               CheckpointTableReader::Open(layout, manifest, s, config.name()));
      readers.push_back(std::move(reader));
    }
    const uint64_t blocks = Partition::DenseBlockCount(config.dense_size(), dim);
    absl::flat_hash_map<uint64_t, uint64_t> block_of;  // block key -> block index
    std::vector<float> values(blocks * dim);
    KESTREL_ASSIGN_OR_RETURN(const Initializer init, Initializer::Create(config.initializer(), config.seed()));
    for (uint64_t b = 0; b < blocks; ++b) {
      const uint64_t key = Partition::DenseBlockKey(config.name(), b);
      block_of[key] = b;
      init.Fill(key, values.data() + b * dim, dim);  // a block never pushed reads as its initial value
    }
    for (auto& reader : readers) {
      while (reader->Valid()) {
        auto it = block_of.find(reader->key());
        if (it == block_of.end() || reader->row().size() < static_cast<size_t>(dim)) {
          return absl::DataLossError(absl::StrFormat("checkpoint row 0x%016x is not a block of dense table '%s'",
                                                     reader->key(), config.name()));
        }
        std::memcpy(values.data() + it->second * dim, reader->row().data(), sizeof(float) * dim);
        KESTREL_RETURN_IF_ERROR(reader->Next());
      }
    }
    KESTREL_RETURN_IF_ERROR(WriteBytes(out, values.data(), sizeof(float) * config.dense_size(), path));
    entry.set_rows(blocks);
    KESTREL_ASSIGN_OR_RETURN(const FileCrc crc, Finish(out, path));
    entry.set_size(crc.size);
    entry.set_crc32c(crc.crc);
    return entry;
  }

  CheckpointRows rows;
  KESTREL_RETURN_IF_ERROR(rows.Open(layout, manifest, config));
  const size_t value_bytes = ValueBytes(config);
  uint64_t written = 0;
  auto write_row = [&]() -> absl::Status {
    const uint64_t key = rows.key();
    KESTREL_RETURN_IF_ERROR(WriteBytes(out, &key, sizeof(key), path));
    KESTREL_RETURN_IF_ERROR(WriteBytes(out, rows.values(), value_bytes, path));  // values only
    ++written;
    return absl::OkStatus();
  };
  if (base == nullptr) {
    while (rows.Valid()) {
      KESTREL_RETURN_IF_ERROR(write_row());
      KESTREL_RETURN_IF_ERROR(rows.Next());
    }
  } else {
    entry.set_deleted_file(DeletedFileOf(config));
    const std::string deleted_path = dir + "/" + entry.deleted_file();
    std::ofstream deleted(deleted_path, std::ios::binary | std::ios::trunc);
    if (!deleted) return absl::UnavailableError(absl::StrCat("cannot create ", deleted_path));
    KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<ExportRowStream> held, ExportRowStream::Open(*base, config));
    uint64_t deleted_keys = 0;
    while (rows.Valid() || held->Valid()) {
      if (!held->Valid() || (rows.Valid() && rows.key() < held->key())) {  // new
        KESTREL_RETURN_IF_ERROR(write_row());
        KESTREL_RETURN_IF_ERROR(rows.Next());
      } else if (!rows.Valid() || held->key() < rows.key()) {  // gone
        const uint64_t key = held->key();
        KESTREL_RETURN_IF_ERROR(WriteBytes(deleted, &key, sizeof(key), deleted_path));
        ++deleted_keys;
        KESTREL_RETURN_IF_ERROR(held->Next());
      } else {  // in both: written only if its values changed, bit for bit
        if (std::memcmp(rows.values(), held->values(), value_bytes) != 0) KESTREL_RETURN_IF_ERROR(write_row());
        KESTREL_RETURN_IF_ERROR(rows.Next());
        KESTREL_RETURN_IF_ERROR(held->Next());
      }
    }
    KESTREL_ASSIGN_OR_RETURN(const FileCrc deleted_crc, Finish(deleted, deleted_path));
    entry.set_deleted_rows(deleted_keys);
    entry.set_deleted_size(deleted_crc.size);
    entry.set_deleted_crc32c(deleted_crc.crc);
  }
  entry.set_rows(written);
  KESTREL_ASSIGN_OR_RETURN(const FileCrc crc, Finish(out, path));
  entry.set_size(crc.size);
  entry.set_crc32c(crc.crc);
  return entry;
}

}  // namespace

absl::Status CheckExportTarget(const std::string& out_dir) {
  if (fs::exists(out_dir + "/" + kModelFile)) {
    return absl::AlreadyExistsError(absl::StrCat(out_dir, " already holds an export (", kModelFile, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExportedModel> ExportCheckpoint(const ExportOptions& options) {
  if (options.checkpoint_dir.empty() || options.out_dir.empty()) {
    return absl::InvalidArgumentError("export needs a checkpoint directory and an output directory");
  }
  const CheckpointLayout layout(options.checkpoint_dir);
  CheckpointManifest manifest;
  if (options.checkpoint.empty()) {
    KESTREL_ASSIGN_OR_RETURN(std::optional<CheckpointManifest> latest, layout.ReadLatest());
    if (!latest.has_value()) {
      return absl::NotFoundError(absl::StrCat("no committed checkpoint in ", options.checkpoint_dir));
    }
    manifest = *std::move(latest);
  } else {
    KESTREL_ASSIGN_OR_RETURN(manifest, layout.ReadManifest(options.checkpoint));
  }
  for (int s = 0; s < manifest.shards_size(); ++s) KESTREL_RETURN_IF_ERROR(layout.VerifyShard(manifest, s));
  for (const TableConfig& config : manifest.tables()) {  // names become file names: checked first
    if (absl::Status shape = Table::CheckShape(config); !shape.ok()) {
      return absl::DataLossError(absl::StrCat("the checkpoint's manifest lists a table that cannot be: ",
                                              shape.message()));
    }
  }
  const std::string checkpoint_name = CheckpointLayout::CheckpointName(manifest.sequence());
  const std::string model_path = options.out_dir + "/" + kModelFile;
  KESTREL_RETURN_IF_ERROR(CheckExportTarget(options.out_dir));
  // A delta's base is checked whole before anything is written.
  std::unique_ptr<VerifiedExport> base;
  if (!options.base_export.empty()) {
    KESTREL_ASSIGN_OR_RETURN(base, VerifyExport(options.base_export, /*depth=*/1));
    const std::vector<TableConfig> tables(manifest.tables().begin(), manifest.tables().end());
    if (const std::string difference = BaseDifference(base->model, manifest.job_id(), tables);
        !difference.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s cannot be the base of an export of %s: %s",
                                                        options.base_export, checkpoint_name, difference));
    }
  }

  std::error_code error;
  fs::create_directories(options.out_dir, error);
  if (error) return absl::UnavailableError(absl::StrCat("cannot create ", options.out_dir, ": ", error.message()));
  ExportedModel model;
  model.set_format_version(1);
  model.set_checkpoint(checkpoint_name);
  model.set_clock(manifest.clock());
  model.set_job_id(manifest.job_id());
  *model.mutable_job() = options.job;
  // The data format as resolved against the training files (libsvm's counted slots, STANDARDIZE statistics), so
  // scoring with the export needs no training file. When they are gone already, the config stays as given.
  if (absl::StatusOr<std::shared_ptr<const Schema>> schema =
          Schema::Resolve(options.job.data(), WithDefaults(options.job.model()));
      schema.ok()) {
    *model.mutable_job()->mutable_data() = (*schema)->Pinned(options.job.data());
  }
  if (base != nullptr) {
    model.set_base_dir(BaseDirFor(options.out_dir, options.base_export));
    model.set_base_checkpoint(base->model.checkpoint());
    model.set_base_model_crc32c(base->model_crc32c);
  }
  for (const TableConfig& config : manifest.tables()) {
    KESTREL_ASSIGN_OR_RETURN(ExportedTable entry, WriteTable(layout, manifest, config, options.out_dir, base.get()));
    *model.add_tables() = std::move(entry);
  }
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(model, &text)) return absl::InternalError("cannot print MODEL");
  KESTREL_RETURN_IF_ERROR(WriteFileAtomically(model_path, WithChecksumLine(text)));  // last: the export exists
  KLOG(Info) << "exported " << model.checkpoint() << " (clock " << model.clock() << ", " << model.tables_size()
             << " tables" << (base != nullptr ? absl::StrCat(", a delta against ", model.base_checkpoint()) : "")
             << ") to " << options.out_dir;
  return model;
}

absl::StatusOr<ExportedModel> ExportServers(const std::vector<Shard*>& servers, const JobConfig& job, int64_t clock,
                                            const std::string& out_dir) {
  if (servers.empty() || out_dir.empty()) {
    return absl::InvalidArgumentError("export needs the servers and an output directory");
  }
  KESTREL_RETURN_IF_ERROR(CheckExportTarget(out_dir));
  const std::string scratch = out_dir + "/.checkpoint";
  struct RemoveScratch {
    const std::string& dir;
    ~RemoveScratch() {
      std::error_code ignored;  // a leftover scratch directory wastes space; the export stands
      fs::remove_all(dir, ignored);
    }
  } remove_scratch{scratch};
  const CheckpointLayout layout(scratch);
  CheckpointManifest manifest;
  manifest.set_format_version(1);
  manifest.set_sequence(1);
  manifest.set_clock(clock);
  manifest.set_job_id(servers[0]->job_id());
  manifest.set_partition(servers[0]->partition().ToString());
  manifest.set_num_servers(static_cast<int>(servers.size()));
  const std::string name = CheckpointLayout::CheckpointName(manifest.sequence());
  std::vector<ShardCheckpoint> answers;
  for (size_t s = 0; s < servers.size(); ++s) {
    KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> store, ShardStore::Open(layout, static_cast<int>(s)));
    KESTREL_ASSIGN_OR_RETURN(ShardCheckpoint answer, store->Checkpoint(*servers[s], name));
    answers.push_back(std::move(answer));
  }
  KESTREL_RETURN_IF_ERROR(AddShardsToManifest(std::move(answers), manifest.num_servers(), &manifest));
  KESTREL_RETURN_IF_ERROR(layout.WriteManifest(manifest));
  KESTREL_RETURN_IF_ERROR(layout.MoveLatest(name));
  ExportOptions options;
  options.checkpoint_dir = scratch;
  options.checkpoint = name;
  options.job = job;
  options.out_dir = out_dir;
  return ExportCheckpoint(options);
}

}  // namespace kestrel
