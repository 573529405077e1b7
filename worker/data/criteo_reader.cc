#include "worker/data/criteo_reader.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace kestrel {

absl::Status ParseCriteoLine(absl::string_view line, CriteoExample* out) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::vector<absl::string_view> columns = absl::StrSplit(line, '\t');
  constexpr size_t kColumns = 1 + kCriteoIntegerFields + kCriteoCategoricalFields;
  if (columns.size() != kColumns) {
    return absl::InvalidArgumentError(
        absl::StrFormat("expected %d tab-separated columns, found %d", kColumns, columns.size()));
  }
  if (columns[0] == "0" || columns[0] == "1") {
    out->label = columns[0] == "1" ? 1.0f : 0.0f;
  } else {
    return absl::InvalidArgumentError(absl::StrFormat("label '%s' is not 0 or 1", columns[0].substr(0, 20)));
  }
  for (int j = 0; j < kCriteoIntegerFields; ++j) {
    absl::string_view c = columns[1 + j];
    out->integer_missing[j] = c.empty();
    out->integers[j] = 0;
    if (!c.empty() && !absl::SimpleAtoi(c, &out->integers[j])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("integer feature I%d '%s' is not an integer", j + 1, c.substr(0, 20)));
    }
  }
  for (int f = 0; f < kCriteoCategoricalFields; ++f) {
    absl::string_view c = columns[1 + kCriteoIntegerFields + f];
    uint64_t value = kMissingValue;
    if (!c.empty() && (c.size() > 16 || !absl::SimpleHexAtoi(c, &value))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("categorical feature C%d '%s' is not a hex token", f + 1, c.substr(0, 20)));
    }
    out->categories[f] = value;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::Open(std::vector<std::string> files,
                                                                  const CriteoReaderOptions& options,
                                                                  const ReaderPosition& start) {
  if (options.num_shards < 1 || options.shard_index < 0 || options.shard_index >= options.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard %d of %d is not a shard", options.shard_index, options.num_shards));
  }
  for (const std::string& f : files) {
    if (!std::ifstream(f).good()) return absl::NotFoundError(absl::StrFormat("cannot open data file %s", f));
  }
  auto reader = std::unique_ptr<CriteoReader>(new CriteoReader(std::move(files), options, start));
  return reader;
}

absl::Status CriteoReader::OpenCurrent() {
  in_ = std::ifstream(files_[position_.file]);
  if (!in_.good()) return absl::NotFoundError(absl::StrFormat("cannot open data file %s", files_[position_.file]));
  in_.seekg(static_cast<std::streamoff>(position_.byte_offset));
  if (!in_.good()) {
    return absl::DataLossError(absl::StrFormat("cannot seek to byte %d of %s (resumed position past its end?)",
                                               position_.byte_offset, files_[position_.file]));
  }
  open_ = true;
  return absl::OkStatus();
}

absl::StatusOr<bool> CriteoReader::Next(CriteoExample* out) {
  while (position_.file < files_.size()) {
    if (!open_) {
      absl::Status s = OpenCurrent();
      if (!s.ok()) return s;
    }
    if (!std::getline(in_, line_)) {  // end of this file
      open_ = false;
      in_.close();
      ++position_.file;
      position_.byte_offset = 0;
      position_.file_line = 0;
      continue;
    }
    const uint64_t line_number = ++position_.file_line;  // 1-based, for messages
    const uint64_t global = position_.global_line++;
    // Counted by hand: tellg() is -1 after a last line without a newline. (A resume past the end just ends.)
    position_.byte_offset += line_.size() + 1;
    if (static_cast<int64_t>(global % options_.num_shards) != options_.shard_index) continue;
    if (line_.empty()) continue;  // blank lines carry nothing
    absl::Status parsed = ParseCriteoLine(line_, out);
    if (parsed.ok()) return true;
    if (options_.on_error == CriteoReaderOptions::OnError::kSkip) {
      ++skipped_;
      continue;
    }
    return absl::InvalidArgumentError(
        absl::StrFormat("%s:%d: %s", files_[position_.file], line_number, parsed.message()));
  }
  return false;
}

}  // namespace kestrel
