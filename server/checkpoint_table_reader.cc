#include "server/checkpoint_table_reader.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "rocksdb/db.h"
#include "rocksdb/iterator.h"
#include "server/checkpoint_rows.h"

namespace kestrel {

absl::StatusOr<std::unique_ptr<CheckpointTableReader>> CheckpointTableReader::Open(
    const CheckpointLayout& layout, const CheckpointManifest& manifest, int shard, absl::string_view table) {
  const std::string name = CheckpointLayout::CheckpointName(manifest.sequence());
  const std::string dir = layout.ShardDir(name, shard);
  std::unique_ptr<CheckpointTableReader> reader(new CheckpointTableReader());
  reader->where_ = absl::StrFormat("checkpoint %s, server %d's part (%s)", name, shard, dir);
  if (!table.empty()) reader->prefix_ = absl::StrCat(table, absl::string_view("\0", 1));
  for (const TableConfig& config : manifest.tables()) {
    if (!table.empty() && config.name() != table) continue;
    absl::StatusOr<CheckpointRowCodec> codec = CheckpointRowCodec::Create(config);
    if (!codec.ok()) {
      return absl::DataLossError(
          absl::StrCat(reader->where_, ": table '", config.name(), "': ", codec.status().message()));
    }
    reader->codecs_.emplace(config.name(), *std::move(codec));
  }
  KESTREL_ASSIGN_OR_RETURN(reader->db_, OpenSnapshot(dir, reader->where_));
  reader->it_.reset(reader->db_->NewIterator(SnapshotReadOptions()));
  reader->it_->Seek(table.empty() ? rocksdb::Slice(kTablesStart.data(), kTablesStart.size())
                                  : rocksdb::Slice(reader->prefix_));
  KESTREL_RETURN_IF_ERROR(reader->Load());
  return reader;
}

CheckpointTableReader::~CheckpointTableReader() {
  it_.reset();  // before the DB it reads
}

absl::Status CheckpointTableReader::Load() {
  valid_ = false;
  if (!it_->Valid()) return FromRocks(it_->status(), absl::StrCat(where_, ": reading"));
  if (!it_->key().starts_with(prefix_)) return absl::OkStatus();  // past the table
  const rocksdb::Slice value = it_->value();
  if (!ParseRowKey(it_->key(), &table_, &key_)) return absl::DataLossError(absl::StrCat(where_, ": malformed row"));
  const absl::string_view record(value.data(), value.size());
  if (CheckpointRowCodec::IsQ8(record)) {  // a compact row: decoded by its table's codec
    auto codec = codecs_.find(table_);
    if (codec == codecs_.end()) {
      return absl::DataLossError(
          absl::StrCat(where_, ": a compact row of table '", table_, "', which the manifest lacks"));
    }
    absl::Status decoded = codec->second.Decode(record, &row_);
    if (!decoded.ok()) return absl::DataLossError(absl::StrCat(where_, ": ", decoded.message()));
  } else {
    row_.resize(value.size() / sizeof(float));
    std::memcpy(row_.data(), value.data(), value.size());
  }
  valid_ = true;
  return absl::OkStatus();
}

absl::Status CheckpointTableReader::Next() {
  it_->Next();
  return Load();
}

absl::Status CheckpointTableReader::ForEachSketch(
    absl::FunctionRef<absl::Status(absl::string_view table, const AdmissionSketchState& state)> fn) {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(SnapshotReadOptions()));
  const std::string& prefix = SketchPrefix();
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    AdmissionSketchState state;
    if (!state.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return absl::DataLossError(absl::StrCat(where_, ": malformed admission sketch"));
    }
    const rocksdb::Slice key = it->key();
    KESTREL_RETURN_IF_ERROR(fn(absl::string_view(key.data() + prefix.size(), key.size() - prefix.size()), state));
  }
  return FromRocks(it->status(), absl::StrCat(where_, ": reading admission sketches"));
}

}  // namespace kestrel
