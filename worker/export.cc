#include "worker/export.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <queue>
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
#include "google/protobuf/text_format.h"
#include "server/initializer.h"
#include "server/table.h"
#include "server/shard_store.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

constexpr char kModelFile[] = "MODEL";

std::string FileOf(const TableConfig& config) {
  return config.name() + (config.kind() == TableConfig::DENSE ? ".dense" : ".rows");
}

// A table of an export (from MODEL) and its file's size, checked before the file is opened or anything is
// allocated for it: a valid shape (Table::CheckShape: the name can only make a file name in the export's
// directory, dim and sizes bounded), the file named as the exporter names it, and a size its shape explains.
absl::Status CheckExportedTable(const ExportedTable& t) {
  const TableConfig& config = t.config();
  if (absl::Status shape = Table::CheckShape(config); !shape.ok()) {
    return absl::DataLossError(absl::StrCat("MODEL lists a table that cannot be: ", shape.message()));
  }
  if (t.file() != FileOf(config)) {
    return absl::DataLossError(absl::StrFormat("MODEL names table '%s''s file '%s', expected '%s'", config.name(),
                                               t.file().substr(0, 80), FileOf(config)));
  }
  const uint64_t dim = static_cast<uint64_t>(config.dim());
  const bool fits = config.kind() == TableConfig::DENSE
                        ? t.size() == config.dense_size() * sizeof(float)
                        : t.size() % (sizeof(uint64_t) + dim * sizeof(float)) == 0;
  if (!fits) {
    return absl::DataLossError(absl::StrFormat("MODEL says table '%s' takes %d bytes, which its shape cannot explain",
                                               config.name(), t.size()));
  }
  return absl::OkStatus();
}

absl::Status WriteBytes(std::ofstream& out, const void* data, size_t bytes, const std::string& path) {
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// Writes one table's file, streamed from every shard of the checkpoint (merged in key order); returns its
// entry for MODEL. Only the current row of each shard is in memory (dense tensors: the whole tensor).
absl::StatusOr<ExportedTable> WriteTable(const CheckpointLayout& layout, const CheckpointManifest& manifest,
                                         const TableConfig& config, const std::string& dir) {
  ExportedTable entry;
  *entry.mutable_config() = config;
  entry.set_file(FileOf(config));
  const std::string path = dir + "/" + entry.file();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::UnavailableError(absl::StrCat("cannot create ", path));
  const int dim = config.dim();
  std::vector<std::unique_ptr<CheckpointTableReader>> readers;
  for (int s = 0; s < manifest.shards_size(); ++s) {
    KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointTableReader> reader,
                             CheckpointTableReader::Open(layout, manifest, s, config.name()));
    readers.push_back(std::move(reader));
  }
  if (config.kind() == TableConfig::DENSE) {
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
  } else {
    // Each shard's rows come in key order; a heap merges them (shards may own interleaved ranges).
    using Head = std::pair<uint64_t, size_t>;  // (key, reader)
    std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads;
    for (size_t r = 0; r < readers.size(); ++r) {
      if (readers[r]->Valid()) heads.emplace(readers[r]->key(), r);
    }
    uint64_t rows = 0;
    while (!heads.empty()) {
      const size_t r = heads.top().second;
      heads.pop();
      CheckpointTableReader& reader = *readers[r];
      if (reader.row().size() < static_cast<size_t>(dim)) {
        return absl::DataLossError(absl::StrFormat("table '%s': a checkpoint row has %d floats, dim is %d",
                                                   config.name(), reader.row().size(), dim));
      }
      const uint64_t key = reader.key();
      if (Table::Expired(config, reader.row(), manifest.clock())) {  // gone for training: not served either
        KESTREL_RETURN_IF_ERROR(reader.Next());
        if (reader.Valid()) heads.emplace(reader.key(), r);
        continue;
      }
      KESTREL_RETURN_IF_ERROR(WriteBytes(out, &key, sizeof(key), path));
      KESTREL_RETURN_IF_ERROR(WriteBytes(out, reader.row().data(), sizeof(float) * dim, path));  // values only
      ++rows;
      KESTREL_RETURN_IF_ERROR(reader.Next());
      if (reader.Valid()) heads.emplace(reader.key(), r);
    }
    entry.set_rows(rows);
  }
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  KESTREL_ASSIGN_OR_RETURN(const FileCrc crc, Crc32cOfFile(path));
  entry.set_size(crc.size);
  entry.set_crc32c(crc.crc);
  return entry;
}

}  // namespace

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

  std::error_code error;
  fs::create_directories(options.out_dir, error);
  if (error) return absl::UnavailableError(absl::StrCat("cannot create ", options.out_dir, ": ", error.message()));
  const std::string model_path = options.out_dir + "/" + kModelFile;
  if (fs::exists(model_path)) {
    return absl::AlreadyExistsError(absl::StrCat(options.out_dir, " already holds an export (", kModelFile, ")"));
  }
  ExportedModel model;
  model.set_format_version(1);
  model.set_checkpoint(CheckpointLayout::CheckpointName(manifest.sequence()));
  model.set_clock(manifest.clock());
  model.set_job_id(manifest.job_id());
  *model.mutable_job() = options.job;
  for (const TableConfig& config : manifest.tables()) {  // names become file names: checked first
    if (absl::Status shape = Table::CheckShape(config); !shape.ok()) {
      return absl::DataLossError(absl::StrCat("the checkpoint's manifest lists a table that cannot be: ",
                                              shape.message()));
    }
  }
  for (const TableConfig& config : manifest.tables()) {
    KESTREL_ASSIGN_OR_RETURN(ExportedTable entry, WriteTable(layout, manifest, config, options.out_dir));
    *model.add_tables() = std::move(entry);
  }
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(model, &text)) return absl::InternalError("cannot print MODEL");
  KESTREL_RETURN_IF_ERROR(WriteFileAtomically(model_path, WithChecksumLine(text)));  // last: the export exists
  KLOG(Info) << "exported " << model.checkpoint() << " (clock " << model.clock() << ", " << model.tables_size()
             << " tables) to " << options.out_dir;
  return model;
}

