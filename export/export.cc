#include "export/export.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <queue>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint_layout.h"
#include "common/crc32c.h"
#include "common/logging.h"
#include "common/partition.h"
#include "common/status.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/checkpoint_table_reader.h"
#include "server/initializer.h"
#include "server/row_values.h"
#include "server/table.h"
#include "server/shard_store.h"
#include "worker/data/schema.h"
#include "worker/model.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

constexpr char kModelFile[] = "MODEL";
// MODEL holds configs only: anything larger is not one (and is not read into memory).
constexpr uint64_t kMaxModelBytes = uint64_t{16} << 20;
// Longest base_dir a MODEL may name.
constexpr size_t kMaxBaseDirBytes = 4096;

std::string FileOf(const TableConfig& config) {
  return config.name() + (config.kind() == TableConfig::DENSE ? ".dense" : ".rows");
}

std::string DeletedFileOf(const TableConfig& config) { return config.name() + ".deleted"; }

// Bytes of a sparse row's values in a .rows file: the stored form (RowValues: fp32, or bf16/fp16 two to a word).
size_t ValueBytes(const TableConfig& config) { return sizeof(float) * RowValues::WordsFor(config); }

// A table of an export (from MODEL) and its files' sizes, checked before a file is opened or anything is
// allocated for it: a valid shape (Table::CheckShape: the name can only make a file name in the export's
// directory, dim and sizes bounded), the files named as the exporter names them, and sizes the shape explains.
// `delta`: the export is a delta, so a sparse table has a deleted-keys file (and no other table has one).
absl::Status CheckExportedTable(const ExportedTable& t, bool delta) {
  const TableConfig& config = t.config();
  if (absl::Status shape = Table::CheckShape(config); !shape.ok()) {
    return absl::DataLossError(absl::StrCat("MODEL lists a table that cannot be: ", shape.message()));
  }
  if (t.file() != FileOf(config)) {
    return absl::DataLossError(absl::StrFormat("MODEL names table '%s''s file '%s', expected '%s'", config.name(),
                                               t.file().substr(0, 80), FileOf(config)));
  }
  const bool dense = config.kind() == TableConfig::DENSE;
  const bool fits = dense ? t.size() == config.dense_size() * sizeof(float)
                          : t.size() % (sizeof(uint64_t) + ValueBytes(config)) == 0;
  if (!fits) {
    return absl::DataLossError(absl::StrFormat("MODEL says table '%s' takes %d bytes, which its shape cannot explain",
                                               config.name(), t.size()));
  }
  if (delta && !dense) {
    if (t.deleted_file() != DeletedFileOf(config)) {
      return absl::DataLossError(absl::StrFormat("MODEL names table '%s''s deleted keys '%s', expected '%s'",
                                                 config.name(), t.deleted_file().substr(0, 80),
                                                 DeletedFileOf(config)));
    }
    if (t.deleted_size() % sizeof(uint64_t) != 0 || t.deleted_size() / sizeof(uint64_t) != t.deleted_rows()) {
      return absl::DataLossError(absl::StrFormat("MODEL says table '%s' deletes %d keys in %d bytes", config.name(),
                                                 t.deleted_rows(), t.deleted_size()));
    }
  } else if (!t.deleted_file().empty() || t.deleted_rows() != 0 || t.deleted_size() != 0 ||
             t.deleted_crc32c() != 0) {
    return absl::DataLossError(absl::StrFormat(
        "MODEL gives table '%s' deleted keys, which only the sparse tables of a delta export have", config.name()));
  }
  return absl::OkStatus();
}

// DataLoss naming `path` unless the file has exactly `size` bytes and CRC-32C `crc`.
absl::Status VerifyFile(const std::string& path, uint64_t size, uint32_t crc32c) {
  KESTREL_ASSIGN_OR_RETURN(const FileCrc crc, Crc32cOfFile(path));
  if (crc.size != size || crc.crc != crc32c) {
    return absl::DataLossError(absl::StrFormat("%s: %d bytes with crc32c %08x, MODEL says %d bytes, %08x", path,
                                               crc.size, crc.crc, size, crc32c));
  }
  return absl::OkStatus();
}

