#include "worker/records.h"

#include <cstdio>

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

absl::Status StartRecordFile(const std::string& path, bool append) {
  if (path.empty()) return absl::OkStatus();
  std::ofstream out(path, append ? std::ios::app : std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot create the records file ", path));
  return absl::OkStatus();
}

absl::Status WritePredictions(const std::string& path, absl::Span<const float> probs) {
  FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) return absl::UnavailableError(absl::StrCat("cannot create ", path));
  bool written = true;
  for (float p : probs) written = written && std::fprintf(out, "%.9g\n", p) > 0;
  if (std::fclose(out) != 0 || !written) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

RecordWriter::RecordWriter(const std::string& path) {
  if (!path.empty()) out_.open(path, std::ios::app);
}

void RecordWriter::Write(const Record& record) {
  if (!out_.is_open()) return;
  out_ << ToJson(record) << "\n";
  out_.flush();
}

}  // namespace kestrel
