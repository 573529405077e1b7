#include "tests/records.h"

#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/records.h"

namespace kestrel {

absl::StatusOr<std::vector<Record>> ReadRecords(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<Record> records;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    absl::StatusOr<Record> record = ParseRecord(line);
    if (!record.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": ", record.status().message()));
    }
    records.push_back(*std::move(record));
  }
  return records;
}

absl::StatusOr<Record> LastRecord(const std::string& path, absl::string_view kind) {
  absl::StatusOr<std::vector<Record>> records = ReadRecords(path);
  if (!records.ok()) return records.status();
  for (auto it = records->rbegin(); it != records->rend(); ++it) {
    if (it->kind() == kind) return *it;
  }
  return absl::NotFoundError(absl::StrCat("no ", kind, " record in ", path));
}

}  // namespace kestrel