// A MODEL file's bytes: NotFound when it does not exist; DataLoss when it is not a regular file or larger
// than any MODEL (a path read from a file never makes the loader read a device, a pipe or gigabytes).
absl::StatusOr<std::string> ReadModelFile(const std::string& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!error && fs::exists(status)) {
    if (!fs::is_regular_file(status)) return absl::DataLossError(absl::StrCat(path, " is not a regular file"));
    const uintmax_t bytes = fs::file_size(path, error);
    if (!error && bytes > kMaxModelBytes) {
      return absl::DataLossError(absl::StrFormat("%s: %d bytes, more than a MODEL can be", path, bytes));
    }
  }
  return ReadWholeFile(path);
}

// Where a delta's base is: its MODEL's base_dir, relative to the delta's directory unless absolute.
// DataLoss for a base_dir no exporter writes (empty, too long, or with control characters).
absl::StatusOr<std::string> ResolveBaseDir(const std::string& dir, const std::string& base_dir) {
  const bool plain = !base_dir.empty() && base_dir.size() <= kMaxBaseDirBytes &&
                     std::none_of(base_dir.begin(), base_dir.end(), [](char c) {
                       return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
                     });
  if (!plain) return absl::DataLossError(absl::StrCat(dir, "/", kModelFile, " names a base that cannot be a path"));
  const fs::path base(base_dir);
  return base.is_absolute() ? base.string() : (fs::path(dir) / base).string();
}

// What base_dir an export in `out_dir` records for the base `base_export` (both as given, relative to the
// working directory): the base relative to out_dir (so a tree of exports can move as a whole), or absolute
// when they share no root. Symbolic links are resolved first, so the relative path names the same directory.
std::string BaseDirFor(const std::string& out_dir, const std::string& base_export) {
  std::error_code error;
  const fs::path out = fs::weakly_canonical(fs::absolute(out_dir), error);
  if (error) return fs::absolute(base_export).lexically_normal().string();
  const fs::path base = fs::weakly_canonical(fs::absolute(base_export), error);
  if (error) return fs::absolute(base_export).lexically_normal().string();
  const fs::path relative = base.lexically_relative(out);
  return relative.empty() ? base.string() : relative.string();
}

// How `base` differs from what a delta of job `job_id` with `tables` needs of its base (the same job, the same
// tables with the same configs), in words; "" when it does not.
std::string BaseDifference(const ExportedModel& base, const std::string& job_id,
                           const std::vector<TableConfig>& tables) {
  if (base.job_id() != job_id) {
    return absl::StrFormat("the base is an export of job '%s', not '%s'", base.job_id(), job_id);
  }
  for (const TableConfig& config : tables) {
    const auto it = std::find_if(base.tables().begin(), base.tables().end(),
                                 [&](const ExportedTable& t) { return t.config().name() == config.name(); });
    if (it == base.tables().end()) return absl::StrFormat("table '%s' is not in the base", config.name());
    std::string report;
    google::protobuf::util::MessageDifferencer differencer;
    differencer.ReportDifferencesToString(&report);
    if (!differencer.Compare(it->config(), config)) {
      std::replace(report.begin(), report.end(), '\n', ';');
      return absl::StrFormat("table '%s' has another config than the base's (base -> now: %s)", config.name(),
                             report.substr(0, 400));
    }
  }
  for (const ExportedTable& t : base.tables()) {
    if (std::none_of(tables.begin(), tables.end(),
                     [&](const TableConfig& config) { return config.name() == t.config().name(); })) {
      return absl::StrFormat("the base has table '%s', which is gone", t.config().name());
    }
  }
  return "";
}

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
absl::StatusOr<std::unique_ptr<VerifiedExport>> VerifyExport(const std::string& dir, int depth) {
  auto e = std::make_unique<VerifiedExport>();
  e->dir = dir;
  const std::string model_path = dir + "/" + kModelFile;
  KESTREL_ASSIGN_OR_RETURN(const std::string contents, ReadModelFile(model_path));
  KESTREL_ASSIGN_OR_RETURN(const std::string body, VerifyChecksumLine(model_path, contents));
  if (!google::protobuf::TextFormat::ParseFromString(body, &e->model) || e->model.format_version() != 1) {
    return absl::DataLossError(absl::StrCat(model_path, ": not a version-1 Kestrel export"));
  }
  e->model_crc32c = Crc32c(contents);
  const ExportedModel& model = e->model;
  const bool delta = !model.base_dir().empty();
  if (!delta && (!model.base_checkpoint().empty() || model.base_model_crc32c() != 0)) {
    return absl::DataLossError(absl::StrCat(model_path, ": names a base checkpoint but no base directory"));
  }
  std::vector<TableConfig> tables;
  for (const ExportedTable& t : model.tables()) {
    KESTREL_RETURN_IF_ERROR(CheckExportedTable(t, delta));
    if (std::any_of(tables.begin(), tables.end(),
                    [&](const TableConfig& c) { return c.name() == t.config().name(); })) {
      return absl::DataLossError(absl::StrFormat("%s lists table '%s' twice", model_path, t.config().name()));
    }
    tables.push_back(t.config());
    KESTREL_RETURN_IF_ERROR(VerifyFile(dir + "/" + t.file(), t.size(), t.crc32c()));
    if (!t.deleted_file().empty()) {
      KESTREL_RETURN_IF_ERROR(VerifyFile(dir + "/" + t.deleted_file(), t.deleted_size(), t.deleted_crc32c()));
    }
  }
  if (!delta) return e;
  if (depth >= kMaxDeltaChain) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: more than %d delta exports on top of a full one (export a full one)", dir, kMaxDeltaChain));
  }
  if (!CheckpointLayout::CheckName(model.base_checkpoint()).ok()) {
    return absl::DataLossError(absl::StrCat(model_path, ": a delta whose base checkpoint is not a checkpoint name"));
  }
  KESTREL_ASSIGN_OR_RETURN(const std::string base_dir, ResolveBaseDir(dir, model.base_dir()));
  KESTREL_ASSIGN_OR_RETURN(e->base, VerifyExport(base_dir, depth + 1));
  if (e->base->model_crc32c != model.base_model_crc32c()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is a delta against the export of %s whose MODEL has crc32c %08x; its base directory %s holds another "
        "(%s, crc32c %08x)",
        dir, model.base_checkpoint(), model.base_model_crc32c(), base_dir, e->base->model.checkpoint(),
        e->base->model_crc32c));
  }
  std::string difference = BaseDifference(e->base->model, model.job_id(), tables);
  if (difference.empty() && e->base->model.checkpoint() != model.base_checkpoint()) {
    difference = absl::StrFormat("the base is of %s, MODEL says %s", e->base->model.checkpoint(),
                                 model.base_checkpoint());
  }
  if (!difference.empty()) {
    return absl::DataLossError(absl::StrCat(model_path, " disagrees with the base it names: ", difference));
  }
  return e;
}

