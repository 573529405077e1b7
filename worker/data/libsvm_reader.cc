#include "worker/data/libsvm_reader.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace kestrel {

absl::Status ParseLibsvmLine(absl::string_view line, LibsvmExample* out) {
  if (auto hash = line.find('#'); hash != absl::string_view::npos) line = line.substr(0, hash);
  std::vector<absl::string_view> tokens = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (tokens.empty()) return absl::InvalidArgumentError("no label");
  float label;
  if (!absl::SimpleAtof(tokens[0], &label) || !std::isfinite(label)) {
    return absl::InvalidArgumentError(absl::StrFormat("label '%s' is not a number", tokens[0].substr(0, 20)));
  }
  out->label = label > 0 ? 1.0f : 0.0f;
  out->indices.clear();
  out->values.clear();
  for (size_t i = 1; i < tokens.size(); ++i) {
    std::pair<absl::string_view, absl::string_view> pair = absl::StrSplit(tokens[i], absl::MaxSplits(':', 1));
    uint64_t index;
    float value;
    if (pair.first == "qid") continue;  // ranking files: the query id is not a feature
    if (!absl::SimpleAtoi(pair.first, &index) || !absl::SimpleAtof(pair.second, &value) || !std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("feature '%s' is not index:value with a finite value", tokens[i].substr(0, 30)));
    }
    out->indices.push_back(index);
    out->values.push_back(value);
  }
  return absl::OkStatus();
}

}  // namespace kestrel
