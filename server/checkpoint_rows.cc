#include "server/checkpoint_rows.h"

#include <cstdarg>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "rocksdb/env.h"

namespace kestrel {
namespace {

// Keeps RocksDB from writing LOG files into checkpoint directories it opens read-only.
class NullLogger final : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
};

}  // namespace

const std::string& SketchPrefix() {
  static const std::string* prefix = new std::string(std::string(1, kMetaPrefix) + std::string("sketch\0", 7));
  return *prefix;
}

void AppendRowKey(absl::string_view table, uint64_t key, std::string* out) {
  out->assign(table.data(), table.size());
  out->push_back('\0');
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>(key >> shift));
}

bool ParseRowKey(const rocksdb::Slice& stored, absl::string_view* table, uint64_t* key) {
  if (stored.size() < 10 || stored.data()[stored.size() - 9] != '\0') return false;
  *table = absl::string_view(stored.data(), stored.size() - 9);
  uint64_t k = 0;
  for (size_t i = stored.size() - 8; i < stored.size(); ++i) k = (k << 8) | static_cast<uint8_t>(stored.data()[i]);
  *key = k;
  return true;
}

absl::Status FromRocks(const rocksdb::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", status.ToString());
  if (status.IsCorruption()) return absl::DataLossError(message);
  if (status.IsNotFound() || status.IsPathNotFound()) return absl::DataLossError(message);
  return absl::UnavailableError(message);
}

rocksdb::WriteOptions StoreWriteOptions() {
  rocksdb::WriteOptions options;
  options.disableWAL = true;
  return options;
}

absl::StatusOr<std::unique_ptr<rocksdb::DB>> OpenSnapshot(const std::string& dir, const std::string& where) {
  rocksdb::Options options;
  options.info_log = std::make_shared<NullLogger>();
  options.paranoid_checks = true;
  rocksdb::DB* raw = nullptr;
  KESTREL_RETURN_IF_ERROR(
      FromRocks(rocksdb::DB::OpenForReadOnly(options, dir, &raw), absl::StrCat(where, ": cannot open")));
  return std::unique_ptr<rocksdb::DB>(raw);
}

rocksdb::ReadOptions SnapshotReadOptions() {
  rocksdb::ReadOptions read_options;
  read_options.verify_checksums = true;
  read_options.fill_cache = false;
  return read_options;
}

}  // namespace kestrel