// Reads a file of fixed-size records in order, each starting with its key (8 bytes, little-endian), checking
// that the keys strictly increase and that the file holds as many records as MODEL says. Holds one record.
class SortedRecordReader {
 public:
  // `size`: the file's verified size, a multiple of record_bytes.
  absl::Status Open(std::string path, size_t record_bytes, uint64_t size) {
    path_ = std::move(path);
    record_.resize(record_bytes);
    left_ = size / record_bytes;
    in_.open(path_, std::ios::binary);
    if (!in_) return absl::UnavailableError(absl::StrCat("cannot open ", path_));
    return Next();
  }
  bool Valid() const { return valid_; }
  uint64_t key() const { return key_; }
  // The record's bytes after its key.
  const char* payload() const { return record_.data() + sizeof(uint64_t); }
  const std::string& path() const { return path_; }

  absl::Status Next() {
    if (left_ == 0) {
      valid_ = false;
      return absl::OkStatus();
    }
    in_.read(record_.data(), static_cast<std::streamsize>(record_.size()));
    if (static_cast<size_t>(in_.gcount()) != record_.size()) {
      return absl::DataLossError(absl::StrCat(path_, ": shorter than MODEL says (changed since it was checked)"));
    }
    --left_;
    uint64_t key;
    std::memcpy(&key, record_.data(), sizeof(key));
    if (valid_ && key <= key_) {
      return absl::DataLossError(
          absl::StrFormat("%s: key 0x%016x after 0x%016x, keys must strictly increase", path_, key, key_));
    }
    key_ = key;
    valid_ = true;
    return absl::OkStatus();
  }

 private:
  std::string path_;
  std::ifstream in_;
  std::vector<char> record_;
  uint64_t left_ = 0;
  bool valid_ = false;
  uint64_t key_ = 0;
};