absl::StatusOr<LoadedExport> LoadExport(const std::string& dir) {
  const std::string model_path = dir + "/" + kModelFile;
  KESTREL_ASSIGN_OR_RETURN(const std::string contents, ReadWholeFile(model_path));
  KESTREL_ASSIGN_OR_RETURN(const std::string body, VerifyChecksumLine(model_path, contents));
  LoadedExport loaded;
  if (!google::protobuf::TextFormat::ParseFromString(body, &loaded.model) ||
      loaded.model.format_version() != 1) {
    return absl::DataLossError(absl::StrCat(model_path, ": not a version-1 Kestrel export"));
  }
  std::vector<TableConfig> serving;
  for (const ExportedTable& t : loaded.model.tables()) {
    KESTREL_RETURN_IF_ERROR(CheckExportedTable(t));
    const std::string path = dir + "/" + t.file();
    KESTREL_ASSIGN_OR_RETURN(const FileCrc crc, Crc32cOfFile(path));
    if (crc.size != t.size() || crc.crc != t.crc32c()) {
      return absl::DataLossError(absl::StrFormat("%s: %d bytes with crc32c %08x, MODEL says %d bytes, %08x", path,
                                                 crc.size, crc.crc, t.size(), t.crc32c()));
    }
    TableConfig config = t.config();
    config.clear_optimizer();  // serving: plain rows, no optimizer state
    config.clear_capacity();   // nor bounds: every exported row is live
    serving.push_back(config);
  }
  ShardOptions shard_options;
  shard_options.job_id = loaded.model.job_id();
  KESTREL_ASSIGN_OR_RETURN(loaded.shard, Shard::Create(shard_options, *Partition::Uniform(1)));
  KESTREL_RETURN_IF_ERROR(loaded.shard->Restore(serving, 0, [&](Shard::RowSink sink, Shard::SketchSink) -> absl::Status {
    for (int i = 0; i < loaded.model.tables_size(); ++i) {
      const TableConfig& config = serving[i];
      const int dim = config.dim();
      KESTREL_ASSIGN_OR_RETURN(const std::string bytes, ReadWholeFile(dir + "/" + loaded.model.tables(i).file()));
      std::vector<float> row(dim);
      if (config.kind() == TableConfig::DENSE) {
        const uint64_t blocks = Partition::DenseBlockCount(config.dense_size(), dim);
        for (uint64_t b = 0; b < blocks; ++b) {
          std::fill(row.begin(), row.end(), 0.0f);
          const size_t begin = b * dim * sizeof(float);
          if (begin >= bytes.size()) break;  // (CheckExportedTable: the file holds dense_size floats)
          std::memcpy(row.data(), bytes.data() + begin, std::min(bytes.size() - begin, dim * sizeof(float)));
          KESTREL_RETURN_IF_ERROR(sink(config.name(), Partition::DenseBlockKey(config.name(), b), row).status());
        }
      } else {
        const size_t record = sizeof(uint64_t) + dim * sizeof(float);
        for (size_t at = 0; at + record <= bytes.size(); at += record) {
          uint64_t key;
          std::memcpy(&key, bytes.data() + at, sizeof(key));
          std::memcpy(row.data(), bytes.data() + at + sizeof(key), dim * sizeof(float));
          KESTREL_RETURN_IF_ERROR(sink(config.name(), key, row).status());
        }
      }
    }
    return absl::OkStatus();
  }));
  return loaded;
}

}  // namespace kestrel
