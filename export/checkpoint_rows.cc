#include "export/checkpoint_rows.h"

#include "absl/strings/str_format.h"
#include "common/status.h"
#include "export/export_format.h"
#include "server/table.h"

namespace kestrel {

absl::Status CheckpointRows::Open(const CheckpointLayout& layout, const CheckpointManifest& manifest,
                                  const TableConfig& config) {
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

absl::Status CheckpointRows::Next() {
  KESTREL_RETURN_IF_ERROR(Pop());
  return Settle();
}

absl::Status CheckpointRows::Pop() {
  const size_t r = heads_.top().second;
  heads_.pop();
  KESTREL_RETURN_IF_ERROR(readers_[r]->Next());
  if (readers_[r]->Valid()) heads_.emplace(readers_[r]->key(), r);
  return absl::OkStatus();
}

absl::Status CheckpointRows::Settle() {
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

}  // namespace kestrel
