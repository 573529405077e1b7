// Reading an export's rows: the records of one file in key order (SortedRecordReader), and the rows a (full or
// delta) export holds for one sparse table with its base chain resolved (ExportRowStream). Both stream: memory
// holds one record per file. Thread-compatible.
#ifndef KESTREL_EXPORT_EXPORT_ROWS_H_
#define KESTREL_EXPORT_EXPORT_ROWS_H_

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "export/verified_export.h"
#include "proto/table.pb.h"

namespace kestrel {

// Reads a file of fixed-size records in order, each starting with its key (8 bytes, little-endian), checking
// that the keys strictly increase and that the file holds as many records as MODEL says. Holds one record.
class SortedRecordReader {
 public:
  // `size`: the file's verified size, a multiple of record_bytes.
  [[nodiscard]] absl::Status Open(std::string path, size_t record_bytes, uint64_t size);
  bool Valid() const { return valid_; }
  uint64_t key() const { return key_; }
  // The record's bytes after its key.
  const char* payload() const { return record_.data() + sizeof(uint64_t); }
  const std::string& path() const { return path_; }
  [[nodiscard]] absl::Status Next();

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
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ExportRowStream>> Open(const VerifiedExport& e, const TableConfig& config);

  bool Valid() const { return current_ != Source::kNone; }
  uint64_t key() const { return current_ == Source::kOwn ? rows_.key() : base_->key(); }
  // dim floats (little-endian bytes, not necessarily aligned); valid until Next().
  const char* values() const { return current_ == Source::kOwn ? rows_.payload() : base_->values(); }
  [[nodiscard]] absl::Status Next();

 private:
  enum class Source { kNone, kOwn, kBase };
  ExportRowStream() = default;

  // Moves to the smallest key held: an own row, or a base row not deleted.
  [[nodiscard]] absl::Status Settle();

  SortedRecordReader rows_;
  SortedRecordReader deleted_;  // deltas only
  std::unique_ptr<ExportRowStream> base_;  // deltas only
  Source current_ = Source::kNone;
  bool replaces_base_ = false;  // the current own row replaces the base's current row
};

}  // namespace kestrel

#endif  // KESTREL_EXPORT_EXPORT_ROWS_H_
