#include "server/disk_tier.h"

#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "rocksdb/db.h"
#include "server/checkpoint_rows.h"

namespace kestrel {

namespace fs = std::filesystem;

void DiskTier::Detach() {
  {
    absl::MutexLock lock(&files_mu_);
    files_.clear();  // a file being read lives until its Read is done
  }
  {
    absl::MutexLock lock(&deferred_mu_);
    DropDeferredLocked();  // of the store being dropped
  }
  db_ = nullptr;
}

absl::StatusOr<std::shared_ptr<ColdRowFile>> DiskTier::File(absl::string_view table, int floats, bool create) {
  if (table.empty() || table.size() > kMaxTableName) {
    return absl::InvalidArgumentError(
        absl::StrFormat("server %d: disk tier table names are 1 to %d bytes, not %d", shard_, kMaxTableName,
                        table.size()));
  }
  std::shared_ptr<ColdRowFile> file;
  {
    absl::ReaderMutexLock lock(&files_mu_);
    if (auto it = files_.find(table); it != files_.end()) file = it->second;
  }
  if (file == nullptr && create) {
    absl::MutexLock lock(&files_mu_);
    std::shared_ptr<ColdRowFile>& slot = files_[table];
    if (slot == nullptr) {
      // The file name is the table name's hex, never the name itself.
      std::error_code error;
      fs::create_directories(dir_, error);
      if (error) {
        files_.erase(std::string(table));
        return absl::UnavailableError(
            absl::StrCat("cannot create the disk tier directory ", dir_, ": ", error.message()));
      }
      absl::StatusOr<std::unique_ptr<ColdRowFile>> created =
          ColdRowFile::Create(absl::StrCat(dir_, "/", absl::BytesToHexString(table), ".rows"), floats);
      if (!created.ok()) {
        files_.erase(std::string(table));
        return created.status();
      }
      slot = std::move(created).value();
    }
    file = slot;
  }
  if (file != nullptr && file->floats() != floats) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "server %d: the disk tier holds rows of %d floats for table '%s', not %d: a table's row width cannot change "
        "while it has rows on disk (restore or rescale first)",
        shard_, file->floats(), table, floats));
  }
  return file;
}

absl::Status DiskTier::Write(absl::string_view table, absl::Span<const uint64_t> keys,
                             absl::Span<const float> rows) {
  if (keys.empty()) return absl::OkStatus();
  const size_t floats = rows.size() / keys.size();
  if (floats == 0 || floats > ColdRowFile::kMaxFloats || rows.size() != floats * keys.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "server %d: disk tier write of %d keys with %d floats: not a whole row of 1 to %d floats per key", shard_,
        keys.size(), rows.size(), ColdRowFile::kMaxFloats));
  }
  KESTREL_ASSIGN_OR_RETURN(const std::shared_ptr<ColdRowFile> file,
                           File(table, static_cast<int>(floats), /*create=*/true));
  rocksdb::WriteBatch batch;
  std::string key;
  for (size_t i = 0; i < keys.size(); ++i) {
    AppendRowKey(table, keys[i], &key);
    batch.Put(key, rocksdb::Slice(reinterpret_cast<const char*>(rows.data() + i * floats), sizeof(float) * floats));
  }
  KESTREL_RETURN_IF_ERROR(WriteOrDefer(std::move(batch), "disk tier write"));
  return file->Write(keys, rows);
}

