#include "worker/data/time_split.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "worker/data/schema_parser.h"

namespace kestrel {

absl::StatusOr<TimeSplit> TimeSplitFrom(const std::vector<std::string>& files, int column, char delimiter,
                                        uint32_t every) {
  if (every < 2) return absl::InvalidArgumentError("a time split holds out 1/every of the lines: every >= 2");
  std::vector<std::string> text;
  std::vector<std::pair<double, size_t>> numbers;  // (value, its index in text)
  std::string line;
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in.good()) return absl::NotFoundError(absl::StrFormat("cannot open data file %s", file));
    for (bool header = true; std::getline(in, line); header = false) {
      if (header) continue;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      absl::StatusOr<std::vector<std::string>> columns = SplitDelimitedLine(line, delimiter, '"');
      if (!columns.ok() || static_cast<int>(columns->size()) <= column || (*columns)[column].empty()) continue;
      std::string& value = (*columns)[column];
      double number = 0;
      if (absl::SimpleAtod(value, &number) && !std::isnan(number)) numbers.emplace_back(number, text.size());
      text.push_back(std::move(value));
    }
    if (in.bad()) return absl::DataLossError(absl::StrFormat("cannot read data file %s", file));
  }
  if (!numbers.empty() && numbers.size() != text.size()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the time column holds numbers and text (%d of %d values are numbers): not one order", numbers.size(),
        text.size()));
  }
  std::vector<size_t> order(text.size());
  if (!numbers.empty()) {
    std::sort(numbers.begin(), numbers.end());
    for (size_t i = 0; i < numbers.size(); ++i) order[i] = numbers[i].second;
  } else {
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return text[a] < text[b]; });
  }
  const size_t n = order.size();
  if (n < 2 || text[order.front()] == text[order.back()]) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the time column has %s: there is no later part to validate on", n == 0 ? "no value" : "a single value"));
  }
  // The first value of the last 1/every; equal values fall on one side, so the split starts at the first line
  // holding that value (never the very first value: something must train).
  size_t at = n - std::max<size_t>(1, n / every);
  auto same = [&](size_t a, size_t b) {
    return numbers.empty() ? text[order[a]] == text[order[b]] : numbers[a].first == numbers[b].first;
  };
  while (at > 0 && same(at - 1, at)) --at;
  if (at == 0) {  // the last share is all one value, which starts the column: the next value starts the split
    at = n - std::max<size_t>(1, n / every);
    while (at < n && same(at, 0)) ++at;
  }
  TimeSplit split;
  split.from = text[order[at]];
  split.lines = static_cast<int64_t>(n);
  split.held = static_cast<int64_t>(n - at);
  split.first = text[order.front()];
  split.last = text[order.back()];
  return split;
}

}  // namespace kestrel