// The rows an export holds for one sparse table, in strictly increasing key order. A full export: its .rows
// file. A delta: its base's rows (recursively: the base may be a delta too) without the keys of its .deleted
// file, merged with its own .rows (which replace the base's rows of the same keys). Streams: holds one record
// per file of the chain. A delta that deletes a key its base does not hold, or deletes and writes one key, is
// DataLoss.
class ExportRowStream {
 public:
  static absl::StatusOr<std::unique_ptr<ExportRowStream>> Open(const VerifiedExport& e, const TableConfig& config) {
    const auto t = std::find_if(e.model.tables().begin(), e.model.tables().end(),
                                [&](const ExportedTable& t) { return t.config().name() == config.name(); });
    if (t == e.model.tables().end()) {  // (VerifyExport: a delta and its base have the same tables)
      return absl::DataLossError(absl::StrFormat("%s has no table '%s'", e.dir, config.name()));
    }
    auto stream = absl::WrapUnique(new ExportRowStream());
    KESTREL_RETURN_IF_ERROR(stream->rows_.Open(e.dir + "/" + t->file(),
                                               sizeof(uint64_t) + ValueBytes(config), t->size()));
    if (e.base != nullptr) {
      KESTREL_RETURN_IF_ERROR(
          stream->deleted_.Open(e.dir + "/" + t->deleted_file(), sizeof(uint64_t), t->deleted_size()));
      KESTREL_ASSIGN_OR_RETURN(stream->base_, Open(*e.base, config));
    }
    KESTREL_RETURN_IF_ERROR(stream->Settle());
    return stream;
  }

  bool Valid() const { return current_ != Source::kNone; }
  uint64_t key() const { return current_ == Source::kOwn ? rows_.key() : base_->key(); }
  // dim floats (little-endian bytes, not necessarily aligned); valid until Next().
  const char* values() const { return current_ == Source::kOwn ? rows_.payload() : base_->values(); }

  absl::Status Next() {
    if (current_ == Source::kOwn) {
      KESTREL_RETURN_IF_ERROR(rows_.Next());
      if (replaces_base_) KESTREL_RETURN_IF_ERROR(base_->Next());
    } else if (current_ == Source::kBase) {
      KESTREL_RETURN_IF_ERROR(base_->Next());
    }
    return Settle();
  }

 private:
  enum class Source { kNone, kOwn, kBase };
  ExportRowStream() = default;

  // Moves to the smallest key held: an own row, or a base row not deleted.
  absl::Status Settle() {
    current_ = Source::kNone;
    for (;;) {
      const bool own = rows_.Valid();
      const bool base = base_ != nullptr && base_->Valid();
      if (deleted_.Valid() && (!base || deleted_.key() < base_->key())) {
        return absl::DataLossError(absl::StrFormat("%s: deletes key 0x%016x, which its base does not hold",
                                                   deleted_.path(), deleted_.key()));
      }
      if (!own && !base) return absl::OkStatus();
      if (base && (!own || base_->key() < rows_.key())) {
        if (deleted_.Valid() && deleted_.key() == base_->key()) {  // gone since the base
          KESTREL_RETURN_IF_ERROR(deleted_.Next());
          KESTREL_RETURN_IF_ERROR(base_->Next());
          continue;
        }
        current_ = Source::kBase;
        return absl::OkStatus();
      }
      if (deleted_.Valid() && deleted_.key() == rows_.key()) {
        return absl::DataLossError(
            absl::StrFormat("%s: deletes key 0x%016x, which its rows write", deleted_.path(), deleted_.key()));
      }
      replaces_base_ = base && base_->key() == rows_.key();
      current_ = Source::kOwn;
      return absl::OkStatus();
    }
  }

  SortedRecordReader rows_;
  SortedRecordReader deleted_;  // deltas only
  std::unique_ptr<ExportRowStream> base_;  // deltas only
  Source current_ = Source::kNone;
  bool replaces_base_ = false;  // the current own row replaces the base's current row
};