absl::Status DiskTier::Delete(absl::string_view table, absl::Span<const uint64_t> keys) {
  if (keys.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  std::string key;
  for (uint64_t k : keys) {
    AppendRowKey(table, k, &key);
    batch.Delete(key);
  }
  KESTREL_RETURN_IF_ERROR(WriteOrDefer(std::move(batch), "disk tier delete"));
  std::shared_ptr<ColdRowFile> file;
  {
    absl::ReaderMutexLock lock(&files_mu_);
    if (auto it = files_.find(table); it != files_.end()) file = it->second;
  }
  if (file != nullptr) file->Delete(keys);
  return absl::OkStatus();
}

absl::Status DiskTier::Read(absl::string_view table, absl::Span<const uint64_t> keys, int floats, float* rows,
                            std::vector<uint8_t>* found) {
  found->assign(keys.size(), 0);
  if (keys.empty()) return absl::OkStatus();
  if (reads_from_store_.load(std::memory_order_relaxed)) return ReadFromStore(table, keys, floats, rows, found);
  KESTREL_ASSIGN_OR_RETURN(const std::shared_ptr<ColdRowFile> file, File(table, floats, /*create=*/false));
  if (file == nullptr) return absl::OkStatus();
  return file->Read(keys, rows, absl::MakeSpan(*found));
}

absl::Status DiskTier::ReadFromStore(absl::string_view table, absl::Span<const uint64_t> keys, int floats,
                                     float* rows, std::vector<uint8_t>* found) {
  const size_t n = keys.size();
  thread_local std::vector<std::string> stored_keys;
  thread_local std::vector<rocksdb::Slice> slices;
  stored_keys.resize(n);
  slices.resize(n);
  for (size_t i = 0; i < n; ++i) {
    AppendRowKey(table, keys[i], &stored_keys[i]);
    slices[i] = stored_keys[i];
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> statuses(n);
  rocksdb::ReadOptions read_options;
  db_->MultiGet(read_options, db_->DefaultColumnFamily(), n, slices.data(), values.data(), statuses.data(),
                /*sorted_input=*/false);
  const size_t row_bytes = sizeof(float) * floats;
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].IsNotFound()) continue;
    KESTREL_RETURN_IF_ERROR(FromRocks(statuses[i], absl::StrFormat("server %d: disk tier read", shard_)));
    if (values[i].size() != row_bytes) {
      return absl::DataLossError(absl::StrFormat("server %d: disk tier row of table '%s' has %d bytes, expected %d",
                                                 shard_, table, values[i].size(), row_bytes));
    }
    std::memcpy(rows + i * floats, values[i].data(), row_bytes);
    (*found)[i] = 1;
  }
  return absl::OkStatus();
}

absl::Status DiskTier::WriteOrDefer(rocksdb::WriteBatch batch, const char* what) {
  absl::MutexLock lock(&deferred_mu_);
  if (deferred_memory_ != nullptr) {
    deferred_bytes_ += batch.GetDataSize();
    deferred_memory_->Add(batch.GetDataSize());
    deferred_.push_back(std::move(batch));
    return absl::OkStatus();
  }
  return FromRocks(db_->Write(StoreWriteOptions(), &batch), absl::StrFormat("server %d: %s", shard_, what));
}

void DiskTier::StartDeferring(CutMemory* memory) {
  absl::MutexLock lock(&deferred_mu_);
  deferred_memory_ = memory;
}

absl::Status DiskTier::ApplyDeferred() {
  absl::MutexLock lock(&deferred_mu_);
  absl::Status status;
  if (fail_held_back_writes_ && !deferred_.empty()) {
    status = absl::UnavailableError("injected (TEST_FailHeldBackWrites)");
  }
  for (rocksdb::WriteBatch& batch : deferred_) {
    if (status.ok()) {
      status = FromRocks(db_->Write(StoreWriteOptions(), &batch),
                         absl::StrFormat("server %d: disk tier writes held back during a checkpoint", shard_));
    }
  }
  DropDeferredLocked();
  return status;
}

void DiskTier::DropDeferredLocked() {
  if (deferred_memory_ != nullptr) deferred_memory_->Release(deferred_bytes_);
  deferred_.clear();
  deferred_bytes_ = 0;
  deferred_memory_ = nullptr;
}

DiskTier::FileStats DiskTier::file_stats() const {
  FileStats stats;
  absl::ReaderMutexLock lock(&files_mu_);
  for (const auto& [name, file] : files_) {
    stats.rows += file->size();
    stats.index_bytes += file->memory_bytes();
    stats.file_bytes += file->file_bytes();
  }
  return stats;
}

absl::StatusOr<uint64_t> DiskTier::TEST_DropCachedPages() {
  absl::ReaderMutexLock lock(&files_mu_);
  uint64_t resident = 0;
  for (const auto& [name, file] : files_) {
    KESTREL_RETURN_IF_ERROR(file->TEST_DropCachedPages());
    KESTREL_ASSIGN_OR_RETURN(const uint64_t pages, file->ResidentPages());
    resident += pages;
  }
  return resident;
}

}  // namespace kestrel
