#include "export/export_rows.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "export/export_format.h"

namespace kestrel {

absl::Status SortedRecordReader::Open(std::string path, size_t record_bytes, uint64_t size) {
  path_ = std::move(path);
  record_.resize(record_bytes);
  left_ = size / record_bytes;
  in_.open(path_, std::ios::binary);
  if (!in_) return absl::UnavailableError(absl::StrCat("cannot open ", path_));
  return Next();
}

absl::Status SortedRecordReader::Next() {
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

absl::StatusOr<std::unique_ptr<ExportRowStream>> ExportRowStream::Open(const VerifiedExport& e,
                                                                       const TableConfig& config) {
  const auto t = std::find_if(e.model.tables().begin(), e.model.tables().end(),
                              [&](const ExportedTable& t) { return t.config().name() == config.name(); });
  if (t == e.model.tables().end()) {  // (VerifyExport: a delta and its base have the same tables)
    return absl::DataLossError(absl::StrFormat("%s has no table '%s'", e.dir, config.name()));
  }
  auto stream = absl::WrapUnique(new ExportRowStream());
  KESTREL_RETURN_IF_ERROR(stream->rows_.Open(e.dir + "/" + t->file(), sizeof(uint64_t) + ValueBytes(config),
                                             t->size()));
  if (e.base != nullptr) {
    KESTREL_RETURN_IF_ERROR(
        stream->deleted_.Open(e.dir + "/" + t->deleted_file(), sizeof(uint64_t), t->deleted_size()));
    KESTREL_ASSIGN_OR_RETURN(stream->base_, Open(*e.base, config));
  }
  KESTREL_RETURN_IF_ERROR(stream->Settle());
  return stream;
}

absl::Status ExportRowStream::Next() {
  if (current_ == Source::kOwn) {
    KESTREL_RETURN_IF_ERROR(rows_.Next());
    if (replaces_base_) KESTREL_RETURN_IF_ERROR(base_->Next());
  } else if (current_ == Source::kBase) {
    KESTREL_RETURN_IF_ERROR(base_->Next());
  }
  return Settle();
}

absl::Status ExportRowStream::Settle() {
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

}  // namespace kestrel