// The live rows of one sparse table of a checkpoint, in key order: every server's rows merged by a heap
// (servers may own interleaved ranges), rows expired at the checkpoint's clock skipped (gone for training: not
// served either). Holds one row per server.
class CheckpointRows {
 public:
  absl::Status Open(const CheckpointLayout& layout, const CheckpointManifest& manifest, const TableConfig& config) {
    config_ = config;
    clock_ = manifest.clock();
    for (int s = 0; s < manifest.shards_size(); ++s) {
      KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointTableReader> reader,
                               CheckpointTableReader::Open(layout, manifest, s, config.name()));
      if (reader->Valid()) heads_.emplace(reader->key(), readers_.size());
      readers_.push_back(std::move(reader));
    }
    return Settle();
  }
  bool Valid() const { return !heads_.empty(); }
  uint64_t key() const { return heads_.top().first; }
  // The stored values (ValueBytes).
  const float* values() const { return readers_[heads_.top().second]->row().data(); }
  absl::Status Next() {
    KESTREL_RETURN_IF_ERROR(Pop());
    return Settle();
  }

 private:
  // Advances the reader of the smallest key.
  absl::Status Pop() {
    const size_t r = heads_.top().second;
    heads_.pop();
    KESTREL_RETURN_IF_ERROR(readers_[r]->Next());
    if (readers_[r]->Valid()) heads_.emplace(readers_[r]->key(), r);
    return absl::OkStatus();
  }
  // Moves to the smallest key whose row is live.
  absl::Status Settle() {
    while (!heads_.empty()) {
      const CheckpointTableReader& reader = *readers_[heads_.top().second];
      if (reader.row().size() * sizeof(float) < ValueBytes(config_)) {
        return absl::DataLossError(absl::StrFormat("table '%s': a checkpoint row has %d words, its values take %d (%s)",
                                                   config_.name(), reader.row().size(),
                                                   ValueBytes(config_) / sizeof(float), reader.where()));
      }
      if (started_ && reader.key() <= last_) {
        return absl::DataLossError(absl::StrFormat("table '%s': the checkpoint holds key 0x%016x twice (%s)",
                                                   config_.name(), reader.key(), reader.where()));
      }
      started_ = true;
      last_ = reader.key();
      if (!Table::Expired(config_, reader.row(), clock_)) return absl::OkStatus();
      KESTREL_RETURN_IF_ERROR(Pop());
    }
    return absl::OkStatus();
  }

  TableConfig config_;
  int64_t clock_ = 0;
  std::vector<std::unique_ptr<CheckpointTableReader>> readers_;
  using Head = std::pair<uint64_t, size_t>;  // (key, reader)
  std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads_;
  bool started_ = false;
  uint64_t last_ = 0;  // the last key taken off the heap
};

absl::Status WriteBytes(std::ofstream& out, const void* data, size_t bytes, const std::string& path) {
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
absl::StatusOr<ExportedTable> WriteTable(const CheckpointLayout& layout, const CheckpointManifest& manifest,
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

absl::StatusOr<LoadedExport> LoadExport(const std::string& dir) {
  KESTREL_ASSIGN_OR_RETURN(const std::unique_ptr<VerifiedExport> verified, VerifyExport(dir, /*depth=*/0));
  LoadedExport loaded;
  loaded.model = verified->model;
  const bool delta = verified->base != nullptr;
  std::vector<TableConfig> serving;
  for (const ExportedTable& t : loaded.model.tables()) {
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
      // A sparse row is its stored values (the serving table keeps the export's storage type), a dense block dim
      // floats.
      const size_t value_bytes = config.kind() == TableConfig::DENSE ? dim * sizeof(float) : ValueBytes(config);
      std::vector<float> row(value_bytes / sizeof(float));
      if (config.kind() != TableConfig::DENSE && delta) {  // the base chain's rows, streamed
        KESTREL_ASSIGN_OR_RETURN(std::unique_ptr<ExportRowStream> rows, ExportRowStream::Open(*verified, config));
        while (rows->Valid()) {
          std::memcpy(row.data(), rows->values(), value_bytes);
          KESTREL_RETURN_IF_ERROR(sink(config.name(), rows->key(), row).status());
          KESTREL_RETURN_IF_ERROR(rows->Next());
        }
        continue;
      }
      KESTREL_ASSIGN_OR_RETURN(const std::string bytes, ReadWholeFile(dir + "/" + loaded.model.tables(i).file()));
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
        const size_t record = sizeof(uint64_t) + value_bytes;
        for (size_t at = 0; at + record <= bytes.size(); at += record) {
          uint64_t key;
          std::memcpy(&key, bytes.data() + at, sizeof(key));
          std::memcpy(row.data(), bytes.data() + at + sizeof(key), value_bytes);
          KESTREL_RETURN_IF_ERROR(sink(config.name(), key, row).status());
        }
      }
    }
    return absl::OkStatus();
  }));
  return loaded;
}

}  // namespace kestrel
