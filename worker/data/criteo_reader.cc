#include "worker/data/criteo_reader.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace kestrel {

absl::Status ParseCriteoLine(absl::string_view line, CriteoExample* out) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // when called directly
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

}  // namespace kestrel
