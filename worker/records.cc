#include "worker/records.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json.h"

namespace kestrel {

std::string RecordJson(const Record& record) { return ToJson(record); }

absl::StatusOr<Record> ParseRecord(absl::string_view line) {
  Record record;
  if (absl::Status status = FromJson(line, &record); !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a record (proto/records.proto): ", status.message(), "; the line: ", line));
  }
  return record;
}

std::string FingerprintHex(uint64_t fingerprint) { return absl::StrFormat("%016x", fingerprint); }

RecordWriter::RecordWriter(const std::string& path) {
  if (!path.empty()) out_.open(path, std::ios::app);
}

void RecordWriter::Write(const Record& record) {
  if (!out_.is_open()) return;
  out_ << ToJson(record) << "\n";
  out_.flush();
}

}  // namespace kestrel
